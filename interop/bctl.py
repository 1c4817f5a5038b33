#!/usr/bin/env python3
"""bctl: VM A's remote control for the agent in VM B (interop/agent.py).

  bctl.py ping [SECONDS]           wait until the agent answers (default 60 s)
  bctl.py run [-t S] 'CMD'         run CMD in B; print its output; exit with its status
  bctl.py start NAME 'CMD'         start CMD in B in the background
  bctl.py wait [-t S] NAME         wait for it; print its output; exit with its status
  bctl.py quit                     stop the agent

B's output is printed with each line prefixed "B| ".
"""
import json
import os
import socket
import sys
import time

PORT = 4790


def request(req, connect_for=5.0):
    peer = os.environ["SRT_PEER_IP"]
    deadline = time.monotonic() + connect_for
    while True:
        try:
            s = socket.create_connection((peer, PORT), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    s.settimeout(None)
    with s, s.makefile("rw") as f:
        f.write(json.dumps(req) + "\n")
        f.flush()
        rep = json.loads(f.readline())
    out = rep.get("out", "")
    if out:
        sys.stdout.write("".join(f"B| {l}\n" for l in out.rstrip("\n").split("\n")))
        sys.stdout.flush()
    return rep["rc"]


def main(argv):
    timeout = 120
    if len(argv) > 2 and argv[1] in ("run", "wait") and argv[2] == "-t":
        timeout = float(argv[3])
        del argv[2:4]
    op = argv[1] if len(argv) > 1 else ""
    if op == "ping":
        return request({"op": "run", "cmd": "true"}, float(argv[2]) if len(argv) > 2 else 60)
    if op == "run" and len(argv) == 3:
        return request({"op": "run", "cmd": argv[2], "timeout": timeout})
    if op == "start" and len(argv) == 4:
        return request({"op": "start", "name": argv[2], "cmd": argv[3]})
    if op == "wait" and len(argv) == 3:
        return request({"op": "wait", "name": argv[2], "timeout": timeout})
    if op == "quit":
        return request({"op": "quit"})
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
