#!/usr/bin/env python3
"""Misbehaving tenants of ibcmd (issue 30): raw clients of its protocol
(src/switch/proto.rs, version 1), run by tenant_isolation.sh as users other
than the honest tenants'. Each mode stops by itself (after SECONDS) and
prints what it did and what the daemon refused, one "name value" a line, at
its end or when stopped (SIGTERM).

    misbehaving_tenant.py hijack SOCKET DEVICE DLID REJ_ID REP_ID MRA_ID
        sends, addressed to LID DLID, a REJ (MessageRejected REQ, reason 28,
        private data "rejected by attacker") with RemoteCommID REJ_ID, a REP
        with its own QPN (0xbadbad) with RemoteCommID REP_ID, and an MRA
        (MessageMRAed REQ, service timeout 31) with RemoteCommID MRA_ID: the
        answers to REQs the daemon routed to another process. Each carries a
        LocalCommID of the sender's own slice. Ends once the daemon has
        handled them (its answer to a Stats sent after them).
    misbehaving_tenant.py flood SOCKET DEVICE DLID SECONDS RATE
        one registration sending RATE spoofed MADs a second to LID DLID:
        comm IDs outside its slice, and REPs, REJs, MRAs and SIDR_REPs for
        requests it never got.
    misbehaving_tenant.py stats SOCKET SECONDS CONNECTIONS
        CONNECTIONS connections (100 new ones a tick at most, 20 ticks a
        second) that never register and never read: they send Stats (1,000
        a tick in all), each until its socket is full; one the daemon closes
        is replaced.
    misbehaving_tenant.py reconnect SOCKET DEVICE DLID SECONDS RATE
        RATE times a second: connects and closes; every other time it
        registers first and sends a DREQ of its slice (so the slice needs
        its timewait).
    misbehaving_tenant.py listen SOCKET DEVICE SECONDS REGISTRATIONS PER
        keeps REGISTRATIONS registrations, each listening on PER new service
        IDs; then, without end (100 a second at most), closes the oldest and
        registers a new one; a refused registration closes the oldest too.
"""
import os
import random
import signal
import socket
import struct
import sys
import time

VERSION = 1
REGISTER, LISTEN, SEND, STATS = 1, 2, 4, 5
REGISTERED, LISTENED, RECV, STATS_REPLY = 0x81, 0x82, 0x84, 0x85
CM_CLASS = 0x07
REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REP = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x18
MSG_REQ = 0  # MessageRejected / MessageMRAed: the REQ
HIJACK_QPN = 0xBADBAD
SERVICE_BASE = 0x00000000BAD00000  # the listen mode's first service ID


def msg(kind, body=b""):
    return struct.pack("<HBB", VERSION, kind, 0) + body


def cm_mad(attr, local_id, remote_id, tid):
    mad = bytearray(256)
    mad[0:4] = bytes([1, CM_CLASS, 2, 0x03])  # base version, CM class, v2, Send
    mad[8:16] = struct.pack(">Q", tid)
    mad[16:18] = struct.pack(">H", attr)
    mad[24:32] = struct.pack(">II", local_id, remote_id)
    return mad


def rej(local_id, remote_id, tid, text):
    mad = cm_mad(REJ, local_id, remote_id, tid)
    mad[32] = MSG_REQ << 6
    mad[34:36] = struct.pack(">H", 28)  # IB_CM_REJ_CONSUMER_DEFINED
    mad[108 : 108 + len(text)] = text
    return bytes(mad)


def rep(local_id, remote_id, tid):
    mad = cm_mad(REP, local_id, remote_id, tid)
    mad[36:40] = struct.pack(">I", HIJACK_QPN << 8)
    mad[44:48] = struct.pack(">I", 0x123456 << 8)  # starting PSN
    mad[50] = 15 << 3 | 1  # target ACK delay, end-to-end flow control
    mad[51] = 7 << 5  # RNR retry count
    mad[52:60] = struct.pack(">Q", 0xBAD0BAD0BAD0BAD0)  # local CA GUID
    mad[60:80] = b"accepted by attacker"
    return bytes(mad)


def mra(local_id, remote_id, tid):
    mad = cm_mad(MRA, local_id, remote_id, tid)
    mad[32] = MSG_REQ << 6
    mad[33] = 31 << 3  # service timeout: 2^31 * 4.096 us, 2.4 hours
    mad[34:55] = b"stalled by attacker.."
    return bytes(mad)


def send_msg(dlid, mad, port=1):
    addr = struct.pack("<HBHB16sBBBI", dlid, 0, 0, 0, bytes(16), 0, 0, 0, 0)
    return msg(SEND, struct.pack("<B", port) + addr + mad)


def connect(path, blocking=True):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.settimeout(10 if blocking else 0)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        raise
    return conn


def register(conn, device):
    """Registers; the slice (base, mask) or the daemon's negative errno."""
    name = device.encode()
    conn.send(msg(REGISTER, struct.pack("<IH", os.getpid(), len(name)) + name))
    reply = recv_kind(conn, REGISTERED)
    status, base, bits = struct.unpack_from("<iIB", reply, 4)
    if status != 0:
        return status
    return base, (1 << bits) - 1


def recv_kind(conn, kind):
    """The next message of `kind` (MADs routed here meanwhile are skipped)."""
    while True:
        reply = conn.recv(65536)
        if not reply:
            raise ConnectionResetError("closed by the daemon")
        if reply[2] == kind:
            return reply


def stats_barrier(conn):
    """Returns once the daemon handled everything sent before."""
    conn.send(msg(STATS, struct.pack("<I", 7)))
    recv_kind(conn, STATS_REPLY)


# What the mode did so far, printed at its end, also when it is stopped
# (SIGTERM).
counts = {}


def report():
    for name, value in counts.items():
        print(f"{name} {value}")
    sys.stdout.flush()


def hijack(path, device, dlid, rej_id, rep_id, mra_id):
    conn = connect(path)
    slice_ = register(conn, device)
    if isinstance(slice_, int):
        sys.exit(f"registration refused: {slice_}")
    base, mask = slice_
    print(f"uid {os.getuid()} pid {os.getpid()}: slice {base:#010x}..{base | mask:#010x}")
    sent = [
        ("REJ (MessageRejected REQ, reason 28)", rej_id, rej(base | 1, rej_id, 0xA1, b"rejected by attacker")),
        (f"REP (QPN {HIJACK_QPN:#x})", rep_id, rep(base | 2, rep_id, 0xA2)),
        ("MRA (MessageMRAed REQ, service timeout 31)", mra_id, mra(base | 3, mra_id, 0xA3)),
    ]
    for what, remote, mad in sent:
        conn.send(send_msg(dlid, mad))
        print(f"sent a {what} for RemoteCommID {remote:#010x} to LID {dlid}")
    stats_barrier(conn)
    print("the daemon handled all three")


def flood(path, device, dlid, seconds, rate):
    counts.update(spoofed_sent=0)
    conn = connect(path)
    slice_ = register(conn, device)
    if isinstance(slice_, int):
        sys.exit(f"registration refused: {slice_}")
    base, mask = slice_
    outside = base ^ 0x80000000
    rng = random.Random(30)
    kinds = [
        lambda n, r: cm_mad(DREQ, outside | n & mask, r, n),
        lambda n, r: cm_mad(RTU, outside | n & mask, r, n),
        lambda n, r: cm_mad(REQ, outside | n & mask, 0, n),
        lambda n, r: rep(base | n & mask, r, n),
        lambda n, r: rej(base | n & mask, r, n, b"flood"),
        lambda n, r: rej(0, r, n, b"flood"),
        lambda n, r: mra(base | n & mask, r, n),
        lambda n, r: cm_mad(SIDR_REP, r, 0, n),
    ]
    tick = 0.01
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        for _ in range(max(1, int(rate * tick))):
            n = counts["spoofed_sent"] + 1
            mad = kinds[n % len(kinds)](n, rng.getrandbits(32))
            conn.send(send_msg(dlid, bytes(mad)))
            counts["spoofed_sent"] = n
        time.sleep(max(0.0, tick - (time.monotonic() - t0)))
    stats_barrier(conn)


def stats(path, seconds, connections):
    counts.update(connected=0, refused=0, closed_by_daemon=0, stats_sent=0, open=0)
    conns = []
    per_tick = 1000  # Stats a tick, 20 ticks a second
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        opened = 0
        # Never more than 100 new connections a tick: one closed at once
        # (over the quota) is retried at that pace, not in a tight loop.
        while len(conns) < connections and opened < 100:
            opened += 1
            try:
                conns.append(connect(path, blocking=False))
                counts["connected"] += 1
            except OSError:
                counts["refused"] += 1
                break
        budget = per_tick
        for c in list(conns):
            while budget > 0:
                try:
                    c.send(msg(STATS, struct.pack("<I", 1)))
                except BlockingIOError:
                    break  # full: the daemon stopped reading it
                except OSError:
                    counts["closed_by_daemon"] += 1
                    conns.remove(c)
                    c.close()
                    break
                budget -= 1
                counts["stats_sent"] += 1
        counts["open"] = len(conns)
        time.sleep(max(0.0, 0.05 - (time.monotonic() - t0)))


def reconnect(path, device, dlid, seconds, rate):
    counts.update(connections=0, refused=0, registered=0, registration_refused=0)
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        n += 1
        try:
            conn = connect(path)
            counts["connections"] += 1
            if n % 2 == 0:
                slice_ = register(conn, device)
                if isinstance(slice_, int):
                    counts["registration_refused"] += 1
                else:
                    counts["registered"] += 1
                    base, _ = slice_
                    conn.send(send_msg(dlid, bytes(cm_mad(DREQ, base | 1, 0x12345678, n))))
            conn.close()
        except OSError:
            counts["refused"] += 1
        time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t0)))


def listen(path, device, seconds, registrations, per):
    counts.update(registered=0, registration_refused=0, connection_refused=0, listens=0,
                  listens_refused=0, closed=0, held=0)
    held = []
    service = SERVICE_BASE
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        if len(held) >= registrations:
            held.pop(0).close()
            counts["closed"] += 1
        try:
            conn = connect(path)
            slice_ = register(conn, device)
        except OSError:
            counts["connection_refused"] += 1
            slice_ = None
        if not isinstance(slice_, tuple):
            if slice_ is not None:
                counts["registration_refused"] += 1
                conn.close()
            # Refused: make room, as a process would that tries again.
            if held:
                held.pop(0).close()
                counts["closed"] += 1
        else:
            counts["registered"] += 1
            held.append(conn)
            try:
                for seq in range(per):
                    conn.send(msg(LISTEN, struct.pack("<IQQB", seq, service + seq, 2**64 - 1, 0)))
                for _ in range(per):
                    status = struct.unpack_from("<i", recv_kind(conn, LISTENED), 8)[0]
                    counts["listens" if status == 0 else "listens_refused"] += 1
            except OSError:
                counts["connection_refused"] += 1
                held.remove(conn)
                conn.close()
            service += per
        counts["held"] = len(held)
        time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "hijack":
        hijack(args[0], args[1], int(args[2]), *(int(a, 0) for a in args[3:6]))
    elif mode == "flood":
        flood(args[0], args[1], int(args[2]), float(args[3]), int(args[4]))
    elif mode == "stats":
        stats(args[0], float(args[1]), int(args[2]))
    elif mode == "reconnect":
        reconnect(args[0], args[1], int(args[2]), float(args[3]), int(args[4]))
    elif mode == "listen":
        listen(args[0], args[1], float(args[2]), int(args[3]), int(args[4]))
    else:
        sys.exit(f"unknown mode {mode}")


try:
    main()
finally:
    report()
