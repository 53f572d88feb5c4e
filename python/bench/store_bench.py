"""Store put/get through the Python API vs the C API, in the same run.

Starts a private mooncake_master and one mooncake_client storage server, then measures for
4 KiB objects in batches of 128 and for single 32 MiB objects:

  py-zc    zero copy: batch_put_from / batch_get_into (put_from / get_into for batch 1)
  py-bytes bytes API: put_batch / get_batch (put / get for batch 1)
  c        mc_store_batch_put / mc_store_batch_get_into (mc_store_cbench, same process layout)

and reports median microseconds per call, throughput and the py-zc / c ratio against the binding's
targets (32 MiB within 1.2x, 4 KiB batches within 2x).

    PYTHONPATH=build/python python3 python/bench/store_bench.py --bin-dir build/bin [--iters 30]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from mooncake.store import MooncakeDistributedStore

CASES = [(4096, 128, 2.0), (32 << 20, 1, 1.2)]


def start(argv, prefix):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        if line.startswith(prefix):
            return p, line.split()
    raise RuntimeError(f"{argv[0]} exited early")


def bench_python(store, size, batch, iters, zero_copy):
    total = size * batch
    src = np.frombuffer(np.random.default_rng(1).bytes(total), dtype=np.uint8).copy()
    dst = np.zeros(total, dtype=np.uint8)
    if zero_copy:
        assert store.register_buffer(src.ctypes.data, total) == 0
        assert store.register_buffer(dst.ctypes.data, total) == 0
    values = [src[i * size:(i + 1) * size].tobytes() for i in range(batch)]
    sptr = [src.ctypes.data + i * size for i in range(batch)]
    dptr = [dst.ctypes.data + i * size for i in range(batch)]
    sizes = [size] * batch
    put_us, get_us, errors = [], [], 0
    tag = "zc" if zero_copy else "by"
    for it in range(iters + 3):
        keys = [f"pybench-{os.getpid()}-{tag}-{it}-{i}" for i in range(batch)]
        t0 = time.perf_counter()
        if zero_copy:
            if batch == 1:
                r = [store.put_from(keys[0], sptr[0], size)]
            else:
                r = store.batch_put_from(keys, sptr, sizes)
        else:
            r = [store.put(keys[0], values[0])] if batch == 1 else [store.put_batch(keys, values)]
        t1 = time.perf_counter()
        if zero_copy:
            if batch == 1:
                g = [store.get_into(keys[0], dptr[0], size)]
            else:
                g = store.batch_get_into(keys, dptr, sizes)
            ok = all(x == size for x in g)
        else:
            g = [store.get(keys[0])] if batch == 1 else store.get_batch(keys)
            ok = all(len(x) == size for x in g)
        t2 = time.perf_counter()
        errors += (not ok) + sum(1 for x in r if x != 0)
        store.batch_remove(keys, True)
        if it >= 3:
            put_us.append((t1 - t0) * 1e6)
            get_us.append((t2 - t1) * 1e6)
    if zero_copy:
        errors += not np.array_equal(src, dst)
        store.unregister_buffer(src.ctypes.data)
        store.unregister_buffer(dst.ctypes.data)
    return {"put_us_median": statistics.median(put_us), "get_us_median": statistics.median(get_us),
            "errors": errors}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.environ.get("MC_BIN_DIR"))
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if not args.bin_dir:
        sys.exit("--bin-dir (or MC_BIN_DIR) is required")
    procs = []
    try:
        m, words = start([os.path.join(args.bin_dir, "mooncake_master"), "--port=0",
                          "--metrics_port=-1", "--wal_dir=", "--log_level=warn"],
                         "mooncake_master listening")
        procs.append(m)
        master = "127.0.0.1:" + [w.split("=")[1] for w in words if w.startswith("rpc_port=")][0]
        s, _ = start([os.path.join(args.bin_dir, "mooncake_client"), "--local_hostname=127.0.0.1",
                      f"--master_server_address={master}", "--global_segment_size=512MB",
                      "--protocol=tcp", "--log_level=warn"], "mooncake_client ready")
        procs.append(s)
        store = MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master) == 0
        results = []
        for size, batch, target in CASES:
            row = {"size": size, "batch": batch, "target": target}
            row["py-zc"] = bench_python(store, size, batch, args.iters, True)
            row["py-bytes"] = bench_python(store, size, batch, args.iters, False)
            out = subprocess.run([os.path.join(args.bin_dir, "mc_store_cbench"),
                                  f"--master={master}", f"--size={size}", f"--batch={batch}",
                                  f"--iters={args.iters}"], capture_output=True, text=True,
                                 timeout=600)
            if out.returncode != 0:
                sys.exit(f"mc_store_cbench failed: {out.stderr[-2000:]}")
            row["c"] = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(row)
        store.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=10)

    print(f"{'case':<16}{'impl':<10}{'put us':>10}{'get us':>10}{'put MB/s':>10}"
          f"{'get MB/s':>10}")
    verdict = 0
    for row in results:
        mb = row["size"] * row["batch"] / 1e6
        case = f"{row['size'] // 1024} KiB x{row['batch']}" if row["size"] < 1 << 20 \
            else f"{row['size'] >> 20} MiB x{row['batch']}"
        for impl in ("c", "py-zc", "py-bytes"):
            r = row[impl]
            print(f"{case:<16}{impl:<10}{r['put_us_median']:>10.1f}{r['get_us_median']:>10.1f}"
                  f"{mb / r['put_us_median'] * 1e6:>10.0f}{mb / r['get_us_median'] * 1e6:>10.0f}"
                  + ("  ERRORS" if r.get("errors") else ""))
        rp = row["py-zc"]["put_us_median"] / row["c"]["put_us_median"]
        rg = row["py-zc"]["get_us_median"] / row["c"]["get_us_median"]
        ok = rp <= row["target"] and rg <= row["target"]
        verdict |= not ok
        row["ratio_put"], row["ratio_get"] = rp, rg
        print(f"{case:<16}py-zc/c   put {rp:.2f}x  get {rg:.2f}x  (target <= {row['target']}x) "
              f"{'OK' if ok else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
