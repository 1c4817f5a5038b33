#!/usr/bin/env python3
"""A raw ibcmd protocol client (src/switch/proto.rs, version 1) that sends a
DREQ of its own comm ID slice (to its own port: it comes back to it) and one
with a comm ID outside it, which ibcmd must drop, count and log.

    switch_spoof.py SOCKET DEVICE     prints "pid N" and the slice
"""
import os
import socket
import struct
import sys

VERSION = 1


def msg(kind, body):
    return struct.pack("<HBB", VERSION, kind, 0) + body


def dreq(local_id, remote_id):
    mad = bytearray(256)
    mad[0:4] = bytes([1, 0x07, 2, 0x03])  # base version, CM class, v2, Send
    mad[8:16] = struct.pack(">Q", 0x1234)
    mad[16:18] = struct.pack(">H", 0x0015)  # DREQ
    mad[24:32] = struct.pack(">II", local_id, remote_id)
    return bytes(mad)


def send_mad(conn, dlid, mad):
    addr = struct.pack("<HBHB16sBBBI", dlid, 0, 0, 0, bytes(16), 0, 0, 0, 0)
    conn.send(msg(4, struct.pack("<B", 1) + addr + mad))


def main():
    path, device = sys.argv[1], sys.argv[2]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.settimeout(10)
    conn.connect(path)
    name = device.encode()
    conn.send(msg(1, struct.pack("<IH", os.getpid(), len(name)) + name))
    reply = conn.recv(65536)
    version, kind = struct.unpack_from("<HB", reply)
    status, base, bits = struct.unpack_from("<iIB", reply, 4)
    assert (version, kind, status) == (VERSION, 0x81, 0), (version, kind, status)
    lid = struct.unpack_from("<H", reply, 4 + 9 + 8 + 1 + 1 + 1)[0]
    mask = (1 << bits) - 1
    outside = base ^ (1 << 31)
    print(f"pid {os.getpid()}")
    print(f"slice {base:#010x}..{base | mask:#010x}, port LID {lid}")
    send_mad(conn, lid, dreq(base | 1, base | 2))
    send_mad(conn, lid, dreq(outside | 1, outside | 2))
    print(f"sent a DREQ from {base | 1:#010x} (own) and one from {outside | 1:#010x} (spoofed)")
    # Stats, answered after both sends were handled.
    conn.send(msg(5, struct.pack("<I", 7)))
    while True:
        reply = conn.recv(65536)
        if reply[2] == 0x85:
            break


main()
