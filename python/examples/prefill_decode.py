"""Prefill -> decode hand-off of a KV block between two processes through the store.

The prefill process computes a (fake) KV cache block, one buffer per layer, and stores it under
one key with batch_put_from_multi_buffers (the vLLM store-connector pattern). The decode process
learns the key through a queue and loads the block straight into its own registered per-layer
buffers with batch_get_into_multi_buffers.

    python3 prefill_decode.py --bin-dir build/bin
"""
import argparse
import hashlib
import multiprocessing as mp

import numpy as np

LAYERS, TOKENS, HEADS, DIM = 8, 256, 8, 64          # K and V per layer: 2*256*8*64*2 bytes


def open_store(master):
    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    assert store.setup("localhost", "P2PHANDSHAKE", "64MB", "16MB", "tcp", "", master) == 0
    return store


def prefill(master, to_decode, to_prefill):
    store = open_store(master)
    rng = np.random.default_rng(42)
    layers = [rng.standard_normal((2, TOKENS, HEADS, DIM)).astype(np.float16)
              for _ in range(LAYERS)]
    for a in layers:
        assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
    key = "req-0001/block-0"
    rc = store.batch_put_from_multi_buffers([key], [[a.ctypes.data for a in layers]],
                                            [[a.nbytes for a in layers]])
    assert rc == [0], rc
    digest = hashlib.sha256(b"".join(a.tobytes() for a in layers)).hexdigest()
    to_decode.put((key, digest))
    assert to_prefill.get(timeout=60) == "done"   # keep our segment up until decode read it
    store.close()


def decode(master, to_decode, to_prefill, results):
    store = open_store(master)
    layers = [np.empty((2, TOKENS, HEADS, DIM), dtype=np.float16) for _ in range(LAYERS)]
    for a in layers:
        assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
    key, digest = to_decode.get(timeout=60)
    got = store.batch_get_into_multi_buffers([key], [[a.ctypes.data for a in layers]],
                                             [[a.nbytes for a in layers]])
    ok = got == [sum(a.nbytes for a in layers)] and \
        hashlib.sha256(b"".join(a.tobytes() for a in layers)).hexdigest() == digest
    results.put((key, got, ok))
    to_prefill.put("done")
    store.close()


def main():
    from _cluster import master_address
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir")
    args = ap.parse_args()
    master = master_address(args.bin_dir)
    ctx = mp.get_context("spawn")
    to_decode, to_prefill, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=prefill, args=(master, to_decode, to_prefill)),
             ctx.Process(target=decode, args=(master, to_decode, to_prefill, results))]
    for p in procs:
        p.start()
    key, got, ok = results.get(timeout=60)
    for p in procs:
        p.join(60)
    print(f"decode loaded {key}: {got[0]} bytes, checksum match: {ok}")
    raise SystemExit(0 if ok and all(p.exitcode == 0 for p in procs) else 1)


if __name__ == "__main__":
    main()
