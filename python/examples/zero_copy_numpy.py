"""Zero-copy numpy round trip: register, put_from, get_into, and get_buffer viewed by numpy.

    python3 zero_copy_numpy.py --bin-dir build/bin
"""
import argparse

import numpy as np

from _cluster import master_address
from mooncake.store import MooncakeDistributedStore


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir")
    args = ap.parse_args()

    store = MooncakeDistributedStore()
    assert store.setup("localhost", "P2PHANDSHAKE", "64MB", "16MB", "tcp", "",
                       master_address(args.bin_dir)) == 0

    src = np.random.randn(1024, 1024).astype(np.float32)       # 4 MiB
    dst = np.empty_like(src)
    for a in (src, dst):                                        # zero copy needs registration
        assert store.register_buffer(a.ctypes.data, a.nbytes) == 0

    assert store.put_from("tensor", src.ctypes.data, src.nbytes) == 0
    n = store.get_into("tensor", dst.ctypes.data, dst.nbytes)
    assert n == src.nbytes, n
    print("get_into round trip equal:", np.array_equal(src, dst))

    handle = store.get_buffer("tensor")                         # bytes owned by the handle
    view = np.frombuffer(handle, dtype=np.float32).reshape(src.shape)
    print("get_buffer view equal:", np.array_equal(view, src),
          "| zero copy:", view.ctypes.data == handle.ptr())

    for a in (src, dst):
        store.unregister_buffer(a.ctypes.data)
    store.close()


if __name__ == "__main__":
    main()
