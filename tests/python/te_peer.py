"""Peer process for the Transfer Engine tests: owns a registered buffer and answers commands.

Started by conftest.TePeer. Prints one JSON line {"name", "addr", "len", "pid"} once ready, then
reads commands from stdin, one per line, answering one line each:
  fill <offset> <length> <seed>   fill a range with the test pattern      -> "ok"
  sha <offset> <length>           sha256 hex of a range                   -> "<hex>"
  ping                                                                    -> "pong"
  notifies                        drain get_notifies() -> JSON [[name, msg], ...]
  quit                                                                    -> exits
"""
import hashlib
import json
import sys

import numpy as np

from mooncake.engine import TransferEngine


def pattern(length, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=length, dtype=np.uint8)


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 8 << 20
    protocol = sys.argv[2] if len(sys.argv) > 2 else "tcp"
    te = TransferEngine()
    rc = te.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, "")
    if rc != 0:
        print(json.dumps({"error": rc}), flush=True)
        return 1
    buf = np.zeros(size, dtype=np.uint8)
    rc = te.register_memory(buf.ctypes.data, buf.nbytes)
    if rc != 0:
        print(json.dumps({"error": rc}), flush=True)
        return 1
    print(json.dumps({"name": te.get_local_hostname(), "addr": buf.ctypes.data, "len": size,
                      "port": te.get_rpc_port()}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        cmd = parts[0]
        if cmd == "fill":
            off, length, seed = map(int, parts[1:4])
            buf[off:off + length] = pattern(length, seed)
            out = "ok"
        elif cmd == "sha":
            off, length = map(int, parts[1:3])
            out = hashlib.sha256(buf[off:off + length].tobytes()).hexdigest()
        elif cmd == "ping":
            out = "pong"
        elif cmd == "notifies":
            out = json.dumps([[n.name, n.msg] for n in te.get_notifies()])
        elif cmd == "quit":
            break
        else:
            out = "error unknown command"
        print(out, flush=True)
    te.unregister_memory(buf.ctypes.data)
    te.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
