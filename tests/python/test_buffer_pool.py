"""mooncake.buffer_pool.BufferPool against a real master and storage server: leases are
registered memory that zero-copy calls use directly; the lifecycle rules hold (release refused
while a view lives, close refused while a lease is active, limits block or raise), and regions
are reused instead of registered again."""
import threading
import uuid

import numpy as np
import pytest

from mooncake.buffer_pool import BufferPool as PublicBufferPool
from mooncake.store import BufferPool, MooncakeDistributedStore, RegisteredBufferPool


def key():
    return f"bp-{uuid.uuid4().hex[:12]}"


def test_same_class_everywhere():
    assert PublicBufferPool is BufferPool is RegisteredBufferPool


def test_refuses_store_without_setup_or_local_buffer(master, storage):
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(MooncakeDistributedStore())
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", master.addr) == 0
    try:
        with pytest.raises(RuntimeError, match="local buffer"):
            BufferPool(st)
    finally:
        st.close()


def test_zero_copy_roundtrip_through_leases(store):
    pool = BufferPool(store, min_size_class=4096)
    value = np.random.default_rng(7).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    k = key()
    with pool.buffer(len(value)) as src:
        src.buffer[:] = value
        assert store.put_from(k, src.ptr, len(value)) == 0
    with pool.acquire(len(value)) as dst:
        assert store.get_into(k, dst.ptr, dst.size) == len(value)
        view = dst.buffer
        assert bytes(view) == value
        with pytest.raises(RuntimeError, match="exported views"):
            dst.release()
        view.release()
        del view
    pool.close()


def test_regions_are_reused_not_registered_again(store):
    pool = BufferPool(store, min_size_class=4096)
    a = pool.acquire(5000)
    ptr = a.ptr
    a.release()
    b = pool.acquire(7000)           # same 8 KiB class: the cached region comes back
    assert b.ptr == ptr
    c = pool.acquire(7000)           # a second lease of the class needs a new region
    assert c.ptr != ptr
    b.release()
    c.release()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(10)


def test_limits_block_raise_and_wake(store):
    pool = BufferPool(store, min_size_class=4096, max_regions=1)
    held = pool.acquire(100)
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(100, block=False)
    with pytest.raises(RuntimeError, match="timed out"):
        pool.acquire(100, timeout=0.05)
    got = []
    t = threading.Thread(target=lambda: got.append(pool.acquire(100, timeout=10)))
    t.start()
    with pytest.raises(RuntimeError, match="active leases"):
        pool.close()
    held.release()                   # wakes the waiter
    t.join(10)
    assert len(got) == 1 and got[0].ptr
    got[0].release()
    with pytest.raises(RuntimeError, match="exceeds pool capacity"):
        pool.acquire(1 << 40)
    pool.close()


def test_alignment_and_validation(store):
    with pytest.raises(RuntimeError, match="power of two"):
        BufferPool(store, alignment=3000)
    with pytest.raises(RuntimeError, match="positive"):
        BufferPool(store, min_size_class=0)
    pool = BufferPool(store, alignment=1 << 21, prewarm_size=4096, prewarm_count=2)
    lease = pool.acquire(4096)
    assert lease.ptr % (1 << 21) == 0
    lease.release()
    pool.close()
