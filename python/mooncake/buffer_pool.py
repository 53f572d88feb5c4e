"""BufferPool: registered scratch buffers leased for repeated zero-copy calls.

Upstream's helper (``mooncake.buffer_pool.BufferPool``, also ``mooncake.store.BufferPool``)
with its constructor, ``acquire`` / ``buffer`` / ``prewarm`` / ``close`` and lease API
(``ptr``, ``size``, ``buffer``, ``release``, context manager) and its rules: a lease's memory is
registered with the store, so ``get_into`` / ``put_from`` / ``get_into_ranges`` move bytes
without a copy; ``release`` fails while memoryviews of the lease are alive; ``close`` fails
while leases are active; ``max_bytes`` (default twice the store's local buffer) bounds leased
plus cached bytes; ``max_regions`` bounds active leases; exhaustion blocks (``block``,
``timeout``) or raises.

Where the memory comes from differs: upstream sub-allocates the store's setup-time local
buffer and registers an overflow buffer only when that is full. Here every region is shared
memory the pool registers once and keeps for reuse after release (cached per size class:
powers of two from ``min_size_class`` up to ``max_size_class``; larger requests get an exact
region that is unregistered on release), so a steady workload registers nothing after warm-up.
Cached regions are unregistered when room is needed for another size and at ``close``.
"""
import ctypes
import sys
import threading
import time

from . import _store

__all__ = ["BufferPool", "BufferLease", "RegisteredBufferPool", "RegisteredBufferLease"]

_KIB = 1024


def _next_pow2(n):
    return 1 << (n - 1).bit_length()


class _Region:
    __slots__ = ("base", "ptr", "size", "size_class", "cached")

    def __init__(self, base, ptr, size, size_class, cached):
        self.base, self.ptr, self.size = base, ptr, size
        self.size_class, self.cached = size_class, cached


class BufferLease:
    """One leased region: ``ptr`` (registered address), ``size`` (bytes asked for),
    ``buffer`` (a memoryview of ``size`` bytes), ``release()``."""

    def __init__(self, pool, region, size):
        self._pool, self._region, self._size = pool, region, size
        self._array = (ctypes.c_ubyte * max(size, 1)).from_address(region.ptr)
        self._base_refs = sys.getrefcount(self._array)

    @property
    def ptr(self):
        if self._region is None:
            raise RuntimeError("buffer lease is closed")
        return self._region.ptr

    @property
    def size(self):
        return self._size

    @property
    def buffer(self):
        if self._region is None:
            raise RuntimeError("buffer lease is closed")
        return memoryview(self._array).cast("B")[:self._size]

    def _exported(self):
        # every memoryview (and slice of one) keeps a reference to the array it views
        return sys.getrefcount(self._array) > self._base_refs

    def release(self):
        if self._region is None:
            return
        if self._exported():
            raise RuntimeError("cannot release buffer while exported views exist")
        region, self._region, self._array = self._region, None, None
        self._pool._release(region)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def __del__(self):
        if getattr(self, "_region", None) is not None and not self._exported():
            try:
                self.release()
            except Exception:  # interpreter shutdown: the pool may be gone
                pass


class BufferPool:
    """Leases of registered memory for zero-copy calls on ``store`` (see the module doc)."""

    def __init__(self, store, max_bytes=0, min_size_class=64 * _KIB, max_size_class=None,
                 alignment=8 * _KIB * _KIB, block_on_exhaustion=True, default_timeout=None,
                 max_regions=None, prewarm_size=None, prewarm_count=0):
        local = getattr(store, "_local_buffer_size", None) if store is not None else None
        if local is None:
            raise RuntimeError("MooncakeDistributedStore is not initialized")
        if min_size_class <= 0 or alignment <= 0:
            raise RuntimeError("min_size_class and alignment must be positive")
        if alignment < ctypes.sizeof(ctypes.c_void_p) or alignment & (alignment - 1):
            raise RuntimeError("alignment must be a power of two and at least sizeof(void*)")
        if local == 0:
            raise RuntimeError("BufferPool requires a store configured with a local buffer")
        self._store = store
        self._max_bytes = 2 * local if max_bytes == 0 else max(max_bytes, local)
        self._min_class = min_size_class
        self._max_class = self._max_bytes if max_size_class is None else max_size_class
        self._alignment = alignment
        self._block = bool(block_on_exhaustion)
        self._timeout = default_timeout
        self._max_regions = max_regions
        self._cond = threading.Condition()
        self._free = {}      # size class -> [regions] registered, not leased
        self._active = 0     # leased regions
        self._bytes = 0      # registered bytes: leased + cached
        self._closed = False
        if prewarm_size is not None and prewarm_count > 0:
            self.prewarm(prewarm_size, prewarm_count)

    # -- sizes and regions ------------------------------------------------------------------

    def _class_of(self, size):
        size = max(size, 1)
        if size > self._max_class:
            return size, False
        return max(self._min_class, _next_pow2(size)), True

    def _new_region(self, size_class, cached):
        """Shared memory of size_class bytes at an address aligned to the pool's alignment,
        registered with the store; None when memory or registration fails."""
        extra = self._alignment if self._alignment > 4096 else 0
        base = _store._shm_alloc(size_class + extra)
        if not base:
            return None
        ptr = (base + self._alignment - 1) & ~(self._alignment - 1) if extra else base
        if self._store.register_buffer(ptr, size_class) != 0:
            _store._shm_free(base)
            raise RuntimeError("buffer registration failed")
        return _Region(base, ptr, size_class, size_class, cached)

    def _drop_region(self, region):
        rc = self._store.unregister_buffer(region.ptr)
        _store._shm_free(region.base)
        if rc != 0:
            raise RuntimeError("buffer unregistration failed")

    def _raise_if_closed(self):
        if self._closed:
            raise RuntimeError("buffer pool is closed")

    def _evict_cached(self, need):
        """Unregisters cached regions until need more bytes fit; True if they do. Lock held."""
        for cls in sorted(self._free, reverse=True):
            lst = self._free[cls]
            while lst and self._bytes + need > self._max_bytes:
                r = lst.pop()
                self._bytes -= r.size
                self._drop_region(r)
        return self._bytes + need <= self._max_bytes

    def _try_take(self, size_class, cached):
        """A region for one lease, or None when the pool is at a limit. Lock held."""
        if self._max_regions is not None and self._active >= self._max_regions:
            return None
        lst = self._free.get(size_class) if cached else None
        if lst:
            self._active += 1
            return lst.pop()
        if not self._evict_cached(size_class):
            return None
        region = self._new_region(size_class, cached)
        if region is None:
            return None
        self._bytes += size_class
        self._active += 1
        return region

    # -- public API -------------------------------------------------------------------------

    def acquire(self, size, block=None, timeout=None):
        """A lease of at least size bytes; blocks until one is free unless block=False
        (RuntimeError "buffer pool is exhausted") or timeout (seconds) passes."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise TypeError(f"acquire(): size must be a non-negative int, got {size!r}")
        should_block = self._block if block is None else bool(block)
        tmo = self._timeout if timeout is None else timeout
        if tmo is not None and tmo < 0:
            raise RuntimeError("timeout must be non-negative")
        size_class, cached = self._class_of(size)
        if size_class > self._max_bytes:
            raise RuntimeError("requested buffer size exceeds pool capacity")
        deadline = None if tmo is None else time.monotonic() + tmo
        with self._cond:
            while True:
                self._raise_if_closed()
                region = self._try_take(size_class, cached)
                if region is not None:
                    return BufferLease(self, region, size)
                if not should_block:
                    raise RuntimeError("buffer pool is exhausted")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError("timed out waiting for buffer")
                self._cond.wait(left)

    buffer = acquire

    def prewarm(self, size, count):
        """Registers count regions of size's class now, so later leases find them cached."""
        size_class, cached = self._class_of(size)
        if not cached:
            return
        with self._cond:
            self._raise_if_closed()
            have = len(self._free.get(size_class, ()))
            for _ in range(max(0, count - have)):
                if self._bytes + size_class > self._max_bytes:
                    break
                region = self._new_region(size_class, True)
                if region is None:
                    break
                self._bytes += size_class
                self._free.setdefault(size_class, []).append(region)

    def _release(self, region):
        with self._cond:
            self._active -= 1
            if region.cached and not self._closed:
                self._free.setdefault(region.size_class, []).append(region)
            else:
                self._bytes -= region.size
                self._drop_region(region)
            self._cond.notify_all()

    def close(self):
        """Unregisters every cached region. RuntimeError while leases are active."""
        with self._cond:
            if self._closed:
                return
            if self._active:
                raise RuntimeError("cannot close buffer pool with active leases")
            self._closed = True
            for lst in self._free.values():
                for r in lst:
                    self._bytes -= r.size
                    self._drop_region(r)
            self._free.clear()
            self._cond.notify_all()

    def __del__(self):
        try:
            if not getattr(self, "_closed", True) and not self._active:
                self.close()
        except Exception:
            pass


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
