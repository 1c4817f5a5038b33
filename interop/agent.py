#!/usr/bin/env python3
"""The kernel side's agent in the two-VM interoperability suite (VM B).

VM A drives every scenario; this agent runs what A asks for in VM B, where the
kernel CM is loaded: rdma-core's tools (rping, ucmatose, udaddy, rdma_server,
rdma_client), tc filters, sysfs counter reads. One JSON object per line each
way over TCP on SRT_SELF_IP:PORT:

  {"op": "run", "cmd": "...", "timeout": S}  -> {"rc": N, "out": "..."}
  {"op": "start", "name": "x", "cmd": "..."} -> {"rc": 0}
  {"op": "wait", "name": "x", "timeout": S}  -> {"rc": N, "out": "..."}
                                                 (rc 124 and killed on timeout)
  {"op": "quit"}                             -> {"rc": 0}, then the agent exits

Commands run with bash, stdout and stderr merged. The agent exits after
"quit", or when no request has come for IDLE seconds (A is gone).
"""
import json
import os
import socket
import subprocess
import sys

PORT = 4790
IDLE = 600


def main():
    host = os.environ.get("SRT_SELF_IP", "0.0.0.0")
    srv = socket.create_server((host, PORT), reuse_port=True)
    srv.settimeout(IDLE)
    procs = {}
    print(f"agent: listening on {host}:{PORT}", flush=True)
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            print("agent: idle, exiting", flush=True)
            return 1
        with conn, conn.makefile("rw") as f:
            for line in f:
                req = json.loads(line)
                op = req["op"]
                print(f"agent: {op} {req.get('name', '')} {req.get('cmd', '')}".rstrip(), flush=True)
                if op == "quit":
                    f.write(json.dumps({"rc": 0}) + "\n")
                    f.flush()
                    for p, _ in procs.values():
                        p.kill()
                    return 0
                if op == "run":
                    try:
                        r = subprocess.run(["bash", "-c", req["cmd"]], stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True,
                                           timeout=req.get("timeout", 120))
                        rep = {"rc": r.returncode, "out": r.stdout}
                    except subprocess.TimeoutExpired as e:
                        rep = {"rc": 124, "out": (e.stdout or b"").decode(errors="replace")}
                elif op == "start":
                    log = open(f"/tmp/agent-{req['name']}.log", "w+")
                    p = subprocess.Popen(["bash", "-c", req["cmd"]], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                    procs[req["name"]] = (p, log)
                    rep = {"rc": 0}
                elif op == "wait":
                    p, log = procs.pop(req["name"])
                    try:
                        rc = p.wait(timeout=req.get("timeout", 120))
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                        rc = 124
                    log.seek(0)
                    rep = {"rc": rc, "out": log.read()}
                    log.close()
                else:
                    rep = {"rc": 2, "out": f"agent: unknown op {op}\n"}
                f.write(json.dumps(rep) + "\n")
                f.flush()


if __name__ == "__main__":
    sys.exit(main())
