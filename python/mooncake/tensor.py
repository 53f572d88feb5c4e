"""``mooncake.tensor``: upstream Mooncake's tensor API on top of the byte store.

A tensor object is upstream's byte format (mooncake-integration/integration_utils.h), so objects
written by either implementation read back on the other: a 304-byte little-endian header, then
the C-contiguous element bytes.

    header  (40 B)  magic u32 = 0x4d4f4f4e, version u16 = 1, header_size u16 = 304, dtype i32,
                    ndim i32, layout_kind u32 (FULL 0 / SHARD 1), reserved u32,
                    data_offset u64 (>= 304), data_bytes u64
    layout (264 B)  global_shape i64[8], local_shape i64[8] (unused entries -1), axis_count u32,
                    pad u32, 4 axes of 32 B {kind i32 (DP 0 / TP 1 / EP 2 / PP 3), axis_index i32,
                    shard_rank i32, shard_count i32, split_dim i32, rsv i32, rsv i64}

The element shape is local_shape[:ndim]; data_bytes must equal the object size minus data_offset
and the product of that shape times the element size. Anything else is refused (gets return None,
writes INVALID_PARAMS), never decoded into garbage.

Values are numpy arrays always and torch tensors when torch imports (imported on first use).
Gets return torch tensors when torch is importable and has the dtype (upstream returns torch
tensors), numpy arrays otherwise. numpy has no bfloat16 / float8: those dtypes are written from
torch tensors only and read back without torch (or on a torch without float8) as numpy arrays of
their raw bits (uint16 for BF16, uint8 for F8_*). Element types outside the 15 codes (complex,
strings, objects, float128, ...) are refused with INVALID_PARAMS.

TensorStoreMixin holds the methods; MooncakeDistributedStore inherits them. It only uses the
store's public methods (put/put_parts/upsert_parts/get_buffer/get_into/put_from/...).
"""

import ctypes
import enum
import json
import logging
import struct

try:
    import numpy as np
except ImportError:  # only the tensor API needs numpy; the rest of mooncake.store does not
    np = None

log = logging.getLogger("mooncake")

TENSOR_MAGIC = 0x4D4F4F4E
TENSOR_VERSION = 1
HEADER_SIZE = 304
MAX_DIMS = 8
MAX_AXES = 4

INVALID_PARAMS = -600          # upstream ErrorCode::INVALID_PARAMS
FILE_NOT_FOUND = -1100          # upstream ErrorCode::FILE_NOT_FOUND (save_tensor_to_safetensor)
OBJECT_ALREADY_EXISTS = -705

_HDR = struct.Struct("<IHHiiIIQQ")          # 40 bytes
_SHAPES = struct.Struct("<8q8qII")          # 136 bytes
_AXIS = struct.Struct("<iiiiiiq")           # 32 bytes
assert _HDR.size + _SHAPES.size + MAX_AXES * _AXIS.size == HEADER_SIZE

# Upstream's "writer shard manifest" (store_py_internal.h), stored under
# <key>__parallelism_manifest by put_tensor_with_parallelism with a single TP axis:
# magic u32 0x574d414e, version u16 1, header_size u16 96, dtype, ndim, split_dim, shard_count,
# reserved (i32 each), 4 bytes of padding, global_shape i64[8].
MANIFEST_MAGIC = 0x574D414E
_MANIFEST = struct.Struct("<IHHiiiii4x8q")  # 96 bytes
assert _MANIFEST.size == 96


class TensorDtype(enum.IntEnum):
    FLOAT32 = 0
    FLOAT64 = 1
    INT8 = 2
    UINT8 = 3
    INT16 = 4
    UINT16 = 5
    INT32 = 6
    UINT32 = 7
    INT64 = 8
    UINT64 = 9
    BOOL = 10
    FLOAT16 = 11
    BFLOAT16 = 12
    FLOAT8_E4M3 = 13
    FLOAT8_E5M2 = 14


class TensorLayoutKind(enum.IntEnum):
    FULL = 0
    SHARD = 1


class LayoutAxisKind(enum.IntEnum):
    DP = 0
    TP = 1
    EP = 2
    PP = 3
    RESERVED = 4


_ITEMSIZE = {code: (8 if code in (1, 8, 9) else 4 if code in (0, 6, 7) else
                   2 if code in (4, 5, 11, 12) else 1) for code in TensorDtype}

# numpy dtype of the stored elements, per code (BF16 / F8 as their raw bits)
_STORAGE = {} if np is None else {
    TensorDtype.FLOAT32: np.dtype("<f4"), TensorDtype.FLOAT64: np.dtype("<f8"),
    TensorDtype.INT8: np.dtype("i1"), TensorDtype.UINT8: np.dtype("u1"),
    TensorDtype.INT16: np.dtype("<i2"), TensorDtype.UINT16: np.dtype("<u2"),
    TensorDtype.INT32: np.dtype("<i4"), TensorDtype.UINT32: np.dtype("<u4"),
    TensorDtype.INT64: np.dtype("<i8"), TensorDtype.UINT64: np.dtype("<u8"),
    TensorDtype.BOOL: np.dtype("?"), TensorDtype.FLOAT16: np.dtype("<f2"),
    TensorDtype.BFLOAT16: np.dtype("<u2"), TensorDtype.FLOAT8_E4M3: np.dtype("u1"),
    TensorDtype.FLOAT8_E5M2: np.dtype("u1"),
}
_NUMPY_CODES = {(np.dtype(v).kind, np.dtype(v).itemsize): k for k, v in _STORAGE.items()
                if k not in (TensorDtype.BFLOAT16, TensorDtype.FLOAT8_E4M3,
                             TensorDtype.FLOAT8_E5M2)}
# torch dtype names per code (those a given torch lacks are skipped)
_TORCH_NAMES = {
    TensorDtype.FLOAT32: "float32", TensorDtype.FLOAT64: "float64", TensorDtype.INT8: "int8",
    TensorDtype.UINT8: "uint8", TensorDtype.INT16: "int16", TensorDtype.UINT16: "uint16",
    TensorDtype.INT32: "int32", TensorDtype.UINT32: "uint32", TensorDtype.INT64: "int64",
    TensorDtype.UINT64: "uint64", TensorDtype.BOOL: "bool", TensorDtype.FLOAT16: "float16",
    TensorDtype.BFLOAT16: "bfloat16", TensorDtype.FLOAT8_E4M3: "float8_e4m3fn",
    TensorDtype.FLOAT8_E5M2: "float8_e5m2",
}
# safetensors dtype names
_ST_NAMES = {
    TensorDtype.FLOAT32: "F32", TensorDtype.FLOAT64: "F64", TensorDtype.INT8: "I8",
    TensorDtype.UINT8: "U8", TensorDtype.INT16: "I16", TensorDtype.UINT16: "U16",
    TensorDtype.INT32: "I32", TensorDtype.UINT32: "U32", TensorDtype.INT64: "I64",
    TensorDtype.UINT64: "U64", TensorDtype.BOOL: "BOOL", TensorDtype.FLOAT16: "F16",
    TensorDtype.BFLOAT16: "BF16", TensorDtype.FLOAT8_E4M3: "F8_E4M3",
    TensorDtype.FLOAT8_E5M2: "F8_E5M2",
}
_ST_CODES = {v: k for k, v in _ST_NAMES.items()}



def _need_numpy():
    if np is None:
        raise ImportError("the mooncake tensor API needs numpy (python3-numpy)")


_torch_state = []  # [] = not tried yet, [None] = unavailable, [module]


def torch_module():
    """torch if it imports, else None (tried once, on first use)."""
    if not _torch_state:
        try:
            import torch  # noqa: PLC0415 (slow import, only when tensors are used)
            _torch_state.append(torch)
        except Exception:  # ImportError, or a broken install
            _torch_state.append(None)
    return _torch_state[0]


def _is_torch_tensor(obj):
    torch = torch_module() if type(obj).__module__.startswith("torch") else None
    return torch is not None and isinstance(obj, torch.Tensor)


def _torch_code(torch, dtype):
    for code, name in _TORCH_NAMES.items():
        if getattr(torch, name, None) == dtype:
            return code
    return None


class TensorError(ValueError):
    """A value that cannot be written as a tensor object (unsupported type, dtype or ndim)."""


def _as_array(value):
    """(code, contiguous little-endian numpy array of the storage dtype) of a tensor value."""
    _need_numpy()
    if _is_torch_tensor(value):
        torch = torch_module()
        code = _torch_code(torch, value.dtype)
        if code is None:
            raise TensorError(f"unsupported torch dtype {value.dtype}")
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if code == TensorDtype.BFLOAT16:
            arr = t.view(torch.int16).numpy().view(np.uint16)
        elif code in (TensorDtype.FLOAT8_E4M3, TensorDtype.FLOAT8_E5M2):
            arr = t.view(torch.uint8).numpy()
        else:
            arr = t.numpy()
    elif isinstance(value, np.ndarray) or np.isscalar(value) or isinstance(value, np.generic):
        arr = np.asarray(value)
        code = _NUMPY_CODES.get((arr.dtype.kind, arr.dtype.itemsize))
        if code is None or arr.dtype.kind not in "fiub":
            raise TensorError(f"unsupported numpy dtype {arr.dtype}")
    else:
        raise TensorError(f"{type(value).__name__} is neither a numpy array nor a torch tensor")
    if arr.ndim > MAX_DIMS:
        raise TensorError(f"tensor has {arr.ndim} dimensions, at most {MAX_DIMS} are supported")
    arr = np.asarray(arr, dtype=_STORAGE[code], order="C")  # keeps 0-d, unlike ascontiguousarray
    return code, arr


def _raw(arr):
    """The bytes of a C-contiguous array as a memoryview (any ndim, 0-d and empty included)."""
    return memoryview(arr.reshape(-1).view(np.uint8))


def _shape8(shape):
    return list(shape) + [-1] * (MAX_DIMS - len(shape))


def encode_header(code, local_shape, data_bytes, global_shape=None, layout=TensorLayoutKind.FULL,
                  axes=()):
    """The 304-byte header of a tensor object. axes: (kind, axis_index, shard_rank, shard_count,
    split_dim, rsv_i32, rsv_i64) tuples, at most 4."""
    if global_shape is None:
        global_shape = local_shape
    axes = list(axes)[:MAX_AXES]
    out = _HDR.pack(TENSOR_MAGIC, TENSOR_VERSION, HEADER_SIZE, int(code), len(local_shape),
                    int(layout), 0, HEADER_SIZE, data_bytes)
    out += _SHAPES.pack(*_shape8(global_shape), *_shape8(local_shape), len(axes), 0)
    for a in axes:
        out += _AXIS.pack(*a)
    out += bytes(_AXIS.size * (MAX_AXES - len(axes)))
    return out


def encode(value):
    """(header bytes, data array) of a FULL tensor object holding value. Raises TensorError."""
    code, arr = _as_array(value)
    return encode_header(code, arr.shape, arr.nbytes), arr


def encode_bytes(value):
    """The whole tensor object of value as bytes (header + data)."""
    hdr, arr = encode(value)
    return hdr + arr.tobytes()


class Header:
    """A parsed, validated header (see parse_header)."""

    __slots__ = ("dtype", "ndim", "layout_kind", "data_offset", "data_bytes", "global_shape",
                 "local_shape", "axes")

    def axis(self, kind):
        for a in self.axes:
            if a[0] == kind:
                return a
        return None


def parse_header(buf, total_length=None):
    """Parse and validate the header at the start of buf (bytes-like) as upstream's
    ValidateTensorMetadata does; total_length is the object size (default len(buf)).
    Returns a Header or None."""
    mv = memoryview(buf).cast("B")
    if total_length is None:
        total_length = len(mv)
    if total_length < HEADER_SIZE or len(mv) < HEADER_SIZE:
        return None
    (magic, version, hsize, dtype, ndim, layout_kind, _rsv, data_offset,
     data_bytes) = _HDR.unpack_from(mv, 0)
    if magic != TENSOR_MAGIC or version != TENSOR_VERSION or hsize != HEADER_SIZE:
        return None
    if not 0 <= dtype < len(TensorDtype) or not 0 <= ndim <= MAX_DIMS:
        return None
    shapes = _SHAPES.unpack_from(mv, _HDR.size)
    gshape, lshape, axis_count = shapes[0:8], shapes[8:16], shapes[16]
    if axis_count > MAX_AXES or layout_kind > TensorLayoutKind.SHARD:
        return None
    if data_offset < HEADER_SIZE or data_offset > total_length:
        return None
    if data_bytes != total_length - data_offset:
        return None
    if any(d < 0 for d in gshape[:ndim]) or any(d < 0 for d in lshape[:ndim]):
        return None
    if any(d != -1 for d in gshape[ndim:]) or any(d != -1 for d in lshape[ndim:]):
        return None
    numel = 1
    for d in lshape[:ndim]:
        numel *= d
    if numel * _ITEMSIZE[TensorDtype(dtype)] != data_bytes:
        return None
    axes = []
    for i in range(axis_count):
        a = _AXIS.unpack_from(mv, _HDR.size + _SHAPES.size + i * _AXIS.size)
        kind, _idx, rank, count, split_dim = a[:5]
        if not LayoutAxisKind.DP <= kind <= LayoutAxisKind.RESERVED:
            return None
        if count <= 0 or rank < 0 or rank >= count or split_dim < -1 or split_dim >= ndim:
            return None
        axes.append(a)
    h = Header()
    h.dtype = TensorDtype(dtype)
    h.ndim = ndim
    h.layout_kind = layout_kind
    h.data_offset = data_offset
    h.data_bytes = data_bytes
    h.global_shape = tuple(gshape[:ndim])
    h.local_shape = tuple(lshape[:ndim])
    h.axes = axes
    return h


def _to_value(arr, code):
    """The value handed back to callers: a torch tensor when torch can hold the dtype, else the
    numpy array (raw bits for BF16 / F8 without torch support). arr is owned or a view."""
    torch = torch_module()
    if torch is None:
        return arr
    name = _TORCH_NAMES[code]
    tdtype = getattr(torch, name, None)
    if tdtype is None:
        return arr
    try:
        if code == TensorDtype.BFLOAT16:
            return torch.from_numpy(arr.view(np.int16)).view(tdtype)
        if code in (TensorDtype.FLOAT8_E4M3, TensorDtype.FLOAT8_E5M2):
            return torch.from_numpy(arr).view(tdtype)
        return torch.from_numpy(arr)
    except (TypeError, RuntimeError):  # e.g. torch.from_numpy(uint16) on older torch
        return arr


def _data_view(buf):
    """(Header, numpy array viewing the data in buf, shaped local_shape) of a whole tensor
    object in buf (bytes-like), or None if it is not one. The array may be read-only."""
    _need_numpy()
    mv = memoryview(buf).cast("B")
    h = parse_header(mv)
    if h is None:
        return None
    st = _STORAGE[h.dtype]
    return h, np.frombuffer(mv, dtype=st, count=h.data_bytes // st.itemsize,
                            offset=h.data_offset).reshape(h.local_shape)


def decode(buf, copy=True):
    """The tensor of a whole tensor object in buf (bytes-like), or None if it is not one.
    copy=False returns a view of buf (it must stay alive and unchanged)."""
    dv = _data_view(buf)
    if dv is None:
        return None
    h, arr = dv
    if copy:
        arr = arr.copy()
    elif not arr.flags.writeable:
        arr = arr.copy()  # torch.from_numpy wants writable memory
    return _to_value(arr, h.dtype)


def decode_array(buf):
    """(Header, numpy array copy of the data) of a tensor object, or None."""
    dv = _data_view(buf)
    return None if dv is None else (dv[0], dv[1].copy())


# --- memory access for the *_from / *_into calls ---------------------------------------------


def _readable_ranges():
    spans = []
    try:
        with open("/proc/self/maps", "r", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[1].startswith("r"):
                    lo, hi = parts[0].split("-")
                    spans.append((int(lo, 16), int(hi, 16)))
    except OSError:
        return []
    spans.sort()
    merged = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _mapped(spans, ptr, size):
    return any(lo <= ptr and ptr + size <= hi for lo, hi in spans)


def _view(ptr, size):
    """Writable memoryview of [ptr, ptr+size) (caller checked it is mapped / was written)."""
    return memoryview((ctypes.c_char * size).from_address(ptr)).cast("B")


def _check_ptr(name, ptr, size):
    if not isinstance(ptr, int) or not isinstance(size, int):
        raise TypeError(f"{name}: buffer_ptr and size must be int")
    if ptr < 0 or size < 0:
        raise ValueError(f"{name}: negative buffer_ptr or size")


def _read_object(spans, ptr, size, what):
    """Header of the tensor object in caller memory [ptr, ptr+size), or None (logged)."""
    if ptr == 0 or size < HEADER_SIZE:
        log.error("%s: buffer too small for a tensor header (%d < %d bytes)", what, size,
                  HEADER_SIZE)
        return None
    if not _mapped(spans, ptr, size):
        log.error("%s: buffer [0x%x, +%d) is not mapped readable", what, ptr, size)
        return None
    h = parse_header(_view(ptr, size))
    if h is None:
        log.error("%s: invalid tensor metadata", what)
    return h


# --- TP splitting ------------------------------------------------------------------------------


def tp_key(key, rank):
    """Upstream's name of TP shard rank of key."""
    return f"{key}_tp_{rank}"


def _shard_range(dim, rank, count):
    start = dim * rank // count
    return start, dim * (rank + 1) // count - start


def _split_tp(code, arr, tp_size, split_dim, what, axes=None):
    """[(header, shard array)] for every TP rank of the full tensor arr, or None if the request
    is invalid (logged). axes: the shards' other axes, with a TP axis whose rank each shard
    takes (default: the TP axis alone)."""
    if not isinstance(tp_size, int) or not isinstance(split_dim, int):
        raise TypeError(f"{what}: tp_size and split_dim must be int")
    if split_dim < 0 or split_dim >= arr.ndim or tp_size <= 0:
        log.error("%s: invalid shard parameters (split_dim %d, ndim %d, tp_size %d)", what,
                  split_dim, arr.ndim, tp_size)
        return None
    if arr.shape[split_dim] % tp_size:
        log.error("%s: only uniform sharding is supported (dim %d of size %d, tp_size %d)",
                  what, split_dim, arr.shape[split_dim], tp_size)
        return None
    if axes is None:
        axes = [ParallelAxis("tp", 0, tp_size, split_dim)]
    out = []
    for rank in range(tp_size):
        shard = _slice(arr, split_dim, rank, tp_size)
        out.append((_shard_header(code, arr.shape, shard, _with_tp(axes, rank)), shard))
    return out


# --- general parallelism (upstream's ParallelAxis / TensorParallelism / ReadTarget) -----------


class ParallelAxis:
    """One parallel axis of a shard: kind "tp" / "dp" / "ep" / "pp", rank, size, split_dim,
    expert_id, stage_id (as upstream's ParallelAxis)."""

    __slots__ = ("kind", "rank", "size", "split_dim", "expert_id", "stage_id")

    def __init__(self, kind="", rank=0, size=1, split_dim=None, expert_id=None, stage_id=None):
        self.kind = kind
        self.rank = rank
        self.size = size
        self.split_dim = split_dim
        self.expert_id = expert_id
        self.stage_id = stage_id

    def __repr__(self):
        return (f"ParallelAxis(kind={self.kind!r}, rank={self.rank}, size={self.size}, "
                f"split_dim={self.split_dim}, expert_id={self.expert_id}, "
                f"stage_id={self.stage_id})")


class TensorParallelism:
    """The axes identifying a shard (as upstream's TensorParallelism)."""

    __slots__ = ("axes",)

    def __init__(self, axes=None):
        self.axes = list(axes) if axes is not None else []

    def __repr__(self):
        return f"TensorParallelism(axes={self.axes!r})"


class ReadTarget:
    """What a read wants: mode "as_stored", "shard" or "full", and the target parallelism."""

    __slots__ = ("_mode", "parallelism")

    def __init__(self, mode="as_stored", parallelism=None):
        self.mode = mode
        self.parallelism = parallelism

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, value):
        m = str(value).lower()
        if m not in ("as_stored", "shard", "full"):
            raise RuntimeError("Unsupported ReadTarget mode")
        self._mode = m

    def __repr__(self):
        return f"ReadTarget(mode={self._mode!r}, parallelism={self.parallelism!r})"


_AXIS_ORDER = {"dp": 0, "tp": 1, "ep": 2, "pp": 3}   # upstream's canonical axis order
_AXIS_KINDS = {"dp": LayoutAxisKind.DP, "tp": LayoutAxisKind.TP, "ep": LayoutAxisKind.EP,
               "pp": LayoutAxisKind.PP}
_KIND_NAMES = {int(v): k for k, v in _AXIS_KINDS.items()}


def _axis_int(v, name, optional):
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"ParallelAxis.{name} must be int{' or None' if optional else ''}, "
                        f"not {type(v).__name__}")
    return v


def parse_parallelism(parallelism, what):
    """The axes of a TensorParallelism (kinds lower-case), validated as upstream's
    validate_parallelism_spec: 1..4 axes of distinct known kinds, 0 <= rank < size; TP needs a
    split_dim; DP, EP, PP take none; EP needs expert_id, PP stage_id. None (logged) when
    invalid; TypeError for a field of the wrong type (upstream's cast error)."""
    axes_obj = getattr(parallelism, "axes", None)
    if axes_obj is None:
        log.error("%s: TensorParallelism must provide axes", what)
        return None
    axes = []
    for a in axes_obj:
        if not all(hasattr(a, n) for n in ("kind", "rank", "size")):
            log.error("%s: ParallelAxis must provide kind, rank, and size", what)
            return None
        kind = str(a.kind).lower()
        if kind not in _AXIS_ORDER:
            log.error("%s: unsupported parallel axis kind %r", what, a.kind)
            return None
        axes.append(ParallelAxis(kind, _axis_int(a.rank, "rank", False),
                                 _axis_int(a.size, "size", False),
                                 _axis_int(getattr(a, "split_dim", None), "split_dim", True),
                                 _axis_int(getattr(a, "expert_id", None), "expert_id", True),
                                 _axis_int(getattr(a, "stage_id", None), "stage_id", True)))
    if not axes or len(axes) > MAX_AXES:
        log.error("%s: parallelism needs 1..%d axes, got %d", what, MAX_AXES, len(axes))
        return None
    seen = set()
    for a in axes:
        problem = None
        if a.size <= 0 or not 0 <= a.rank < a.size:
            problem = "invalid rank/size"
        elif a.kind in seen:
            problem = "duplicate axis kinds are not supported"
        elif a.kind == "tp" and a.split_dim is None:
            problem = "TP axis requires split_dim"
        elif a.kind != "tp" and a.split_dim is not None:
            problem = f"{a.kind.upper()} axis must not provide split_dim"
        elif a.kind == "ep" and a.expert_id is None:
            problem = "EP axis requires expert_id"
        elif a.kind == "pp" and a.stage_id is None:
            problem = "PP axis requires stage_id"
        if problem:
            log.error("%s: %s (%r)", what, problem, a)
            return None
        seen.add(a.kind)
    return axes


def _canonical(axes):
    return sorted(axes, key=lambda a: _AXIS_ORDER[a.kind])


def _axis_tuple(a):
    return (a.kind, a.rank, a.size, a.split_dim, a.expert_id, a.stage_id)


def _tp_of(axes):
    return next((a for a in axes if a.kind == "tp"), None)


def _with_tp(axes, rank, size=None):
    """axes with the TP axis's rank (and size) replaced."""
    return [ParallelAxis(a.kind, rank, a.size if size is None else size, a.split_dim,
                         a.expert_id, a.stage_id) if a.kind == "tp" else a for a in axes]


def parallelism_key(key, axes):
    """Upstream's object name of a shard: <key>_tp_<rank> for a single TP axis, else <key>
    followed by __<kind>_<rank>of<size>[_sd<d>][_eid<e>][_sid<s>] per axis in DP, TP, EP, PP
    order."""
    if len(axes) == 1 and axes[0].kind == "tp":
        return tp_key(key, axes[0].rank)
    out = key
    for a in _canonical(axes):
        out += f"__{a.kind}_{a.rank}of{a.size}"
        if a.split_dim is not None:
            out += f"_sd{a.split_dim}"
        if a.expert_id is not None:
            out += f"_eid{a.expert_id}"
        if a.stage_id is not None:
            out += f"_sid{a.stage_id}"
    return out


def _layout_axes(axes, local_shape):
    """Header axis tuples of axes in the given order: (kind, index, rank, count, split_dim or
    -1, expert_id / stage_id, local extent of split_dim); None if a split_dim is out of
    range."""
    out = []
    for i, a in enumerate(axes):
        if a.split_dim is not None and not 0 <= a.split_dim < len(local_shape):
            return None
        rsv0 = (a.expert_id if a.kind == "ep" else a.stage_id if a.kind == "pp" else None) or 0
        extent = local_shape[a.split_dim] if a.split_dim is not None else 0
        out.append((int(_AXIS_KINDS[a.kind]), i, a.rank, a.size,
                    -1 if a.split_dim is None else a.split_dim, rsv0, extent))
    return out


def _stored_axes(h):
    """Canonical axes of a SHARD header, or None for a FULL one."""
    if h.layout_kind != TensorLayoutKind.SHARD:
        return None
    axes = []
    for kind, _, rank, count, sd, rsv0, _ in h.axes:
        name = _KIND_NAMES.get(kind)
        if name is None:
            return None
        axes.append(ParallelAxis(name, rank, count, sd if sd >= 0 else None,
                                 rsv0 if name == "ep" else None, rsv0 if name == "pp" else None))
    return _canonical(axes)


def _same_axes(stored, wanted):
    return stored is not None and \
        [_axis_tuple(a) for a in stored] == [_axis_tuple(a) for a in _canonical(wanted)]


def _shard_header(code, global_shape, shard, axes):
    ax = _layout_axes(axes, shard.shape)
    if ax is None:
        return None
    return encode_header(code, shard.shape, shard.nbytes, global_shape=global_shape,
                         layout=TensorLayoutKind.SHARD, axes=ax)


def _slice(arr, dim, rank, count):
    start, n = _shard_range(arr.shape[dim], rank, count)
    return np.ascontiguousarray(np.take(arr, np.arange(start, start + n), axis=dim))


def parse_writer_partition(writer_partition, what):
    """(rank, size, split_dim) of a writer partition (any object with those int fields), as
    upstream's parse_writer_partition_spec: size > 0, 0 <= rank < size, split_dim >= 0; None
    (logged) when invalid."""
    if not all(hasattr(writer_partition, n) for n in ("rank", "size", "split_dim")):
        log.error("%s: writer_partition must provide rank, size, and split_dim", what)
        return None
    rank, size, sd = (_axis_int(getattr(writer_partition, n), n, False)
                      for n in ("rank", "size", "split_dim"))
    if size <= 0 or not 0 <= rank < size or sd < 0:
        log.error("%s: invalid writer partition (rank %d, size %d, split_dim %d)", what, rank,
                  size, sd)
        return None
    return rank, size, sd


def writer_key(key, rank, size, split_dim):
    """Upstream's object name of writer partition rank of key."""
    return f"{key}__writer_{rank}of{size}_sd{split_dim}"


def _batch_requests(n, parallelisms, writer_partitions, what):
    """(parallelisms, writer_partitions) as lists of n (None = n Nones), or None (logged) when
    one is neither None nor a list of n."""
    out = []
    for name, v in (("parallelisms", parallelisms), ("writer_partitions", writer_partitions)):
        if v is None:
            v = [None] * n
        elif not isinstance(v, list) or len(v) != n:
            log.error("%s: %s must be a list as long as keys, or None", what, name)
            return None
        out.append(v)
    return out


def _results(n, code):
    return [code] * n


class TensorStoreMixin:
    """Upstream Mooncake's tensor methods (put_tensor, get_tensor, ...), see module doc."""

    # --- internals ------------------------------------------------------------------------

    def _tensor_write_parts(self, key, parts, config, upsert):
        fn = self.upsert_parts if upsert else self.put_parts
        parts = [p for p in parts if len(p)] or [b""]
        if config is None:
            return fn(key, *parts)
        return fn(key, *parts, config=config)

    def _tensor_write(self, key, value, config, upsert, what):
        try:
            hdr, arr = encode(value)
        except TensorError as e:
            log.error("%s for %s: %s", what, key, e)
            return INVALID_PARAMS
        return self._tensor_write_parts(key, [hdr, _raw(arr)], config, upsert)

    def _tensor_batch_write(self, keys, values, config, upsert, what):
        keys = list(keys)
        values = list(values)
        if len(keys) != len(values) or not keys:
            log.error("%s: keys and tensors size mismatch (%d vs %d)", what, len(keys),
                      len(values))
            return _results(len(keys), INVALID_PARAMS)
        return [self._tensor_write(k, v, config, upsert, what) for k, v in zip(keys, values)]

    def _tensor_write_tp(self, key, value, config, tp_size, split_dim, upsert, what):
        try:
            code, arr = _as_array(value)
        except TensorError as e:
            log.error("%s for %s: %s", what, key, e)
            return INVALID_PARAMS
        return self._write_tp_shards(key, code, arr, config, tp_size, split_dim, upsert, what)

    def _write_tp_shards(self, key, code, arr, config, tp_size, split_dim, upsert, what):
        """Split arr (dtype code) into tp_size shards along split_dim and write shard r under
        tp_key(key, r). 0, INVALID_PARAMS when it cannot be split, or the first failed
        write's status (the shards before it stay written)."""
        shards = _split_tp(code, arr, tp_size, split_dim, what)
        if shards is None:
            return INVALID_PARAMS
        for rank, (hdr, shard) in enumerate(shards):
            rc = self._tensor_write_parts(tp_key(key, rank), [hdr, _raw(shard)],
                                          config, upsert)
            if rc != 0:
                return rc
        return 0

    def _tensor_from(self, keys, ptrs, sizes, config, upsert, what):
        keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
        if not (len(keys) == len(ptrs) == len(sizes)):
            log.error("%s: keys, buffer_ptrs and sizes must have the same length", what)
            return _results(len(keys), INVALID_PARAMS)
        for p, s in zip(ptrs, sizes):
            _check_ptr(what, p, s)
        spans = _readable_ranges()
        results = [INVALID_PARAMS] * len(keys)
        ok = [i for i in range(len(keys))
              if _read_object(spans, ptrs[i], sizes[i], f"{what} ({keys[i]})") is not None]
        if ok:
            fn = self.batch_upsert_from if upsert else self.batch_put_from
            args = ([keys[i] for i in ok], [ptrs[i] for i in ok], [sizes[i] for i in ok])
            rcs = fn(*args) if config is None else fn(*args, config=config)
            for i, rc in zip(ok, rcs):
                results[i] = rc
        return results

    def _tensor_from_decoded(self, ptr, size, what):
        """(code, array) of the tensor object in caller memory, or None (logged)."""
        _check_ptr(what, ptr, size)
        h = _read_object(_readable_ranges(), ptr, size, what)
        if h is None:
            return None
        dec = decode_array(_view(ptr, size))
        return None if dec is None else (dec[0].dtype, dec[1])

    def _tensor_from_tp(self, key, ptr, size, config, tp_size, split_dim, what):
        if tp_size <= 1:
            return self._tensor_from([key], [ptr], [size], config, False, what)[0]
        dec = self._tensor_from_decoded(ptr, size, what)
        if dec is None:
            return INVALID_PARAMS
        code, arr = dec
        return self._write_tp_shards(key, code, arr, config, tp_size, split_dim, False, what)

    def _get_decoded(self, key, decoder):
        """decoder(buffer of key): None when key is missing or not a valid tensor object
        (logged as get_tensor's error)."""
        h = self.get_buffer(key)
        if h is None:
            return None
        dec = decoder(h)
        if dec is None:
            log.error("get_tensor(%s): invalid tensor metadata", key)
        return dec

    def _get_tensor_header(self, key):
        """(Header, numpy array) of key or None."""
        return self._get_decoded(key, decode_array)

    # --- basic ---------------------------------------------------------------------------

    def put_tensor(self, key, tensor):
        """Store tensor (torch tensor or numpy array) under key. 0 or a negative code."""
        return self._tensor_write(key, tensor, None, False, "put_tensor")

    def pub_tensor(self, key, tensor, config=None):
        """put_tensor with a ReplicateConfig."""
        return self._tensor_write(key, tensor, config, False, "pub_tensor")

    def upsert_tensor(self, key, tensor):
        """Insert or replace the tensor under key."""
        return self._tensor_write(key, tensor, None, True, "upsert_tensor")

    def upsert_pub_tensor(self, key, tensor, config=None):
        return self._tensor_write(key, tensor, config, True, "upsert_pub_tensor")

    def batch_put_tensor(self, keys, tensors_list):
        """One status per key."""
        return self._tensor_batch_write(keys, tensors_list, None, False, "batch_put_tensor")

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        return self._tensor_batch_write(keys, tensors_list, config, False, "batch_pub_tensor")

    def batch_upsert_tensor(self, keys, tensors_list):
        return self._tensor_batch_write(keys, tensors_list, None, True, "batch_upsert_tensor")

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        return self._tensor_batch_write(keys, tensors_list, config, True,
                                        "batch_upsert_pub_tensor")

    def get_tensor(self, key):
        """The tensor under key, or None (missing key or not a valid tensor object)."""
        return self._get_decoded(key, decode)

    def batch_get_tensor(self, keys):
        """One tensor or None per key."""
        keys = list(keys)
        if not keys:
            return []
        out = []
        for k, h in zip(keys, self.batch_get_buffer(keys)):
            t = None if h is None else decode(h)
            if h is not None and t is None:
                log.error("batch_get_tensor(%s): invalid tensor metadata", k)
            out.append(t)
        return out

    # --- zero copy -----------------------------------------------------------------------

    def get_tensor_into(self, key, buffer_ptr, size):
        """Read the tensor object of key into registered memory [buffer_ptr, +size) and return a
        tensor viewing its data there (the memory must outlive it), or None."""
        _check_ptr("get_tensor_into", buffer_ptr, size)
        if buffer_ptr == 0:
            log.error("get_tensor_into: buffer pointer cannot be null")
            return None
        n = self.get_into(key, buffer_ptr, size)
        if n < 0:
            return None
        t = decode(_view(buffer_ptr, n), copy=False) if n else None
        if t is None:
            log.error("get_tensor_into(%s): invalid tensor metadata", key)
        return t

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        """One tensor (viewing its buffer) or None per key; a list of INVALID_PARAMS when the
        arguments do not match (upstream)."""
        keys, buffer_ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
        if not (len(keys) == len(buffer_ptrs) == len(sizes)) or 0 in buffer_ptrs:
            log.error("batch_get_tensor_into: mismatched lengths or a null buffer pointer")
            return _results(len(keys), INVALID_PARAMS)
        for p, s in zip(buffer_ptrs, sizes):
            _check_ptr("batch_get_tensor_into", p, s)
        if not keys:
            return []
        out = []
        for k, p, n in zip(keys, buffer_ptrs, self.batch_get_into(keys, buffer_ptrs, sizes)):
            t = decode(_view(p, n), copy=False) if n > 0 else None
            if n > 0 and t is None:
                log.error("batch_get_tensor_into(%s): invalid tensor metadata", k)
            out.append(t)
        return out

    def put_tensor_from(self, key, buffer_ptr, size):
        """Store the tensor object (header + data, as get_tensor_into leaves it) found in
        registered memory. The header is validated first."""
        return self._tensor_from([key], [buffer_ptr], [size], None, False, "put_tensor_from")[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._tensor_from(keys, buffer_ptrs, sizes, None, False, "batch_put_tensor_from")

    def upsert_tensor_from(self, key, buffer_ptr, size):
        return self._tensor_from([key], [buffer_ptr], [size], None, True,
                                 "upsert_tensor_from")[0]

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._tensor_from(keys, buffer_ptrs, sizes, None, True, "batch_upsert_tensor_from")

    def get_tensor_into_cuda(self, key, tensor):
        """Upstream reads into a CUDA tensor through CUDA IPC with a dummy client only; Mooncake-C
        has neither, so this returns INVALID_PARAMS as upstream does for a real client."""
        log.error("get_tensor_into_cuda: CUDA IPC tensor read requires a dummy client "
                  "(not supported by Mooncake-C)")
        return INVALID_PARAMS

    def batch_get_tensor_into_cuda(self, keys, tensors_list):
        log.error("batch_get_tensor_into_cuda: CUDA IPC tensor read requires a dummy client "
                  "(not supported by Mooncake-C)")
        return _results(len(list(keys)), INVALID_PARAMS)

    # --- tensor parallel -----------------------------------------------------------------

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Split tensor along split_dim into tp_size equal shards and store all of them as
        <key>_tp_<r> (tp_rank is not used, as upstream); tp_size <= 1 stores key itself."""
        if tp_size <= 1:
            return self.put_tensor(key, tensor)
        return self._tensor_write_tp(key, tensor, None, tp_size, split_dim, False,
                                     "put_tensor_with_tp")

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.pub_tensor(key, tensor, config)
        return self._tensor_write_tp(key, tensor, config, tp_size, split_dim, False,
                                     "pub_tensor_with_tp")

    def _batch_tp(self, base_keys, tensors_list, config, tp_size, split_dim, what):
        base_keys, tensors_list = list(base_keys), list(tensors_list)
        if len(base_keys) != len(tensors_list) or not base_keys:
            log.error("%s: keys and tensors size mismatch", what)
            return _results(len(base_keys), INVALID_PARAMS)
        return [self._tensor_write_tp(k, t, config, tp_size, split_dim, False, what)
                for k, t in zip(base_keys, tensors_list)]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                 split_dim=0):
        if tp_size <= 1:
            return self.batch_put_tensor(base_keys, tensors_list)
        return self._batch_tp(base_keys, tensors_list, None, tp_size, split_dim,
                              "batch_put_tensor_with_tp")

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                 tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.batch_pub_tensor(base_keys, tensors_list, config)
        return self._batch_tp(base_keys, tensors_list, config, tp_size, split_dim,
                              "batch_pub_tensor_with_tp")

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """The shard <key>_tp_<tp_rank> (key itself when tp_size <= 1), or None."""
        if tp_size <= 1:
            return self.get_tensor(key)
        return self.get_tensor(tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        if tp_size <= 1:
            return self.batch_get_tensor(base_keys)
        return self.batch_get_tensor([tp_key(k, tp_rank) for k in base_keys])

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1,
                                split_dim=0):
        if tp_size <= 1:
            return self.get_tensor_into(key, buffer_ptr, size)
        return self.get_tensor_into(tp_key(key, tp_rank), buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0,
                                      tp_size=1):
        if tp_size <= 1:
            return self.batch_get_tensor_into(base_keys, buffer_ptrs, sizes)
        return self.batch_get_tensor_into([tp_key(k, tp_rank) for k in base_keys], buffer_ptrs,
                                          sizes)

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """The full tensor object in registered memory, split and stored as <key>_tp_<r>."""
        return self._tensor_from_tp(key, buffer_ptr, size, None, tp_size, split_dim,
                                    "put_tensor_with_tp_from")

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1,
                                      split_dim=0):
        base_keys, buffer_ptrs, sizes = list(base_keys), list(buffer_ptrs), list(sizes)
        if tp_size <= 1:
            return self.batch_put_tensor_from(base_keys, buffer_ptrs, sizes)
        if not (len(base_keys) == len(buffer_ptrs) == len(sizes)) or not base_keys:
            log.error("batch_put_tensor_with_tp_from: size mismatch")
            return _results(len(base_keys), INVALID_PARAMS)
        return [self._tensor_from_tp(k, p, s, None, tp_size, split_dim,
                                     "batch_put_tensor_with_tp_from")
                for k, p, s in zip(base_keys, buffer_ptrs, sizes)]

    # --- general parallelism (upstream's *_with_parallelism) -------------------------------
    #
    # Write routes, as upstream's (store_py_parallel_write.h):
    # * no parallelism: the full tensor under key;
    # * a single TP axis: tensor is this rank's shard, stored as <key>_tp_<rank> with the global
    #   shape inferred (split_dim extent x size), plus <key>__parallelism_manifest;
    # * TP with other axes: tensor is the full tensor; this TP rank's slice is stored under
    #   parallelism_key(key, axes), plus the manifest;
    # * no TP axis (DP / EP / PP): tensor is stored as is under parallelism_key(key, axes);
    # * *_from with a TP axis: the buffer holds the full tensor; every TP rank's slice is
    #   stored (no manifest); *_from without: the object as is under parallelism_key;
    # * writer_partition (rank, size, split_dim), instead of parallelism: the full tensor,
    #   this writer's slice stored as <key>__writer_<r>of<n>_sd<d> (a single TP axis in its
    #   header), plus <key>__writer_manifest; a "full" read without parallelism reassembles it.
    # Every shard's header carries the axes (in the caller's order) and the global shape.

    def _write_manifest(self, key, code, gshape, split_dim, count, config, upsert,
                        suffix="__parallelism_manifest"):
        manifest = _MANIFEST.pack(MANIFEST_MAGIC, 1, _MANIFEST.size, int(code), len(gshape),
                                  split_dim, count, 0, *_shape8(gshape))
        rc = self._tensor_write_parts(key + suffix, [manifest], config, upsert)
        return 0 if rc == OBJECT_ALREADY_EXISTS else rc  # another rank wrote it first

    def _put_writer_shard(self, key, code, gshape, arr, writer_partition, config, upsert,
                          what):
        """Writer partition route: this writer's slice of the full tensor arr (global shape
        gshape) as <key>__writer_<r>of<n>_sd<d> with a single-TP-axis header, plus
        <key>__writer_manifest."""
        wp = parse_writer_partition(writer_partition, what)
        if wp is None:
            return INVALID_PARAMS
        rank, size, sd = wp
        if sd >= arr.ndim or arr.shape[sd] % size:
            log.error("%s: split_dim out of range or not uniformly shardable", what)
            return INVALID_PARAMS
        shard = _slice(arr, sd, rank, size)
        hdr = _shard_header(code, gshape, shard, [ParallelAxis("tp", rank, size, sd)])
        rc = self._tensor_write_parts(writer_key(key, rank, size, sd), [hdr, _raw(shard)],
                                      config, upsert)
        if rc != 0:
            return rc
        return self._write_manifest(key, code, gshape, sd, size, config, upsert,
                                    "__writer_manifest")

    def _put_parallelism(self, key, tensor, parallelism, config, writer_partition, upsert, what):
        if writer_partition is not None and parallelism is not None:
            log.error("%s: writer_partition cannot be combined with parallelism", what)
            return INVALID_PARAMS
        if parallelism is None and writer_partition is None:
            return self._tensor_write(key, tensor, config, upsert, what)
        axes = parse_parallelism(parallelism, what) if parallelism is not None else []
        if axes is None:
            return INVALID_PARAMS
        try:
            code, arr = _as_array(tensor)
        except TensorError as e:
            log.error("%s for %s: %s", what, key, e)
            return INVALID_PARAMS
        if writer_partition is not None:
            return self._put_writer_shard(key, code, arr.shape, arr, writer_partition, config,
                                          upsert, what)
        tp = _tp_of(axes)
        if tp is None:
            hdr = _shard_header(code, arr.shape, arr, axes)
            return self._tensor_write_parts(parallelism_key(key, axes), [hdr, _raw(arr)],
                                            config, upsert)
        sd = tp.split_dim
        if not 0 <= sd < arr.ndim:
            log.error("%s: split_dim %d out of range for %d dims", what, sd, arr.ndim)
            return INVALID_PARAMS
        if len(axes) == 1:  # this rank's shard; the global shape is inferred
            gshape = list(arr.shape)
            gshape[sd] *= tp.size
            shard = arr
        else:  # the full tensor; this rank's slice is stored
            if arr.shape[sd] % tp.size:
                log.error("%s: only uniform sharding is supported", what)
                return INVALID_PARAMS
            gshape, shard = list(arr.shape), _slice(arr, sd, tp.rank, tp.size)
        hdr = _shard_header(code, gshape, shard, axes)
        rc = self._tensor_write_parts(parallelism_key(key, axes), [hdr, _raw(shard)],
                                      config, upsert)
        if rc != 0:
            return rc
        return self._write_manifest(key, code, gshape, sd, tp.size, config, upsert)

    def put_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                    writer_partition=None):
        """Store tensor as the shard parallelism names (see the routes above), or with
        writer_partition (rank, size, split_dim; not with parallelism) this writer's slice of
        the full tensor as <key>__writer_<r>of<n>_sd<d> plus <key>__writer_manifest. 0 or a
        negative code (INVALID_PARAMS for an invalid request)."""
        return self._put_parallelism(key, tensor, parallelism, config, writer_partition, False,
                                     "put_tensor_with_parallelism")

    def upsert_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                       writer_partition=None):
        return self._put_parallelism(key, tensor, parallelism, config, writer_partition, True,
                                     "upsert_tensor_with_parallelism")

    def _batch_put_parallelism(self, keys, tensors_list, parallelisms, config, writer_partitions,
                               upsert, what):
        keys, tensors_list = list(keys), list(tensors_list)
        if len(keys) != len(tensors_list) or not keys:
            log.error("%s: keys and tensors size mismatch", what)
            return _results(len(keys), INVALID_PARAMS)
        lists = _batch_requests(len(keys), parallelisms, writer_partitions, what)
        if lists is None:
            return _results(len(keys), INVALID_PARAMS)
        return [self._put_parallelism(k, t, p, config, w, upsert, what)
                for k, t, p, w in zip(keys, tensors_list, *lists)]

    def batch_put_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None,
                                          config=None, writer_partitions=None):
        return self._batch_put_parallelism(keys, tensors_list, parallelisms, config,
                                           writer_partitions, False,
                                           "batch_put_tensor_with_parallelism")

    def batch_upsert_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None,
                                             config=None, writer_partitions=None):
        return self._batch_put_parallelism(keys, tensors_list, parallelisms, config,
                                           writer_partitions, True,
                                           "batch_upsert_tensor_with_parallelism")

    def _put_parallelism_from(self, key, ptr, size, parallelism, config, writer_partition,
                              upsert, what):
        if writer_partition is not None and parallelism is not None:
            log.error("%s: writer_partition cannot be combined with parallelism", what)
            return INVALID_PARAMS
        if parallelism is None and writer_partition is None:
            return self._tensor_from([key], [ptr], [size], config, upsert, what)[0]
        axes = parse_parallelism(parallelism, what) if parallelism is not None else []
        if axes is None:
            return INVALID_PARAMS
        _check_ptr(what, ptr, size)
        if _read_object(_readable_ranges(), ptr, size, what) is None:
            return INVALID_PARAMS
        h, arr = decode_array(_view(ptr, size))
        if writer_partition is not None:
            return self._put_writer_shard(key, h.dtype, h.global_shape, arr, writer_partition,
                                          config, upsert, what)
        tp = _tp_of(axes)
        if tp is None:
            hdr = _shard_header(h.dtype, h.global_shape, arr, axes)
            if hdr is None:
                return INVALID_PARAMS
            return self._tensor_write_parts(parallelism_key(key, axes), [hdr, _raw(arr)],
                                            config, upsert)
        shards = _split_tp(h.dtype, arr, tp.size, tp.split_dim, what, axes)
        if shards is None:
            return INVALID_PARAMS
        for rank, (hdr, shard) in enumerate(shards):
            rc = self._tensor_write_parts(parallelism_key(key, _with_tp(axes, rank)),
                                          [hdr, _raw(shard)], config, upsert)
            if rc != 0:
                return rc
        return 0

    def put_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                         config=None, writer_partition=None):
        return self._put_parallelism_from(key, buffer_ptr, size, parallelism, config,
                                          writer_partition, False,
                                          "put_tensor_with_parallelism_from")

    def upsert_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                            config=None, writer_partition=None):
        return self._put_parallelism_from(key, buffer_ptr, size, parallelism, config,
                                          writer_partition, True,
                                          "upsert_tensor_with_parallelism_from")

    def _batch_parallelism_from(self, keys, ptrs, sizes, parallelisms, config, writer_partitions,
                                upsert, what):
        keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
        if not (len(keys) == len(ptrs) == len(sizes)):
            log.error("%s: keys, buffer_ptrs and sizes must have the same length", what)
            return _results(len(keys), INVALID_PARAMS)
        if parallelisms is None and writer_partitions is None:
            return self._tensor_from(keys, ptrs, sizes, config, upsert, what)
        lists = _batch_requests(len(keys), parallelisms, writer_partitions, what)
        if lists is None:
            return _results(len(keys), INVALID_PARAMS)
        return [self._put_parallelism_from(k, p, s, par, config, w, upsert, what)
                for k, p, s, par, w in zip(keys, ptrs, sizes, *lists)]

    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None,
                                               config=None, writer_partitions=None):
        return self._batch_parallelism_from(keys, buffer_ptrs, sizes, parallelisms, config,
                                            writer_partitions, False,
                                            "batch_put_tensor_with_parallelism_from")

    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes,
                                                  parallelisms=None, config=None,
                                                  writer_partitions=None):
        return self._batch_parallelism_from(keys, buffer_ptrs, sizes, parallelisms, config,
                                            writer_partitions, True,
                                            "batch_upsert_tensor_with_parallelism_from")

    # Read side, as upstream's (store_py_parallel_read.h): mode "shard" reads the shard's own
    # object when its header names exactly the requested axes; otherwise, with a TP axis, the
    # full tensor is reassembled and the requested TP slice cut out of it (another TP size).
    # Mode "full" reassembles along the TP axis: the TP shard count and split_dim come from
    # <key>__parallelism_manifest when present (every other axis as requested), else from the
    # stored shards (a single TP axis) or the request.

    def _load_manifest(self, key, suffix="__parallelism_manifest"):
        """(dtype, global shape, split_dim, shard count) of the manifest <key><suffix>."""
        raw = self.get(key + suffix)
        if not raw or len(raw) < _MANIFEST.size:
            return None
        f = _MANIFEST.unpack_from(raw)
        magic, version, hsize, dtype, ndim, sd, count = f[:7]
        if magic != MANIFEST_MAGIC or version != 1 or hsize != _MANIFEST.size or \
                not 0 <= ndim <= MAX_DIMS or count <= 0 or not 0 <= sd < ndim:
            return None
        gshape = list(f[8:8 + ndim])
        return None if min(gshape) < 0 else (dtype, gshape, sd, count)

    def _gather(self, sources, split_dim, what):
        """(code, full array) concatenated along split_dim from sources, [(object key, axes
        its header must carry exactly)] in TP rank order; None (logged)."""
        parts, first = [], None
        for k, want in sources:
            dec = self._get_tensor_header(k)
            if dec is None or not _same_axes(_stored_axes(dec[0]), want):
                log.error("%s: shard %s missing or not of the requested layout", what, k)
                return None
            if first is not None and (dec[0].dtype != first.dtype
                                      or dec[0].global_shape != first.global_shape):
                log.error("%s: shard %s does not match shard 0", what, k)
                return None
            first = first or dec[0]
            parts.append(dec[1])
        full = np.concatenate(parts, axis=split_dim)
        if tuple(full.shape) != tuple(first.global_shape):
            log.error("%s: shards do not cover the global shape", what)
            return None
        return first.dtype, full

    def _tp_sources(self, key, axes, count):
        wants = [_with_tp(axes, r, count) for r in range(count)]
        return [(parallelism_key(key, w), w) for w in wants]

    def _writer_full(self, key, what):
        """(has a writer manifest, (code, full array) or None): the tensor reassembled from
        the shards <key>__writer_manifest names."""
        man = self._load_manifest(key, "__writer_manifest")
        if man is None:
            return False, None
        _, _, sd, count = man
        sources = [(writer_key(key, r, count, sd), [ParallelAxis("tp", r, count, sd)])
                   for r in range(count)]
        return True, self._gather(sources, sd, what)

    def _full(self, key, axes, what):
        """(code, full array) of the tensor whose shards axes (with a TP axis) belong to."""
        tp = _tp_of(axes)
        man = self._load_manifest(key)
        if man is not None:
            dtype, gshape, sd, count = man
            if tp.split_dim != sd:
                log.error("%s: split_dim mismatch (stored %d)", what, sd)
                return None
            if gshape[sd] % count or gshape[sd] % tp.size:
                log.error("%s: only uniform sharding is supported", what)
                return None
            return self._gather(self._tp_sources(key, axes, count), sd, what)
        count = tp.size
        if len(axes) == 1:  # a single TP axis: the stored count is in shard 0's header
            dec = self._get_tensor_header(tp_key(key, 0))
            st = _stored_axes(dec[0]) if dec is not None else None
            if not st or len(st) != 1 or st[0].kind != "tp" or st[0].split_dim != tp.split_dim:
                log.error("%s: no TP shard %s of split_dim %s", what, tp_key(key, 0),
                          tp.split_dim)
                return None
            count = st[0].size
        return self._gather(self._tp_sources(key, axes, count), tp.split_dim, what)

    def _resolve_parallelism_read(self, key, target, what):
        """("key", k) to read k as stored, ("value", (code, array)), or ("none", None)."""
        mode = str(getattr(target, "mode", "")).lower()
        parallelism = getattr(target, "parallelism", None)
        if mode not in ("as_stored", "shard", "full"):
            log.error("%s: unsupported ReadTarget mode %r", what, mode)
            return "none", None
        if parallelism is None:
            if mode == "shard":
                log.error("%s: parallelism is required", what)
                return "none", None
            if mode == "full":
                found, full = self._writer_full(key, what)
                if found:
                    return ("value", full) if full is not None else ("none", None)
            return "key", key
        axes = parse_parallelism(parallelism, what)
        if axes is None:
            return "none", None
        tp = _tp_of(axes)
        if mode == "shard":
            k = parallelism_key(key, axes)
            h = self._get_tensor_header(k)
            if h is not None and _same_axes(_stored_axes(h[0]), axes):
                return "key", k
            if len(axes) == 1 and tp is not None:  # a writer partition of that layout
                k = writer_key(key, tp.rank, tp.size, tp.split_dim)
                h = self._get_tensor_header(k)
                if h is not None and _same_axes(_stored_axes(h[0]), axes):
                    return "key", k
            full = self._full(key, axes, what) if tp is not None else None
            if full is not None:
                code, arr = full
                if arr.shape[tp.split_dim] % tp.size == 0:
                    return "value", (code, _slice(arr, tp.split_dim, tp.rank, tp.size))
            log.error("%s: parallelism metadata mismatch for key %s", what, key)
            return "none", None
        if mode == "full":
            if tp is None:
                log.error("%s: full reconstruction requires a TP axis", what)
                return "none", None
            full = self._full(key, axes, what)
            return ("value", full) if full is not None else ("none", None)
        log.error("%s: unsupported ReadTarget mode", what)
        return "none", None

    def get_tensor_with_parallelism(self, key, target=None):
        """The tensor a ReadTarget names (see the read side above): target None or mode
        "as_stored" without parallelism: the object under key; "shard": the requested shard
        (re-sliced when stored with another TP size); "full": the tensor reassembled from its
        TP shards (the object under key without parallelism). None when it cannot be read."""
        what = "get_tensor_with_parallelism"
        if target is None:
            return self.get_tensor(key)
        how, v = self._resolve_parallelism_read(key, target, what)
        if how == "key":
            return self.get_tensor(v)
        return None if how == "none" else _to_value(v[1], v[0])

    def batch_get_tensor_with_parallelism(self, keys, targets=None):
        keys = list(keys)
        if targets is None:
            return self.batch_get_tensor(keys)
        if not isinstance(targets, list) or len(targets) != len(keys):
            log.error("batch_get_tensor_with_parallelism: targets must be a list as long as "
                      "keys, or None")
            return [None] * len(keys)
        return [self.get_tensor_with_parallelism(k, t) for k, t in zip(keys, targets)]

    def get_tensor_with_parallelism_into(self, key, buffer_ptr, size, target=None):
        """get_tensor_with_parallelism into registered memory [buffer_ptr, +size): the tensor
        object (header + data) is written there and a tensor viewing its data returned, or
        None (also when the object does not fit or the memory is not registered)."""
        what = "get_tensor_with_parallelism_into"
        if target is None:
            return self.get_tensor_into(key, buffer_ptr, size)
        _check_ptr(what, buffer_ptr, size)
        how, v = self._resolve_parallelism_read(key, target, what)
        if how == "key":
            return self.get_tensor_into(v, buffer_ptr, size)
        if how == "none":
            return None
        code, arr = v
        hdr = encode_header(code, arr.shape, arr.nbytes)
        total = len(hdr) + arr.nbytes
        if buffer_ptr == 0 or total > size or self._buffer_room(buffer_ptr) < total:
            log.error("%s: %d bytes do not fit a registered buffer of %d at 0x%x", what, total,
                      size, buffer_ptr)
            return None
        dst = _view(buffer_ptr, total)
        dst[:len(hdr)] = hdr
        dst[len(hdr):] = _raw(arr)
        return decode(dst, copy=False)

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None):
        keys, buffer_ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
        if targets is None:
            return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)
        if not isinstance(targets, list) or not \
                (len(targets) == len(keys) == len(buffer_ptrs) == len(sizes)):
            log.error("batch_get_tensor_with_parallelism_into: mismatched lengths")
            return [None] * len(keys)
        return [self.get_tensor_with_parallelism_into(k, p, s, t)
                for k, p, s, t in zip(keys, buffer_ptrs, sizes, targets)]

    # --- safetensors ---------------------------------------------------------------------

    def save_tensor_to_safetensor(self, key, file_name=None):
        """Write the tensor under key to a safetensors file (file_name, default the key) with
        one entry named key. 0, FILE_NOT_FOUND (-1100) when the key has no tensor, or
        INVALID_PARAMS when the file cannot be written."""
        dec = self._get_tensor_header(key)
        if dec is None:
            log.error("save_tensor_to_safetensor: failed to fetch tensor for key %s", key)
            return FILE_NOT_FOUND
        h, arr = dec
        path = key if file_name is None else file_name
        try:
            write_safetensors(path, {key: (h.dtype, arr)})
        except (OSError, ValueError, TypeError) as e:
            log.error("save_tensor_to_safetensor: failed to write %s: %s", path, e)
            return INVALID_PARAMS
        return 0

    def load_tensor_from_safetensor(self, key=None, file_name=None):
        """Read a safetensors file and put_tensor its entry named key (else the first entry by
        name) under key (default file_name). Returns the tensor, or None."""
        if file_name is None:
            raise TypeError("load_tensor_from_safetensor() missing required argument 'file_name'")
        try:
            entries = read_safetensors(file_name)
        except (OSError, ValueError) as e:
            log.error("load_tensor_from_safetensor: failed to read %s: %s", file_name, e)
            return None
        if not entries:
            log.error("load_tensor_from_safetensor: no tensors found in %s", file_name)
            return None
        store_key = file_name if key is None else key
        if key is not None and key in entries:
            name = key
        else:
            name = min(entries)  # safetensors lists a file's tensors sorted by name
            if key is not None:
                log.warning("load_tensor_from_safetensor: key %s not found in %s; using first "
                            "entry", key, file_name)
        code, arr = entries[name]
        hdr = encode_header(code, arr.shape, arr.nbytes)
        rc = self._tensor_write_parts(store_key, [hdr, _raw(arr)], None, False)
        if rc != 0:
            log.error("load_tensor_from_safetensor: failed to store tensor for key %s, rc=%d",
                      store_key, rc)
            return None
        return _to_value(arr, code)


# --- safetensors files (8-byte LE header length, JSON header, data) ----------------------------

_MAX_ST_HEADER = 100 << 20


def write_safetensors(path, entries):
    """entries: {name: (TensorDtype, numpy array of the storage dtype)}."""
    _need_numpy()
    header = {}
    offset = 0
    blobs = []
    for name, (code, arr) in entries.items():
        arr = np.asarray(arr, dtype=_STORAGE[TensorDtype(code)], order="C")
        header[name] = {"dtype": _ST_NAMES[TensorDtype(code)], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
        blobs.append(arr)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # data starts 8-aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for arr in blobs:
            f.write(_raw(arr))


def read_safetensors(path):
    """{name: (TensorDtype, numpy array)} of a safetensors file, in header order. Raises
    ValueError on a malformed file or an unsupported dtype."""
    _need_numpy()
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("file shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", blob, 0)
    if n > _MAX_ST_HEADER or 8 + n > len(blob):
        raise ValueError(f"header length {n} beyond the file")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ValueError(f"entry {name!r} is not an object")
        code = _ST_CODES.get(info.get("dtype"))
        if code is None:
            raise ValueError(f"entry {name!r}: unsupported dtype {info.get('dtype')!r}")
        shape, offs = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or \
                not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"entry {name!r}: bad shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)
                and 0 <= offs[0] <= offs[1] <= len(data)):
            raise ValueError(f"entry {name!r}: bad data_offsets {offs!r}")
        st = _STORAGE[code]
        numel = 1
        for d in shape:
            numel *= d
        if offs[1] - offs[0] != numel * st.itemsize:
            raise ValueError(f"entry {name!r}: {offs[1] - offs[0]} bytes for shape {shape}")
        arr = np.frombuffer(data, dtype=st, count=numel, offset=offs[0]).reshape(shape).copy()
        out[name] = (code, arr)
    return out


__all__ = ["TensorStoreMixin", "TensorDtype", "TensorLayoutKind", "LayoutAxisKind",
           "ParallelAxis", "TensorParallelism", "ReadTarget", "TensorError", "encode",
           "encode_bytes", "encode_header", "decode", "parse_header", "tp_key",
           "write_safetensors", "read_safetensors", "torch_module", "HEADER_SIZE",
           "TENSOR_MAGIC"]
