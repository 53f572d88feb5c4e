"""Upstream Mooncake's EngramStore: per-head embedding tables of one Engram layer, kept in the
store and read back row by row (``mooncake.store.EngramStore`` / ``EngramStoreConfig``).

Layout (as upstream): head h of layer L is one object ``engram:l<L>:h<h>`` holding a C-order
float32 table of shape [table_vocab_sizes[h], embedding_dim]. ``lookup(row_ids)`` takes
[B, L, H] row ids and returns a float32 array [B, L, H, D] whose [b, l, h] row is row
``row_ids[b][l][h]`` of head h's table, read with one ``get_into_ranges`` call into the output
array (registered for the call). Errors follow upstream's binding: a bad config raises
ValueError, a failed populate / lookup / remove raises RuntimeError; a failed lookup leaves no
partial rows (the output is zeroed before raising, as upstream's backend does).
"""

import logging

try:
    import numpy as np
except ImportError:  # numpy is needed only to populate / look up
    np = None

log = logging.getLogger("mooncake")

INVALID_PARAMS = -600     # upstream ErrorCode::INVALID_PARAMS
OBJECT_NOT_FOUND = -704   # upstream ErrorCode::OBJECT_NOT_FOUND
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _int64(v, what):
    if isinstance(v, bool) or not isinstance(v, int) and not (
            np is not None and isinstance(v, np.integer)):
        raise TypeError(f"{what} must be int, not {type(v).__name__}")
    v = int(v)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise TypeError(f"{what} {v} does not fit in int64")
    return v


class EngramStoreConfig:
    """Physical layout of one layer: table_vocab_sizes (rows per head, default [1024]) and
    embedding_dim (floats per row, default 64). Checked when an EngramStore is built."""

    __slots__ = ("_vocab", "_dim")

    def __init__(self):
        self._vocab = [1024]
        self._dim = 64

    @property
    def table_vocab_sizes(self):
        return list(self._vocab)

    @table_vocab_sizes.setter
    def table_vocab_sizes(self, value):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise TypeError("table_vocab_sizes must be a list of int")
        self._vocab = [_int64(v, "table_vocab_sizes entry") for v in value]

    @property
    def embedding_dim(self):
        return self._dim

    @embedding_dim.setter
    def embedding_dim(self, value):
        v = _int64(value, "embedding_dim")
        if not -(1 << 31) <= v < (1 << 31):
            raise TypeError(f"embedding_dim {v} does not fit in int32")
        self._dim = v

    def __repr__(self):
        return (f"EngramStoreConfig(table_vocab_sizes={self._vocab}, "
                f"embedding_dim={self._dim})")


def _unwrap_store(store):
    """The MooncakeDistributedStore to use (None: metadata only)."""
    if store is None:
        return None
    from .store import MooncakeDistributedStore
    if isinstance(store, MooncakeDistributedStore):
        return store
    raise RuntimeError("EngramStore store parameter must be a PyClient or store wrapper that "
                       "implements _get_pyclient_capsule()")


class EngramStore:
    """Embedding tables of Engram layer ``layer_id`` in a store (see the module doc).

    EngramStore(layer_id, config, store=None): store None builds a metadata-only object
    (getters work; populate / lookup / remove_from_store raise RuntimeError)."""

    def __init__(self, layer_id, config, store=None):
        layer_id = _int64(layer_id, "layer_id")
        if not -(1 << 31) <= layer_id < (1 << 31):
            raise TypeError(f"layer_id {layer_id} does not fit in int32")
        if not isinstance(config, EngramStoreConfig):
            raise TypeError("config must be an EngramStoreConfig")
        self._store = _unwrap_store(store)
        vocab, dim = config.table_vocab_sizes, config.embedding_dim
        if not vocab:
            raise ValueError("EngramStoreConfig.table_vocab_sizes must not be empty")
        if dim <= 0:
            raise ValueError("EngramStoreConfig.embedding_dim must be positive")
        if any(v <= 0 for v in vocab):
            raise ValueError("EngramStoreConfig.table_vocab_sizes must contain only positive "
                             "values")
        self._vocab = vocab
        self._dim = dim
        self._keys = [f"engram:l{layer_id}:h{h}" for h in range(len(vocab))]

    # --- metadata -------------------------------------------------------------------------

    def get_table_vocab_sizes(self):
        return list(self._vocab)

    def get_store_keys(self):
        return list(self._keys)

    def get_num_heads(self):
        return len(self._vocab)

    def get_embedding_dim(self):
        return self._dim

    # --- store operations -----------------------------------------------------------------

    def remove_from_store(self, force=False):
        """Remove every head table of this layer; missing ones are skipped. Returns how many
        were removed; raises RuntimeError with the first other error code."""
        if not isinstance(force, bool):
            raise TypeError("force must be bool")
        rc = self._remove(force)
        if rc < 0:
            raise RuntimeError(f"remove_from_store failed, rc={rc}")
        return rc

    def _remove(self, force):
        if self._store is None:
            return INVALID_PARAMS
        removed, first_error = 0, 0
        for key in self._keys:
            rc = self._store.remove(key, force)
            if rc == 0:
                removed += 1
            elif rc != OBJECT_NOT_FOUND and first_error == 0:
                first_error = rc
        return first_error or removed

    def populate(self, embedding_buffers):
        """Store one float32 table [N_h, D] per head (create-only: a head key that exists
        already fails the call before anything is written). On a failure after some tables
        were written, those are removed again. Raises RuntimeError."""
        if not isinstance(embedding_buffers, list):
            raise TypeError("embedding_buffers must be a list")
        if len(embedding_buffers) != len(self._vocab):
            raise RuntimeError("embedding_buffers size must match num_heads")
        if np is None:
            raise RuntimeError("embedding_buffers must be NumPy arrays")
        arrays = []
        for buf, rows in zip(embedding_buffers, self._vocab):
            if not isinstance(buf, np.ndarray):
                raise RuntimeError("embedding_buffers must be NumPy arrays")
            try:
                arr = np.ascontiguousarray(buf, dtype=np.float32)
            except (TypeError, ValueError):
                raise RuntimeError("embedding_buffers must be float32 arrays") from None
            if arr.ndim != 2:
                raise RuntimeError("each embedding buffer must be 2D [N_h, D]")
            if arr.shape != (rows, self._dim):
                raise RuntimeError("embedding buffer shape does not match "
                                   "get_table_vocab_sizes()/get_embedding_dim()")
            arrays.append(arr)
        if self._populate(arrays) != 0:
            raise RuntimeError("populate failed")

    def _populate(self, arrays):
        st = self._store
        if st is None:
            return -1
        exists = st.batch_is_exist(self._keys)
        if len(exists) != len(self._keys):
            log.error("EngramStore: failed to preflight populate key existence")
            return -1
        for key, e in zip(self._keys, exists):
            if e < 0:
                log.error("EngramStore: failed to query key %r before populate, rc=%d", key, e)
                return -1
            if e != 0:
                log.error("EngramStore populate requires empty destination key %r. Remove the "
                          "existing layer first.", key)
                return -1
        ptrs = [a.ctypes.data for a in arrays]
        sizes = [a.nbytes for a in arrays]
        registered = []
        try:
            for p, s in zip(ptrs, sizes):
                if st.register_buffer(p, s) != 0:
                    log.error("EngramStore: register_buffer failed for a head table")
                    return -1
                registered.append(p)
            results = st.batch_put_from(self._keys, ptrs, sizes)
        finally:
            cleanup_failed = False
            for p in registered:
                if st.unregister_buffer(p) != 0:
                    cleanup_failed = True
        ok = len(results) == len(self._keys) and all(r == 0 for r in results)
        if ok and not cleanup_failed:
            return 0
        for i, key in enumerate(self._keys):  # roll back what this call wrote
            if len(results) == len(self._keys) and results[i] != 0:
                continue
            rc = st.remove(key, True)
            if rc not in (0, OBJECT_NOT_FOUND):
                log.error("EngramStore: failed to roll back key %r, rc=%d", key, rc)
        return -1

    def lookup(self, row_ids):
        """Rows of the head tables for row ids [B, L, H] (nested lists or an int64-convertible
        NumPy array) -> float32 ndarray [B, L, H, D]. Raises RuntimeError for an empty or
        ragged input, a wrong head count, a row id out of range, or a table that cannot be
        read."""
        if np is None:
            raise RuntimeError("EngramStore lookup needs numpy")
        H = len(self._vocab)
        if isinstance(row_ids, np.ndarray):
            try:
                ids = np.ascontiguousarray(row_ids, dtype=np.int64)
            except (TypeError, ValueError):
                raise RuntimeError("row_ids array must be convertible to int64") from None
            if ids.ndim != 3:
                raise RuntimeError("row_ids array must have shape [B, L, H]")
            if ids.shape[2] != H:
                raise RuntimeError("row_ids last dimension must match num_heads")
            B, L = ids.shape[0], ids.shape[1]
        else:
            nested = [[[_int64(h, "row id") for h in tok] for tok in batch]
                      for batch in row_ids]
            if not nested or not nested[0]:
                raise RuntimeError("row_ids must not be empty")
            B, L = len(nested), len(nested[0])
            if any(len(batch) != L for batch in nested) or \
                    any(len(tok) != H for batch in nested for tok in batch):
                raise RuntimeError("EngramStore lookup failed")
            ids = np.array(nested, dtype=np.int64).reshape(B, L, H)
        out = np.empty((B, L, H, self._dim), dtype=np.float32)
        if self._lookup(ids, out) != 0:
            raise RuntimeError("EngramStore lookup failed")
        return out

    def _lookup(self, ids, out):
        st = self._store
        B, L, H = ids.shape
        if st is None or B <= 0 or L <= 0:
            return -1
        vocab = np.asarray(self._vocab, dtype=np.int64)
        if ((ids < 0) | (ids >= vocab)).any():
            out.fill(0)
            return -1
        row_bytes = self._dim * 4
        flat = ids.reshape(-1, H)                   # [token, head]
        slots = np.arange(flat.size, dtype=np.int64).reshape(-1, H)
        dsts = [(slots[:, h] * row_bytes).tolist() for h in range(H)]
        srcs = [(flat[:, h] * row_bytes).tolist() for h in range(H)]
        sizes = [[row_bytes] * flat.shape[0] for _ in range(H)]
        ptr, nbytes = out.ctypes.data, out.nbytes
        if st.register_buffer(ptr, nbytes) != 0:
            out.fill(0)
            return -1
        try:
            results = st.get_into_ranges([ptr], [self._keys], [dsts], [srcs], [sizes])
        finally:
            unreg = st.unregister_buffer(ptr)
        ok = unreg == 0 and len(results) == 1 and len(results[0]) == H and all(
            len(results[0][h]) == len(sizes[h]) and all(r == row_bytes for r in results[0][h])
            for h in range(H))
        if not ok:
            out.fill(0)
            return -1
        return 0

    def __repr__(self):
        return (f"EngramStore(keys={self._keys[0]}..., num_heads={len(self._vocab)}, "
                f"embedding_dim={self._dim})")
