"""Zero-copy 32 MiB get_into through a dummy client vs an embedded client, in the same run.

Starts a private mooncake_master and one mooncake_client that both stores the objects (its
segment) and serves dummy clients (--port). Then, interleaved round by round:

  embedded  MooncakeDistributedStore.setup(..., global_segment_size=0): get_into into a
            registered numpy buffer (the bytes come from the storage server's segment through
            the transfer engine, shared memory on one host)
  dummy     setup_dummy(...): get_into into alloc_from_mem_pool memory (the real client reads
            its segment into the dummy's mapping)

and reports the median microseconds of each, GiB/s, and dummy / embedded (target: within 1.3x;
exit status 1 when missed).

    PYTHONPATH=build/python /usr/bin/python3 python/bench/dummy_bench.py --bin-dir build/bin \\
        [--iters 30] [--size 33554432] [--json FILE]
"""
import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

from mooncake.store import MooncakeDistributedStore

TARGET = 1.3


def start(argv, prefix):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        if line.startswith(prefix):
            return p, line.split()
    raise RuntimeError(f"{argv[0]} exited early")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.environ.get("MC_BIN_DIR"))
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--size", type=int, default=32 << 20)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if not args.bin_dir:
        sys.exit("--bin-dir (or MC_BIN_DIR) is required")
    n = args.size
    procs = []
    emb = MooncakeDistributedStore()
    dum = MooncakeDistributedStore()
    try:
        m, words = start([os.path.join(args.bin_dir, "mooncake_master"), "--port=0",
                          "--metrics_port=-1", "--wal_dir=", "--log_level=warn"],
                         "mooncake_master listening")
        procs.append(m)
        master = "127.0.0.1:" + [w.split("=")[1] for w in words if w.startswith("rpc_port=")][0]
        port = free_port()
        s, _ = start([os.path.join(args.bin_dir, "mooncake_client"), "--local_hostname=127.0.0.1",
                      f"--master_server_address={master}", "--global_segment_size=512MB",
                      "--protocol=tcp", f"--port={port}", "--log_level=warn"],
                     "mooncake_client ready")
        procs.append(s)
        assert emb.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master) == 0
        assert dum.setup_dummy(3200 << 20, 16 << 20, f"127.0.0.1:{port}") == 0

        src = np.frombuffer(np.random.default_rng(1).bytes(n), dtype=np.uint8).copy()
        edst = np.zeros(n, dtype=np.uint8)
        assert emb.register_buffer(src.ctypes.data, n) == 0
        assert emb.register_buffer(edst.ctypes.data, n) == 0
        ddst = dum.alloc_from_mem_pool(n)
        assert ddst and dum.register_buffer(ddst, n) == 0
        key = f"dummybench-{os.getpid()}"
        assert emb.put_from(key, src.ctypes.data, n) == 0
        times = {"embedded": [], "dummy": []}
        for it in range(args.iters + 3):
            for impl in ("embedded", "dummy"):
                t0 = time.perf_counter()
                r = emb.get_into(key, edst.ctypes.data, n) if impl == "embedded" \
                    else dum.get_into(key, ddst, n)
                dt = time.perf_counter() - t0
                assert r == n, f"{impl} get_into returned {r}"
                if it >= 3:  # warm-up rounds are not counted
                    times[impl].append(dt * 1e6)
        assert bytes(edst[:4096]) == bytes(src[:4096])
        assert ctypes.string_at(ddst, n) == src.tobytes()
        dum.close()
        emb.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=10)

    res = {"size": n, "iters": args.iters, "target": TARGET,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"{'impl':<10}{'median us':>12}{'GiB/s':>10}")
    for impl in ("embedded", "dummy"):
        med = statistics.median(times[impl])
        res[f"{impl}_us_median"] = med
        res[f"{impl}_us_all"] = times[impl]
        print(f"{impl:<10}{med:>12.0f}{n / med * 1e6 / (1 << 30):>10.2f}")
    ratio = res["dummy_us_median"] / res["embedded_us_median"]
    res["ratio"] = ratio
    ok = ratio <= TARGET
    print(f"dummy/embedded {ratio:.2f}x (target <= {TARGET}x) {'OK' if ok else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
