"""Tensor API (mooncake.tensor): upstream's byte format, round trips, TP shards, safetensors.

The header layout is checked against bytes built here with struct.pack from the documented
layout (upstream's mooncake-integration/integration_utils.h), not with our encoder.
"""

import ctypes
import json
import struct

import numpy as np
import pytest

from mooncake import tensor as T

try:
    import torch
except ImportError:
    torch = None

MAGIC = 0x4D4F4F4E
NUMPY_DTYPES = [  # (numpy dtype, upstream code)
    ("float32", 0), ("float64", 1), ("int8", 2), ("uint8", 3), ("int16", 4), ("uint16", 5),
    ("int32", 6), ("uint32", 7), ("int64", 8), ("uint64", 9), ("bool", 10), ("float16", 11),
]


def to_np(x):
    """numpy view of what a get returned (torch tensor when torch is installed)."""
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()
    return np.asarray(x)


def sample(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        return (np.arange(n) % 3 == 0).reshape(shape)
    a = np.arange(n) * 7 + 1
    return np.asarray(a % 120, dtype=dtype).reshape(shape)


def hand_header(code, shape, data_bytes, gshape=None, layout=0, axes=()):
    """The 304-byte header, built field by field from the documented layout."""
    gshape = list(shape) if gshape is None else list(gshape)
    pad = lambda s: list(s) + [-1] * (8 - len(s))  # noqa: E731
    b = struct.pack("<I", MAGIC) + struct.pack("<H", 1) + struct.pack("<H", 304)
    b += struct.pack("<i", code) + struct.pack("<i", len(shape)) + struct.pack("<I", layout)
    b += struct.pack("<I", 0) + struct.pack("<Q", 304) + struct.pack("<Q", data_bytes)
    assert len(b) == 40
    b += struct.pack("<8q", *pad(gshape)) + struct.pack("<8q", *pad(shape))
    b += struct.pack("<I", len(axes)) + struct.pack("<I", 0)
    for ax in axes:
        b += struct.pack("<6iq", *ax)
    b += b"\0" * (32 * (4 - len(axes)))
    assert len(b) == 304
    return b


# --- format, no cluster --------------------------------------------------------------------


@pytest.mark.parametrize("dtype,code", NUMPY_DTYPES)
def test_encoding_matches_hand_built_header(dtype, code):
    a = sample(dtype, (2, 3))
    assert T.encode_bytes(a) == hand_header(code, (2, 3), a.nbytes) + a.tobytes()


def test_encoding_0d_8d_empty():
    a = np.float64(2.5)
    assert T.encode_bytes(a) == hand_header(1, (), 8) + struct.pack("<d", 2.5)
    b = np.zeros((1, 2, 1, 2, 1, 2, 1, 2), dtype=np.int16)
    assert T.encode_bytes(b) == hand_header(4, b.shape, b.nbytes) + b.tobytes()
    e = np.zeros((3, 0), dtype=np.float32)
    assert T.encode_bytes(e) == hand_header(0, (3, 0), 0)
    with pytest.raises(T.TensorError):
        T.encode_bytes(np.zeros((1,) * 9))


def test_big_endian_and_strided_inputs_stored_little_endian_contiguous():
    a = np.arange(6, dtype=">i4").reshape(2, 3).T
    want = np.ascontiguousarray(a, dtype="<i4")
    assert T.encode_bytes(a) == hand_header(6, (3, 2), 24) + want.tobytes()


def test_unsupported_types_refused():
    for bad in (np.zeros(2, np.complex64), np.array(["x"]), np.zeros(2, object), [1, 2], "s"):
        with pytest.raises(T.TensorError):
            T.encode(bad)


def test_hand_built_object_decodes():
    a = sample("int32", (4, 5))
    t = T.decode(hand_header(6, (4, 5), a.nbytes) + a.tobytes())
    np.testing.assert_array_equal(to_np(t), a)


def test_data_offset_beyond_304_accepted():
    # upstream accepts data_offset >= header_size (data_bytes = size - data_offset)
    a = np.arange(3, dtype=np.uint8)
    h = bytearray(hand_header(3, (3,), 3))
    struct.pack_into("<Q", h, 24, 312)
    t = T.decode(bytes(h) + b"\xee" * 8 + a.tobytes())
    np.testing.assert_array_equal(to_np(t), a)


def corruptions():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    good = hand_header(0, (2, 3), 24) + a.tobytes()

    def patch(fmt, off, *vals, blob=good):
        b = bytearray(blob)
        struct.pack_into(fmt, b, off, *vals)
        return bytes(b)
    return {
        "magic": patch("<I", 0, 0x4D4F4F4F),
        "version": patch("<H", 4, 2),
        "header_size": patch("<H", 6, 296),
        "dtype_high": patch("<i", 8, 15),
        "dtype_negative": patch("<i", 8, -1),
        "ndim_9": patch("<i", 12, 9),
        "ndim_negative": patch("<i", 12, -1),
        "ndim_vs_shape": patch("<i", 12, 1),
        "layout_kind": patch("<I", 16, 2),
        "data_offset_small": patch("<Q", 24, 300),
        "data_offset_large": patch("<Q", 24, 10**6),
        "data_bytes": patch("<Q", 32, 20),
        "truncated": good[:-1],
        "extra_byte": good + b"\0",
        "short": good[:303],
        "empty": b"",
        "negative_dim": patch("<q", 40 + 64, -2),
        "unused_dim_not_minus_1": patch("<q", 40 + 64 + 16, 0),
        "axis_count": patch("<I", 168, 5),
        "axis_zero_count": patch("<i", 176 + 12, 0, blob=patch("<I", 168, 1)),
        "axis_bad_kind": patch("<iiii", 176, 7, 0, 0, 1, blob=patch("<I", 168, 1)),
        "dtype_size_mismatch": patch("<i", 8, 1),
    }


@pytest.mark.parametrize("name", sorted(corruptions()))
def test_corrupt_headers_refused(name):
    assert T.decode(corruptions()[name]) is None


def test_tp_shard_header_matches_upstream_layout():
    a = sample("float32", (4, 6))
    shards = T._split_tp(T.TensorDtype.FLOAT32, a, 2, 1, "t")
    for r, (hdr, shard) in enumerate(shards):
        want = hand_header(0, (4, 3), 48, gshape=(4, 6), layout=1,
                           axes=[(1, 0, r, 2, 1, 0, 3)])
        assert hdr == want
        np.testing.assert_array_equal(shard, a[:, 3 * r:3 * r + 3])


def test_safetensors_file_written_by_hand_reads(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2], dtype=np.int64)
    hdr = {"__metadata__": {"format": "pt"},
           "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
           "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}}
    text = json.dumps(hdr).encode()
    p = tmp_path / "hand.safetensors"
    p.write_bytes(struct.pack("<Q", len(text)) + text + a.tobytes() + b.tobytes())
    got = T.read_safetensors(str(p))
    assert list(got) == ["w", "b"]
    np.testing.assert_array_equal(got["w"][1], a)
    np.testing.assert_array_equal(got["b"][1], b)
    p.write_bytes(struct.pack("<Q", 10**6) + text)
    with pytest.raises(ValueError):
        T.read_safetensors(str(p))


def test_safetensors_writer_layout(tmp_path):
    a = np.arange(4, dtype=np.uint16)
    p = tmp_path / "w.safetensors"
    T.write_safetensors(str(p), {"k": (T.TensorDtype.UINT16, a)})
    blob = p.read_bytes()
    (n,) = struct.unpack_from("<Q", blob)
    assert n % 8 == 0
    assert json.loads(blob[8:8 + n]) == {"k": {"dtype": "U16", "shape": [4],
                                               "data_offsets": [0, 8]}}
    assert blob[8 + n:] == a.tobytes()


def test_parallelism_classes():
    ax = T.ParallelAxis(kind="tp", rank=1, size=2, split_dim=0)
    tp = T.TensorParallelism(axes=[ax])
    rt = T.ReadTarget(mode="SHARD", parallelism=tp)
    assert rt.mode == "shard" and tp.axes[0].rank == 1
    with pytest.raises(RuntimeError):
        T.ReadTarget(mode="sideways")
    default = T.ParallelAxis()
    assert (default.kind, default.rank, default.size, default.split_dim) == ("", 0, 1, None)


# --- against a cluster ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def reg(store):
    """A registered 4 MiB buffer (numpy) for the zero-copy calls."""
    buf = np.zeros(4 << 20, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    yield buf
    store.unregister_buffer(buf.ctypes.data)


SHAPES = [(), (5,), (2, 3), (2, 1, 3), (1, 2, 2, 2), (2, 1, 1, 2, 1), (1, 2, 1, 1, 2, 1),
          (1, 1, 2, 1, 1, 1, 2), (2, 1, 1, 1, 1, 1, 1, 2), (0,), (3, 0, 2)]


@pytest.mark.parametrize("dtype,code", NUMPY_DTYPES)
def test_round_trip_numpy_every_dtype(store, dtype, code):
    for i, shape in enumerate(SHAPES):
        key = f"rt_{dtype}_{i}"
        a = sample(dtype, shape)
        assert store.put_tensor(key, a) == 0
        t = store.get_tensor(key)
        got = to_np(t)
        assert got.shape == a.shape and got.dtype == a.dtype, (shape, got.dtype)
        np.testing.assert_array_equal(got, a)
        # the stored bytes are exactly the documented layout
        assert store.get(key) == hand_header(code, shape, a.nbytes) + a.tobytes()


def test_torch_is_installed():
    """The torch paths below skip without torch; this test makes that a failure, since
    scripts/install-deps.sh installs Debian's python3-torch."""
    assert torch is not None, "python3-torch is not installed: run scripts/install-deps.sh"


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_round_trip_torch(store):
    cases = [torch.randn(3, 4), torch.randn(2, 2, dtype=torch.float64),
             torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.tensor(True),
             torch.randn(4, 5).to(torch.bfloat16), torch.randn(3).to(torch.float16),
             torch.randn(2, 3).t()]  # non-contiguous
    for name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
        if hasattr(torch, name):
            cases.append(torch.zeros(4).to(getattr(torch, name)))
    for i, x in enumerate(cases):
        key = f"torch_{i}"
        assert store.put_tensor(key, x) == 0
        y = store.get_tensor(key)
        assert isinstance(y, torch.Tensor) and y.dtype == x.dtype and y.shape == x.shape
        assert torch.equal(y.view(torch.uint8) if y.element_size() == 1 and y.dtype !=
                           torch.bool else y, x.contiguous())
    # bf16 written by torch is code 12 with the raw bits
    x = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    assert store.put_tensor("bf16_bits", x) == 0
    bits = x.view(torch.int16).numpy().view(np.uint16)
    assert store.get("bf16_bits") == hand_header(12, (2,), 4) + bits.tobytes()


def test_bf16_from_foreign_writer_without_torch_is_raw_bits(store):
    """A BF16 object (as upstream writes it) reads as bfloat16 with torch, uint16 bits without."""
    bits = np.array([0x3F80, 0xC000], dtype="<u2")  # 1.0, -2.0
    assert store.put("bf16_foreign", hand_header(12, (2,), 4) + bits.tobytes()) == 0
    t = store.get_tensor("bf16_foreign")
    if torch is not None:
        assert t.dtype == torch.bfloat16 and t.tolist() == [1.0, -2.0]
    else:
        assert t.dtype == np.uint16
        np.testing.assert_array_equal(t, bits)


def test_get_missing_and_corrupt_are_none(store):
    assert store.get_tensor("no_such_tensor") is None
    for name, blob in corruptions().items():
        if not blob:
            continue
        assert store.put(f"corrupt_{name}", blob) == 0
        assert store.get_tensor(f"corrupt_{name}") is None, name
    assert store.put("plain_bytes", b"hello") == 0
    assert store.get_tensor("plain_bytes") is None


def test_put_refusals_return_invalid_params(store):
    assert store.put_tensor("bad1", np.zeros(2, np.complex64)) == -600
    assert store.put_tensor("bad2", [1, 2, 3]) == -600
    assert store.put_tensor("bad3", np.zeros((1,) * 9)) == -600
    assert store.batch_put_tensor(["a", "b"], [np.zeros(1)]) == [-600, -600]
    assert store.is_exist("bad1") == 0


def test_batch_put_get_with_missing_key(store):
    keys = ["b_0", "b_1", "b_2"]
    vals = [sample("int32", (3,)), sample("float16", (2, 2)), sample("uint8", ())]
    assert store.batch_put_tensor(keys, vals) == [0, 0, 0]
    got = store.batch_get_tensor(["b_0", "b_missing", "b_2", "b_1"])
    assert got[1] is None
    for g, v in zip((got[0], got[2], got[3]), (vals[0], vals[2], vals[1])):
        np.testing.assert_array_equal(to_np(g), v)
    assert store.batch_get_tensor([]) == []


def test_pub_upsert_and_batches(store):
    from mooncake.store import ReplicateConfig
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    assert store.pub_tensor("pub", np.arange(3), cfg) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor("pub")), np.arange(3))
    store.put_tensor("pub", np.arange(4))  # put leaves an existing key unchanged
    np.testing.assert_array_equal(to_np(store.get_tensor("pub")), np.arange(3))
    assert store.upsert_tensor("pub", np.arange(4)) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor("pub")), np.arange(4))
    assert store.upsert_pub_tensor("pub", np.ones(2), cfg) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor("pub")), np.ones(2))
    assert store.batch_pub_tensor(["bp0", "bp1"], [np.zeros(1), np.ones(1)], cfg) == [0, 0]
    assert store.batch_upsert_tensor(["bp0", "bp2"], [np.full(2, 5.0), np.ones(1)]) == [0, 0]
    assert store.batch_upsert_pub_tensor(["bp1"], [np.full(3, 7)], cfg) == [0]
    got = store.batch_get_tensor(["bp0", "bp1", "bp2"])
    np.testing.assert_array_equal(to_np(got[0]), np.full(2, 5.0))
    np.testing.assert_array_equal(to_np(got[1]), np.full(3, 7))
    np.testing.assert_array_equal(to_np(got[2]), np.ones(1))


def test_zero_copy_into_and_from(store, reg):
    base = reg.ctypes.data
    a = sample("float32", (16, 8))
    assert store.put_tensor("zc", a) == 0
    t = store.get_tensor_into("zc", base, 1 << 20)
    np.testing.assert_array_equal(to_np(t), a)
    # the tensor views the registered buffer
    assert bytes(reg[:304]) == hand_header(0, (16, 8), a.nbytes)
    assert store.get_tensor_into("zc_missing", base, 1 << 20) is None
    assert store.get_tensor_into("zc", base, 100) is None  # too small
    # put_tensor_from: the buffer holds a tensor object
    obj = hand_header(6, (3,), 12) + np.array([1, 2, 3], "<i4").tobytes()
    reg[2 << 20:(2 << 20) + len(obj)] = np.frombuffer(obj, np.uint8)
    assert store.put_tensor_from("zc_from", base + (2 << 20), len(obj)) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor("zc_from")), [1, 2, 3])
    reg[2 << 20] ^= 0xFF  # break the magic
    assert store.put_tensor_from("zc_from_bad", base + (2 << 20), len(obj)) == -600
    assert store.is_exist("zc_from_bad") == 0
    reg[2 << 20] ^= 0xFF
    assert store.upsert_tensor_from("zc_from", base + (2 << 20), len(obj)) == 0
    # unregistered memory is refused by the store
    other = np.zeros(4096, np.uint8)
    other[:len(obj)] = np.frombuffer(obj, np.uint8)
    assert store.put_tensor_from("zc_unreg", other.ctypes.data, len(obj)) < 0
    # batches
    assert store.batch_put_tensor_from(["zb0", "zb1"], [base + (2 << 20)] * 2,
                                       [len(obj), 10]) == [0, -600]
    assert store.batch_upsert_tensor_from(["zb0"], [base + (2 << 20)], [len(obj)]) == [0]
    got = store.batch_get_tensor_into(["zb0", "zb_missing"], [base, base + (1 << 20)],
                                      [1 << 20, 1 << 20])
    np.testing.assert_array_equal(to_np(got[0]), [1, 2, 3])
    assert got[1] is None
    assert store.batch_get_tensor_into(["a"], [base, base], [1, 1]) == [-600]


def test_get_tensor_into_cuda_fails_without_cuda(store):
    assert store.get_tensor_into_cuda("zc", object()) == -600
    assert store.batch_get_tensor_into_cuda(["zc", "x"], [None, None]) == [-600, -600]


def test_tp_put_get(store):
    a = sample("int64", (4, 6))
    assert store.put_tensor_with_tp("tp", a, tp_rank=1, tp_size=3, split_dim=1) == 0
    assert store.is_exist("tp") == 0
    for r in range(3):
        want = a[:, 2 * r:2 * r + 2]
        assert store.get(f"tp_tp_{r}") == hand_header(
            8, (4, 2), want.nbytes, gshape=(4, 6), layout=1,
            axes=[(1, 0, r, 3, 1, 0, 2)]) + np.ascontiguousarray(want).tobytes()
        got = store.get_tensor_with_tp("tp", tp_rank=r, tp_size=3, split_dim=1)
        np.testing.assert_array_equal(to_np(got), want)
    # tp_size <= 1 is the plain key
    assert store.put_tensor_with_tp("tp1", a) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor_with_tp("tp1")), a)
    np.testing.assert_array_equal(to_np(store.get_tensor("tp1")), a)
    # uneven split refused
    assert store.put_tensor_with_tp("tp_uneven", a, tp_size=4, split_dim=1) == -600
    assert store.put_tensor_with_tp("tp_baddim", a, tp_size=2, split_dim=2) == -600


def test_tp_batches_and_zero_copy(store, reg):
    from mooncake.store import ReplicateConfig
    a, b = sample("float32", (4, 2)), sample("int8", (2, 6))
    assert store.batch_put_tensor_with_tp(["bt_a", "bt_b"], [a, b], tp_size=2) == [0, 0]
    got = store.batch_get_tensor_with_tp(["bt_a", "bt_missing", "bt_b"], tp_rank=1, tp_size=2)
    np.testing.assert_array_equal(to_np(got[0]), a[2:])
    assert got[1] is None
    np.testing.assert_array_equal(to_np(got[2]), b[1:])
    assert store.pub_tensor_with_tp("pt", a, ReplicateConfig(), tp_size=2, split_dim=1) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor("pt_tp_1")), a[:, 1:])
    assert store.batch_pub_tensor_with_tp(["bpt"], [b], ReplicateConfig(), tp_size=3,
                                          split_dim=1) == [0]
    np.testing.assert_array_equal(to_np(store.get_tensor("bpt_tp_2")), b[:, 4:])
    base = reg.ctypes.data
    t = store.get_tensor_with_tp_into("bt_a", base, 1 << 20, tp_rank=0, tp_size=2)
    np.testing.assert_array_equal(to_np(t), a[:2])
    got = store.batch_get_tensor_with_tp_into(["bt_a", "bt_b"], [base, base + (1 << 20)],
                                              [1 << 20, 1 << 20], tp_rank=1, tp_size=2)
    np.testing.assert_array_equal(to_np(got[0]), a[2:])
    np.testing.assert_array_equal(to_np(got[1]), b[1:])
    obj = T.encode_bytes(a)
    reg[3 << 20:(3 << 20) + len(obj)] = np.frombuffer(obj, np.uint8)
    assert store.put_tensor_with_tp_from("tpf", base + (3 << 20), len(obj), tp_size=2) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor("tpf_tp_1")), a[2:])
    assert store.batch_put_tensor_with_tp_from(["tpf2"], [base + (3 << 20)], [len(obj)],
                                               tp_size=2, split_dim=1) == [0]
    np.testing.assert_array_equal(to_np(store.get_tensor("tpf2_tp_0")), a[:, :1])


def test_with_parallelism_tp_axis(store):
    from mooncake.store import ParallelAxis, ReadTarget, TensorParallelism
    full = sample("int32", (6, 4))

    def par(rank, size=2, sd=0):
        return TensorParallelism(axes=[ParallelAxis(kind="tp", rank=rank, size=size,
                                                    split_dim=sd)])
    # each rank writes its own shard
    for r in range(2):
        assert store.put_tensor_with_parallelism("wp", full[3 * r:3 * r + 3], par(r)) == 0
    assert store.get("wp_tp_1") == hand_header(
        6, (3, 4), 48, gshape=(6, 4), layout=1, axes=[(1, 0, 1, 2, 0, 0, 3)]) + \
        np.ascontiguousarray(full[3:]).tobytes()
    m = store.get("wp__parallelism_manifest")
    assert m == struct.pack("<IHHiiiii4x8q", 0x574D414E, 1, 96, 6, 2, 0, 2, 0,
                            6, 4, -1, -1, -1, -1, -1, -1)
    shard = store.get_tensor_with_parallelism("wp", ReadTarget(mode="shard",
                                                               parallelism=par(1)))
    np.testing.assert_array_equal(to_np(shard), full[3:])
    whole = store.get_tensor_with_parallelism("wp", ReadTarget(mode="full",
                                                               parallelism=par(0)))
    np.testing.assert_array_equal(to_np(whole), full)
    # a shard of another TP size is cut from the reassembled tensor
    third = store.get_tensor_with_parallelism("wp", ReadTarget(mode="shard",
                                                               parallelism=par(2, 3)))
    np.testing.assert_array_equal(to_np(third), full[4:])
    # no parallelism: the plain key
    assert store.put_tensor_with_parallelism("wp_full", full) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor_with_parallelism("wp_full")), full)
    np.testing.assert_array_equal(
        to_np(store.get_tensor_with_parallelism("wp_full", ReadTarget(mode="full"))), full)
    got = store.batch_get_tensor_with_parallelism(
        ["wp", "wp_missing"], [ReadTarget(mode="shard", parallelism=par(0)), None])
    np.testing.assert_array_equal(to_np(got[0]), full[:3])
    assert got[1] is None
    # batch writes, upserts
    assert store.batch_put_tensor_with_parallelism(["bwp"], [full[:3]], [par(0)]) == [0]
    assert store.upsert_tensor_with_parallelism("bwp", full[:3] + 1, par(0)) == 0
    np.testing.assert_array_equal(to_np(store.get_tensor("bwp_tp_0")), full[:3] + 1)
    assert store.batch_upsert_tensor_with_parallelism(["bwp"], [full], None) == [0]
    # an invalid writer partition or TP axis is INVALID_PARAMS
    assert store.put_tensor_with_parallelism("x", full, None, None, object()) == -600
    assert store.put_tensor_with_parallelism(
        "x", full, TensorParallelism(axes=[ParallelAxis(kind="tp", rank=0, size=2)])) == -600


def _par(*axes):
    from mooncake.store import ParallelAxis, TensorParallelism
    return TensorParallelism(axes=[ParallelAxis(**a) for a in axes])


def test_with_parallelism_multi_axis(store):
    """TP with another axis: the full tensor is given, this TP rank's slice stored under
    upstream's key <key>__dp_<r>of<n>__tp_<r>of<n>_sd<d> with the axes (in the caller's order)
    and the global shape in its header, plus the manifest; reads reassemble and re-slice."""
    from mooncake.store import ReadTarget
    full = sample("float32", (4, 6))

    def par(tp_rank, dp_rank=1, tp_size=2):
        return _par(dict(kind="tp", rank=tp_rank, size=tp_size, split_dim=1),
                    dict(kind="dp", rank=dp_rank, size=2))
    for r in range(2):
        assert store.put_tensor_with_parallelism("ma", full, par(r)) == 0
        assert store.get(f"ma__dp_1of2__tp_{r}of2_sd1") == hand_header(
            0, (4, 3), 48, gshape=(4, 6), layout=1,
            axes=[(1, 0, r, 2, 1, 0, 3), (0, 1, 1, 2, -1, 0, 0)]) + \
            np.ascontiguousarray(full[:, 3 * r:3 * r + 3]).tobytes()
    assert store.get("ma__parallelism_manifest") == struct.pack(
        "<IHHiiiii4x8q", 0x574D414E, 1, 96, 0, 2, 1, 2, 0, 4, 6, -1, -1, -1, -1, -1, -1)
    shard = store.get_tensor_with_parallelism("ma", ReadTarget("shard", par(1)))
    np.testing.assert_array_equal(to_np(shard), full[:, 3:])
    whole = store.get_tensor_with_parallelism("ma", ReadTarget("full", par(0)))
    np.testing.assert_array_equal(to_np(whole), full)
    # another TP size: cut from the reassembled tensor
    third = store.get_tensor_with_parallelism("ma", ReadTarget("shard", par(2, tp_size=3)))
    np.testing.assert_array_equal(to_np(third), full[:, 4:])
    # DP rank 0 was never written
    assert store.get_tensor_with_parallelism("ma", ReadTarget("full", par(0, dp_rank=0))) is None
    assert store.get_tensor_with_parallelism("ma", ReadTarget("shard", par(0, dp_rank=0))) \
        is None
    # the order the caller lists the axes in does not change the key
    swapped = _par(dict(kind="dp", rank=1, size=2),
                   dict(kind="tp", rank=0, size=2, split_dim=1))
    np.testing.assert_array_equal(
        to_np(store.get_tensor_with_parallelism("ma", ReadTarget("shard", swapped))),
        full[:, :3])


def test_with_parallelism_without_tp(store):
    """DP / EP / PP only: the tensor is stored as is under its axes' key."""
    from mooncake.store import ReadTarget
    t = sample("int64", (3, 2))
    p = _par(dict(kind="ep", rank=1, size=4, expert_id=7), dict(kind="dp", rank=0, size=2))
    assert store.put_tensor_with_parallelism("ep", t, p) == 0
    assert store.get("ep__dp_0of2__ep_1of4_eid7") == hand_header(
        8, (3, 2), 48, layout=1, axes=[(2, 0, 1, 4, -1, 7, 0), (0, 1, 0, 2, -1, 0, 0)]) + \
        t.tobytes()
    assert store.is_exist("ep__parallelism_manifest") == 0
    np.testing.assert_array_equal(
        to_np(store.get_tensor_with_parallelism("ep", ReadTarget("shard", p))), t)
    # another expert is another object; "full" needs a TP axis
    other = _par(dict(kind="ep", rank=1, size=4, expert_id=8), dict(kind="dp", rank=0, size=2))
    assert store.get_tensor_with_parallelism("ep", ReadTarget("shard", other)) is None
    assert store.get_tensor_with_parallelism("ep", ReadTarget("full", p)) is None
    pp = _par(dict(kind="pp", rank=0, size=2, stage_id=3))
    assert store.put_tensor_with_parallelism("pp", t, pp) == 0
    assert store.get("pp__pp_0of2_sid3")[:304] == hand_header(
        8, (3, 2), 48, layout=1, axes=[(3, 0, 0, 2, -1, 3, 0)])


class WP:
    def __init__(self, rank, size, split_dim):
        self.rank, self.size, self.split_dim = rank, size, split_dim


def test_with_writer_partition(store, reg):
    """writer_partition: each writer stores its slice of the full tensor as
    <key>__writer_<r>of<n>_sd<d> plus <key>__writer_manifest; "full" without parallelism
    reassembles, "shard" with the matching single TP axis reads a writer's slice."""
    from mooncake.store import ReadTarget
    full = sample("int32", (6, 4))
    for r in range(2):
        assert store.put_tensor_with_parallelism("wr", full, writer_partition=WP(r, 2, 0)) == 0
        assert store.get(f"wr__writer_{r}of2_sd0") == hand_header(
            6, (3, 4), 48, gshape=(6, 4), layout=1, axes=[(1, 0, r, 2, 0, 0, 3)]) + \
            full[3 * r:3 * r + 3].tobytes()
    assert store.get("wr__writer_manifest") == struct.pack(
        "<IHHiiiii4x8q", 0x574D414E, 1, 96, 6, 2, 0, 2, 0, 6, 4, -1, -1, -1, -1, -1, -1)
    np.testing.assert_array_equal(
        to_np(store.get_tensor_with_parallelism("wr", ReadTarget("full"))), full)
    tp1 = _par(dict(kind="tp", rank=1, size=2, split_dim=0))
    np.testing.assert_array_equal(
        to_np(store.get_tensor_with_parallelism("wr", ReadTarget("shard", tp1))), full[3:])
    # only one writer of three: no full tensor
    assert store.put_tensor_with_parallelism("wr3", full, writer_partition=WP(0, 3, 0)) == 0
    assert store.get_tensor_with_parallelism("wr3", ReadTarget("full")) is None
    # refused requests
    assert store.put_tensor_with_parallelism("wrx", full, tp1, writer_partition=WP(0, 2, 0)) \
        == -600
    for bad in (WP(2, 2, 0), WP(0, 0, 0), WP(0, 2, -1), WP(0, 2, 2), WP(0, 5, 0)):
        assert store.put_tensor_with_parallelism("wrx", full, writer_partition=bad) == -600
    assert store.is_exist("wrx__writer_manifest") == 0
    # from a buffer, and batches
    obj = T.encode_bytes(full)
    base = reg.ctypes.data
    reg[:len(obj)] = np.frombuffer(obj, np.uint8)
    assert store.batch_put_tensor_with_parallelism_from(
        ["wrf", "wrf"], [base, base], [len(obj)] * 2,
        writer_partitions=[WP(0, 2, 1), WP(1, 2, 1)]) == [0, 0]
    np.testing.assert_array_equal(to_np(store.get_tensor("wrf__writer_1of2_sd1")), full[:, 2:])
    np.testing.assert_array_equal(
        to_np(store.get_tensor_with_parallelism("wrf", ReadTarget("full"))), full)
    assert store.batch_put_tensor_with_parallelism(["a", "b"], [full, full],
                                                   writer_partitions=[WP(0, 2, 0)]) == \
        [-600, -600]


@pytest.mark.skipif(torch is None, reason="torch does not import in this python3")
def test_with_parallelism_multi_axis_torch(store):
    """A bfloat16 torch tensor split over TP x DP comes back as torch, bit-exact."""
    from mooncake.store import ReadTarget
    full = torch.arange(48, dtype=torch.float32).reshape(6, 8).to(torch.bfloat16)

    def par(r):
        return _par(dict(kind="dp", rank=0, size=1), dict(kind="tp", rank=r, size=2,
                                                            split_dim=0))
    for r in range(2):
        assert store.put_tensor_with_parallelism("tma", full, par(r)) == 0
    got = store.get_tensor_with_parallelism("tma", ReadTarget("full", par(1)))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    assert torch.equal(got, full)
    shard = store.get_tensor_with_parallelism("tma", ReadTarget("shard", par(1)))
    assert torch.equal(shard, full[3:])


@pytest.mark.parametrize("axes", [
    [dict(kind="tp", rank=0, size=2)],                              # TP needs split_dim
    [dict(kind="dp", rank=0, size=2, split_dim=0)],                 # DP takes none
    [dict(kind="ep", rank=0, size=2)],                              # EP needs expert_id
    [dict(kind="pp", rank=0, size=2, stage_id=1, split_dim=0)],     # PP takes no split_dim
    [dict(kind="pp", rank=0, size=2)],                              # PP needs stage_id
    [dict(kind="dp", rank=2, size=2)],                              # rank < size
    [dict(kind="dp", rank=0, size=0)],
    [dict(kind="xp", rank=0, size=1)],                              # unknown kind
    [dict(kind="dp", rank=0, size=2), dict(kind="DP", rank=1, size=2)],  # duplicate kind
    [],
    [dict(kind="tp", rank=0, size=2, split_dim=5)],                 # split_dim past ndim
])
def test_with_parallelism_invalid(store, axes):
    from mooncake.store import ReadTarget
    t = sample("int32", (4, 4))
    p = _par(*axes)
    assert store.put_tensor_with_parallelism("inv", t, p) == -600
    assert store.get_tensor_with_parallelism("inv", ReadTarget("shard", p)) is None
    assert store.is_exist("inv__parallelism_manifest") == 0


def test_with_parallelism_wrong_types(store):
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism("wt", sample("int32", (2, 2)),
                                          _par(dict(kind="dp", rank="0", size=2)))


def test_with_parallelism_zero_copy(store, reg):
    from mooncake.store import ParallelAxis, ReadTarget, TensorParallelism
    base = reg.ctypes.data
    full = sample("float64", (4, 2))
    obj = T.encode_bytes(full)
    reg[3 << 20:(3 << 20) + len(obj)] = np.frombuffer(obj, np.uint8)
    p = TensorParallelism(axes=[ParallelAxis(kind="tp", rank=0, size=2, split_dim=0)])
    assert store.put_tensor_with_parallelism_from("wpf", base + (3 << 20), len(obj), p) == 0
    t = store.get_tensor_with_parallelism_into("wpf", base, 1 << 20,
                                               ReadTarget(mode="shard", parallelism=p))
    np.testing.assert_array_equal(to_np(t), full[:2])
    assert store.batch_put_tensor_with_parallelism_from(["wpf_plain"], [base + (3 << 20)],
                                                        [len(obj)]) == [0]
    got = store.batch_get_tensor_with_parallelism_into(["wpf_plain"], [base], [1 << 20])
    np.testing.assert_array_equal(to_np(got[0]), full)
    # the full tensor reassembled into the caller's buffer
    t = store.get_tensor_with_parallelism_into("wpf", base, 1 << 20,
                                               ReadTarget(mode="full", parallelism=p))
    np.testing.assert_array_equal(to_np(t), full)
    assert bytes(reg[:304]) == hand_header(1, (4, 2), 64)
    assert store.get_tensor_with_parallelism_into("wpf", base, 100,
                                                  ReadTarget(mode="full", parallelism=p)) is None
    # from a buffer with TP and PP: every TP rank's slice, each under its own key
    pp = _par(dict(kind="pp", rank=1, size=2, stage_id=0),
              dict(kind="tp", rank=0, size=2, split_dim=0))
    assert store.put_tensor_with_parallelism_from("wpp", base + (3 << 20), len(obj), pp) == 0
    for r in range(2):
        assert store.get(f"wpp__tp_{r}of2_sd0__pp_1of2_sid0") == hand_header(
            1, (2, 2), 32, gshape=(4, 2), layout=1,
            axes=[(3, 0, 1, 2, -1, 0, 0), (1, 1, r, 2, 0, 0, 2)]) + \
            full[2 * r:2 * r + 2].tobytes()
    t = store.get_tensor_with_parallelism_into("wpp", base, 1 << 20, ReadTarget("full", pp))
    np.testing.assert_array_equal(to_np(t), full)


def test_safetensors_save_load(store, tmp_path):
    a = sample("float32", (3, 4))
    assert store.put_tensor("st", a) == 0
    path = str(tmp_path / "st.safetensors")
    assert store.save_tensor_to_safetensor("st", path) == 0
    got = T.read_safetensors(path)
    assert list(got) == ["st"]
    np.testing.assert_array_equal(got["st"][1], a)
    assert store.save_tensor_to_safetensor("st_missing", path + "x") == -1100
    t = store.load_tensor_from_safetensor("st_back", path)  # entry "st" absent: first entry
    np.testing.assert_array_equal(to_np(t), a)
    np.testing.assert_array_equal(to_np(store.get_tensor("st_back")), a)
    t = store.load_tensor_from_safetensor(key="st", file_name=path)
    np.testing.assert_array_equal(to_np(t), a)
    assert store.load_tensor_from_safetensor("st_nofile", str(tmp_path / "absent")) is None


def test_safetensors_hand_written_file_loads(store, tmp_path):
    w = np.arange(6, dtype="<i2").reshape(3, 2)
    bits = np.array([0x3F80, 0x4000], dtype="<u2")  # bf16 1.0, 2.0
    hdr = {"bias": {"dtype": "BF16", "shape": [2], "data_offsets": [12, 16]},
           "weight": {"dtype": "I16", "shape": [3, 2], "data_offsets": [0, 12]}}
    text = json.dumps(hdr).encode()
    path = tmp_path / "hand.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + w.tobytes() + bits.tobytes())
    t = store.load_tensor_from_safetensor("weight", str(path))
    np.testing.assert_array_equal(to_np(t), w)
    assert store.get("weight") == hand_header(4, (3, 2), 12) + w.tobytes()
    t = store.load_tensor_from_safetensor("bias", str(path))
    assert store.get("bias") == hand_header(12, (2,), 4) + bits.tobytes()
    np.testing.assert_array_equal(to_np(t), bits)
    os_key = str(path)
    t = store.load_tensor_from_safetensor(file_name=os_key)  # key = file name, first entry
    assert store.is_exist(os_key) == 1


def test_torch_with_tp(store):
    if torch is None:
        pytest.skip("torch not installed")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert store.put_tensor_with_tp("ttp", x, tp_size=2, split_dim=1) == 0
    y = store.get_tensor_with_tp("ttp", tp_rank=1, tp_size=2, split_dim=1)
    assert torch.equal(y, x[:, 2:])


def test_ctypes_view_helper_not_used_on_unmapped_memory(store):
    # an address nothing is mapped at: refused without touching it
    assert store.put_tensor_from("unmapped", 16, 4096) == -600
    assert ctypes.sizeof(ctypes.c_char) == 1


def test_without_torch_gets_are_numpy(store, monkeypatch):
    """With torch unavailable every get returns numpy arrays (BF16 / F8 as raw bits)."""
    monkeypatch.setattr(T, "_torch_state", [None])
    a = sample("float16", (2, 3))
    assert store.put_tensor("nt_f16", a) == 0
    t = store.get_tensor("nt_f16")
    assert isinstance(t, np.ndarray) and t.dtype == np.float16
    np.testing.assert_array_equal(t, a)
    f8 = np.array([0x38, 0xC0, 0x00], dtype=np.uint8)
    assert store.put("nt_f8", hand_header(13, (3,), 3) + f8.tobytes()) == 0
    t = store.get_tensor("nt_f8")
    assert isinstance(t, np.ndarray) and t.dtype == np.uint8
    np.testing.assert_array_equal(t, f8)
    got = store.batch_get_tensor(["nt_f16", "nt_none"])
    assert isinstance(got[0], np.ndarray) and got[1] is None


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_empty_tensors_everywhere(store):
    """Zero-element tensors (as upstream's wheel tests use them): plain, into/from, TP."""
    cases = [torch.empty((0,), dtype=torch.float32), torch.empty((0, 64), dtype=torch.float16),
             torch.empty((2, 0, 3), dtype=torch.bfloat16), torch.empty((1, 0), dtype=torch.int64)]
    keys = [f"empty_{i}" for i in range(len(cases))]
    assert store.batch_put_tensor(keys, cases) == [0] * len(cases)
    for x, y in zip(cases, store.batch_get_tensor(keys)):
        assert y.shape == x.shape and y.dtype == x.dtype and y.numel() == 0
    buf = (ctypes.c_ubyte * 4096)()
    ptr = ctypes.addressof(buf)
    assert store.register_buffer(ptr, 4096) == 0
    try:
        n = store.get_size("empty_2")
        assert n == 304
        y = store.get_tensor_into("empty_2", ptr, 4096)
        assert y.shape == (2, 0, 3) and y.dtype == torch.bfloat16
        assert store.put_tensor_from("empty_2_from", ptr, n) == 0
        assert store.get_tensor("empty_2_from").shape == (2, 0, 3)
    finally:
        store.unregister_buffer(ptr)
    x = torch.empty((2, 0, 3), dtype=torch.float32)
    assert store.put_tensor_with_tp("empty_tp", x, tp_size=2, split_dim=0) == 0
    for r in range(2):
        y = store.get_tensor_with_tp("empty_tp", tp_rank=r, tp_size=2)
        assert y.shape == (1, 0, 3) and y.dtype == torch.float32
