"""Minimal put/get through mooncake.store.

    MOONCAKE_MASTER=127.0.0.1:50051 python3 put_get.py
    python3 put_get.py --bin-dir build/bin        # starts a private master + storage server
"""
import argparse

from _cluster import master_address
from mooncake.store import MooncakeDistributedStore, ReplicateConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir")
    args = ap.parse_args()

    store = MooncakeDistributedStore()
    rc = store.setup("localhost", "P2PHANDSHAKE", "64MB", "16MB", "tcp", "",
                     master_address(args.bin_dir))
    if rc != 0:
        raise SystemExit(f"setup failed: {rc}")

    assert store.put("hello_key", b"Hello, Mooncake Store!") == 0
    print(store.get("hello_key").decode())

    cfg = ReplicateConfig()
    cfg.replica_num = 1
    store.put_batch(["a", "b"], [b"alpha", b"beta"], cfg)
    print(store.get_batch(["a", "b", "missing"]))        # b"" for the missing key
    print("exists:", store.batch_is_exist(["a", "missing"]))
    store.close()


if __name__ == "__main__":
    main()
