"""Conformance of mooncake.store with upstream Mooncake's current Python API.

Each test checks one upstream behaviour against a real cluster (the conftest master and
storage server): the enums and their values, ReplicateConfig's attributes and defaults, what a
put honours or refuses, setup's return codes, local_buffer_size=0, get_into_ranges,
setup_dummy, the methods added for upstream's surface, and upstream's module names. Which of
upstream's methods exist, and how each behaves here, is listed in docs/compatibility.md
(checked by test_compatibility.py).
"""
import ctypes
import json
import os
import time
import urllib.request
import uuid

import numpy as np
import pytest

from conftest import Proc, bin_path, wait_for

import mooncake
from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction  # noqa: F401
import mooncake.store as ms

INVALID = mooncake.STATUS_CODES["INVALID_PARAMS"]
NOT_FOUND = mooncake.STATUS_CODES["OBJECT_NOT_FOUND"]
assert INVALID == -600 and NOT_FOUND == -704


def k(prefix="conf"):
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def reg(store):
    """A 1 MiB numpy buffer registered with the store for the test."""
    buf = np.zeros(1 << 20, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    yield buf
    assert store.unregister_buffer(buf.ctypes.data) == 0


# ---- 1. enums ----------------------------------------------------------------------------

UPSTREAM_ENUMS = {
    "ObjectDataType": ["UNKNOWN", "KVCACHE", "TENSOR", "WEIGHT", "SAMPLE", "ACTIVATION",
                       "GRADIENT", "OPTIMIZER_STATE", "METADATA", "GENERAL"],
    "SoftPinAction": ["PRESERVE", "ENABLE", "DISABLE"],
    "ReplicaStatus": ["UNDEFINED", "INITIALIZED", "PROCESSING", "COMPLETE", "REMOVED", "FAILED"],
    "TaskType": ["REPLICA_COPY", "REPLICA_MOVE"],
    "TaskStatus": ["PENDING", "PROCESSING", "FAILED", "SUCCESS"],
}


@pytest.mark.parametrize("name", sorted(UPSTREAM_ENUMS))
def test_enum_values(name):
    cls = getattr(ms, name)
    assert [m.name for m in cls] == UPSTREAM_ENUMS[name]
    assert [int(m) for m in cls] == list(range(len(UPSTREAM_ENUMS[name])))


def test_enum_members_exported_like_pybind():
    # export_values() puts the members in the module; TaskStatus is exported last
    assert ms.KVCACHE is ms.ObjectDataType.KVCACHE and ms.GENERAL == 9
    assert ms.COMPLETE is ms.ReplicaStatus.COMPLETE
    assert ms.REPLICA_MOVE is ms.TaskType.REPLICA_MOVE
    assert ms.FAILED is ms.TaskStatus.FAILED and ms.SUCCESS == 3
    assert not hasattr(ms, "PRESERVE")  # SoftPinAction is not exported upstream


# ---- 2. ReplicateConfig -----------------------------------------------------------------

def test_replicate_config_defaults():
    c = ReplicateConfig()
    assert c.replica_num == 1
    assert c.nof_replica_num == 0 and c.dfs_replica_num == 0
    assert c.soft_pin_action is SoftPinAction.PRESERVE
    assert c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False
    assert c.preferred_segments == [] and c.preferred_nof_segments == []
    assert c.preferred_segment == ""
    assert c.prefer_alloc_in_same_node is False
    assert c.data_type is ms.ObjectDataType.UNKNOWN
    assert c.group_ids is None
    assert c.with_soft_pin is False


def test_replicate_config_setters():
    c = ReplicateConfig()
    c.soft_pin_ttl_ms = 1000
    assert c.soft_pin_ttl_ms == 1000
    c.soft_pin_ttl_ms = None
    assert c.soft_pin_ttl_ms is None
    for bad in (-1, 1 << 64):          # upstream: does not convert to uint64 -> TypeError
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    c.soft_pin_action = SoftPinAction.DISABLE
    assert c.soft_pin_action is SoftPinAction.DISABLE
    with pytest.raises(ValueError):
        c.soft_pin_action = 7
    with pytest.raises(TypeError):
        c.soft_pin_action = "ENABLE"
    c.data_type = ms.ObjectDataType.KVCACHE
    assert c.data_type is ms.ObjectDataType.KVCACHE
    with pytest.raises(ValueError):
        c.data_type = 10
    c.group_ids = ["g1", "g2"]
    assert c.group_ids == ["g1", "g2"]
    c.group_ids = None
    assert c.group_ids is None
    c.preferred_nof_segments = ["n:1"]
    assert c.preferred_nof_segments == ["n:1"]
    c.nof_replica_num, c.dfs_replica_num = 2, 3
    assert (c.nof_replica_num, c.dfs_replica_num) == (2, 3)


def test_with_soft_pin_is_soft_pin_action_enable():
    c = ReplicateConfig()
    c.with_soft_pin = True
    assert c.soft_pin_action is SoftPinAction.ENABLE and c.with_soft_pin is True
    c.with_soft_pin = False
    assert c.soft_pin_action is SoftPinAction.PRESERVE
    c.soft_pin_action = SoftPinAction.ENABLE
    assert c.with_soft_pin is True
    c.soft_pin_action = SoftPinAction.DISABLE
    assert c.with_soft_pin is False
    assert ReplicateConfig(with_soft_pin=True).soft_pin_action is SoftPinAction.ENABLE
    with pytest.raises(TypeError):
        ReplicateConfig(with_soft_pin=True, soft_pin_action=SoftPinAction.ENABLE)


def _refused_configs(store):
    def cfg(**kw):
        c = ReplicateConfig()
        for a, v in kw.items():
            setattr(c, a, v)
        return c
    return {
        "nof_replica_num": cfg(nof_replica_num=1),
        "dfs_replica_num": cfg(dfs_replica_num=1),
        "preferred_nof_segments": cfg(preferred_nof_segments=["nof:1"]),
        "prefer_alloc_in_same_node": cfg(prefer_alloc_in_same_node=True),
        "ttl_without_enable": cfg(soft_pin_ttl_ms=1000),
        "ttl_with_disable": cfg(soft_pin_action=SoftPinAction.DISABLE, soft_pin_ttl_ms=5),
        "65_preferred_segments": cfg(preferred_segments=[f"seg-{i}:1" for i in range(65)]),
    }


@pytest.mark.parametrize("what", ["nof_replica_num", "dfs_replica_num", "preferred_nof_segments",
                                  "prefer_alloc_in_same_node", "ttl_without_enable",
                                  "ttl_with_disable", "65_preferred_segments"])
def test_refused_settings_are_invalid_params(store, reg, what):
    c = _refused_configs(store)[what]
    key = k()
    assert store.put(key, b"value", c) == INVALID
    assert store.upsert(key, b"value", c) == INVALID
    assert store.put_parts(key, b"va", b"lue", config=c) == INVALID
    assert store.put_batch([key], [b"value"], c) == INVALID
    assert store.put_from(key, reg.ctypes.data, 16, c) == INVALID
    assert store.batch_put_from([key, k()], [reg.ctypes.data] * 2, [16, 16], c) == \
        [INVALID, INVALID]
    assert store.is_exist(key) == 0
    # the same put without the setting works
    assert store.put(key, b"value", ReplicateConfig()) == 0
    assert store.get(key) == b"value"


def test_metadata_settings_accepted(store):
    c = ReplicateConfig()
    c.data_type = ms.ObjectDataType.KVCACHE
    c.group_ids = ["group-a"]
    key = k()
    assert store.put(key, b"kv", c) == 0 and store.get(key) == b"kv"
    keys = [k(), k()]
    c.group_ids = ["g1", "g2"]
    assert store.put_batch(keys, [b"a", b"b"], c) == 0
    assert store.get_batch(keys) == [b"a", b"b"]
    c.group_ids = ["only-one"]                      # one id per key in a batch
    bad = [k(), k()]
    assert store.put_batch(bad, [b"a", b"b"], c) == INVALID
    assert store.batch_is_exist(bad) == [0, 0]


def test_preferred_segments_one_entry_places_there(store, storage):
    for target in (storage.segment, store.get_hostname()):
        for _ in range(4):                          # random placement would miss within 4
            c = ReplicateConfig()
            c.preferred_segments = [target]
            key = k()
            assert store.put(key, b"x" * 4096, c) == 0
            segs = [r.get_memory_descriptor().buffer_descriptor.segment_name
                    for r in store.get_replica_desc(key)]
            assert segs == [target], (target, segs)
    # the deprecated single form still works
    c = ReplicateConfig()
    c.preferred_segment = storage.segment
    key = k()
    assert store.put(key, b"y", c) == 0
    assert _segments(store, key) == [storage.segment]


def _segments(store, key):
    return [r.get_memory_descriptor().buffer_descriptor.segment_name
            for r in store.get_replica_desc(key)]


def test_preferred_segments_tried_in_order(store, storage):
    own = store.get_hostname()
    # one replica on each, in order
    for order in ([own, storage.segment], [storage.segment, own]):
        c = ReplicateConfig()
        c.replica_num = 2
        c.preferred_segments = order
        key = k()
        assert store.put(key, b"z" * 1000, c) == 0
        assert _segments(store, key) == order
    # an unknown name is skipped; the next one is used
    for _ in range(4):
        c = ReplicateConfig()
        c.preferred_segments = ["no-such-segment:1", storage.segment]
        c.preferred_segment = own                   # not used when the list is given
        key = k()
        assert store.put(key, b"w", c) == 0
        assert _segments(store, key) == [storage.segment]
    # batch and zero-copy forms carry the list too
    c = ReplicateConfig()
    c.preferred_segments = [storage.segment]
    keys = [k() for _ in range(4)]
    assert store.put_batch(keys, [b"b"] * 4, c) == 0
    assert all(_segments(store, x) == [storage.segment] for x in keys)


# ---- soft_pin_ttl_ms reaches the master (its /query_key shows the pin) -------------------

@pytest.fixture(scope="module")
def http_master():
    m = Proc([bin_path("mooncake_master"), "--port=0", "--metrics_port=0", "--wal_dir=",
              "--default_kv_lease_ttl=200", "--client_ttl=3", "--log_level=warn"],
             "mooncake_master listening")
    m.addr = f"127.0.0.1:{m.field('rpc_port')}"
    m.http = f"http://127.0.0.1:{m.field('metrics_port')}"
    yield m
    m.stop()


def _soft_pinned(master, key):
    with urllib.request.urlopen(f"{master.http}/query_key?key={key}", timeout=5) as r:
        return json.loads(r.read())["soft_pinned"]


def test_soft_pin_ttl_reaches_master(http_master):
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                    http_master.addr) == 0
    try:
        short, default, legacy, plain = k(), k(), k(), k()
        c = ReplicateConfig()
        c.soft_pin_action = SoftPinAction.ENABLE
        c.soft_pin_ttl_ms = 400
        t0 = time.monotonic()
        assert st.put(short, b"s", c) == 0
        c.soft_pin_ttl_ms = None                    # the master's default (30 min)
        assert st.put(default, b"d", c) == 0
        assert st.put(legacy, b"l", ReplicateConfig(with_soft_pin=True)) == 0
        assert st.put(plain, b"p") == 0
        if time.monotonic() - t0 < 0.3:
            assert _soft_pinned(http_master, short) is True
        wait_for(lambda: _soft_pinned(http_master, short) is False, timeout=5,
                 what="the 400 ms soft pin to expire")
        assert time.monotonic() - t0 >= 0.35
        assert _soft_pinned(http_master, default) is True
        assert _soft_pinned(http_master, legacy) is True
        assert _soft_pinned(http_master, plain) is False
        # upserts: PRESERVE keeps the old value's pin, DISABLE drops it, ENABLE sets one
        assert st.upsert(default, b"d2") == 0
        assert st.get(default) == b"d2" and _soft_pinned(http_master, default) is True
        c = ReplicateConfig()
        c.soft_pin_action = SoftPinAction.DISABLE
        assert st.upsert(default, b"d3", c) == 0
        assert st.get(default) == b"d3" and _soft_pinned(http_master, default) is False
        assert st.upsert(default, b"d4") == 0
        assert _soft_pinned(http_master, default) is False
        assert st.upsert(plain, b"p2", ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE)) == 0
        assert _soft_pinned(http_master, plain) is True
    finally:
        st.close()


# ---- 3. setup codes and local_buffer_size=0 ----------------------------------------------

def test_setup_unparseable_size_is_a_code(master):
    st = MooncakeDistributedStore()
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
           "global_segment_size": "50%", "local_buffer_size": "16MB", "protocol": "tcp",
           "rdma_devices": "", "master_server_addr": master.addr}
    rc = st.setup(cfg)
    assert rc != 0 and rc == INVALID
    assert st.health_check() == 1
    cfg["global_segment_size"] = "16MB"
    cfg["local_buffer_size"] = "16 MB"
    assert st.setup(cfg) == 0                       # human-readable sizes work
    key = k()
    assert st.put(key, b"human") == 0 and st.get(key) == b"human"
    st.close()


def test_setup_upstream_positional_tail(master, storage, tmp_path):
    """setup takes upstream's 13 positional arguments; the SSD tier against a master without
    --enable_offload is refused (UNABLE_OFFLOAD, test_store_offload.py has the tier), never
    silently dropped; tenant_id is checked (test_store_tenants.py has the isolation); the
    rest work."""
    st = MooncakeDistributedStore()
    base = ("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr, None)
    assert st.setup(*base, True, str(tmp_path / "ssd")) == -1300  # enable_ssd_offload
    assert st.health_check() == 1
    assert st.setup(*base, False, "", "_acme") == INVALID        # tenant_id: reserved name
    assert st.setup(dict(zip(("local_hostname", "metadata_server", "global_segment_size",
                              "local_buffer_size", "protocol", "rdma_devices",
                              "master_server_addr"), base), tenant_id="_acme")) == INVALID
    assert st.setup(*base, False, "", "acme") == 0               # tenant_id
    key = k()
    assert st.put(key, b"acme") == 0 and st.get(key) == b"acme"
    assert st.setup(*base, False, "", "default", False, 9300) == 0
    assert st.get(key) == b""                                    # acme's key, not default's
    key = k()
    assert st.put(key, b"tail") == 0 and st.get(key) == b"tail"
    st.close()


def test_zero_local_buffer_size(master, storage):
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 0, "tcp", "", master.addr) == 0
    try:
        key = k()
        assert st.put(key, b"test_zero_buffer_value") != 0
        assert st.is_exist(key) == 0
        assert st.put_batch([key], [b"v"]) != 0
        assert st.put_parts(key, b"a", b"b") != 0
        assert st.upsert(key, b"v") != 0
        assert st.is_exist(key) == 0
        # zero-copy on registered memory does not need the local buffer
        buf = np.frombuffer(b"registered-bytes", dtype=np.uint8).copy()
        assert st.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        assert st.put_from(key, buf.ctypes.data, buf.nbytes) == 0
        assert st.is_exist(key) == 1
        assert st.get(key) == b""                   # byte get needs the local buffer too
        buf[:] = 0
        assert st.get_into(key, buf.ctypes.data, buf.nbytes) == buf.nbytes
        assert bytes(buf) == b"registered-bytes"
        assert st.unregister_buffer(buf.ctypes.data) == 0
    finally:
        st.close()


# ---- 4. get_into_ranges ------------------------------------------------------------------

def test_get_into_ranges(store):
    key1, key2 = k("r1"), k("r2")
    data1 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    data2 = b"abcdefghijklmnopqrstuvwxyz0123456789"
    size = 32
    assert store.put(key1, data1) == 0 and store.put(key2, data2) == 0
    b0, b1 = (ctypes.c_ubyte * size)(), (ctypes.c_ubyte * size)()
    p0, p1 = ctypes.addressof(b0), ctypes.addressof(b1)
    assert store.register_buffer(p0, size) == 0 and store.register_buffer(p1, size) == 0
    try:
        ctypes.memset(b0, ord("_"), size)
        ctypes.memset(b1, ord("_"), size)
        res = store.get_into_ranges([p0, p1], [[key1, key2], [key2, key1]],
                                    [[[0, 20], [8]], [[4], [16]]],
                                    [[[1, 30], [2]], [[0], [10]]],
                                    [[[4, 3], [5]], [[6], [4]]])
        assert res == [[[4, 3], [5]], [[6], [4]]]
        assert bytes(b0[0:4]) == data1[1:5]
        assert bytes(b0[8:13]) == data2[2:7]
        assert bytes(b0[20:23]) == data1[30:33]
        assert bytes(b1[4:10]) == data2[0:6]
        assert bytes(b1[16:20]) == data1[10:14]
        assert bytes(b0[4:8]) == b"____"            # nothing written between fragments

        # a key whose lists differ in length: its fragments fail, the empty key stays empty
        mis = store.get_into_ranges([p0], [[key1, key2]], [[[0], []]], [[[0, 1], []]],
                                    [[[], []]])
        assert len(mis) == 1 and len(mis[0]) == 2
        assert mis[0][0][0] < 0 and mis[0][1] == []
        # past the end of the object, past the end of the buffer: that fragment only
        r = store.get_into_ranges([p0], [[key1]], [[[0, 8]]], [[[len(data1) - 1, 0]]],
                                  [[[4, 4]]])
        assert r[0][0][0] == INVALID and r[0][0][1] == 4
        r = store.get_into_ranges([p0], [[key1]], [[[size - 1, 0]]], [[[0, 0]]], [[[4, 4]]])
        assert r[0][0][0] == INVALID and r[0][0][1] == 4
        # a missing key fails its own fragments only
        r = store.get_into_ranges([p0], [["missing-" + key1, key1]], [[[0], [8]]],
                                  [[[0], [0]]], [[[4], [4]]])
        assert r[0][0][0] == NOT_FOUND and r[0][1][0] == 4
        # top-level length mismatch: every fragment fails, shaped like the request
        r = store.get_into_ranges([p0, p1], [[key1]], [[[0, 4]]], [[[0, 0]]], [[[1, 1]]])
        assert r == [[[INVALID, INVALID]], [[INVALID]]]
        # a buffer that is not registered
        loose = (ctypes.c_ubyte * size)()
        r = store.get_into_ranges([ctypes.addressof(loose)], [[key1]], [[[0]]], [[[0]]],
                                  [[[4]]])
        assert r == [[[INVALID]]] and bytes(loose[0:4]) == b"\0\0\0\0"
        # an offset inside a registered buffer: its room is what is left of it
        r = store.get_into_ranges([p0 + 16], [[key1]], [[[12, 13]]], [[[0, 0]]], [[[4, 4]]])
        assert r == [[[4, INVALID]]] and bytes(b0[28:32]) == data1[0:4]
    finally:
        assert store.unregister_buffer(p0) == 0 and store.unregister_buffer(p1) == 0


def test_get_into_ranges_many_fragments(store, reg):
    """One object read once, many fragments scattered (reversed chunks)."""
    n, chunk = 64 * 1024, 4096
    value = os.urandom(n)
    key = k("many")
    assert store.put(key, value) == 0
    m = n // chunk
    dst = [[[i * chunk for i in range(m)]]]
    src = [[[(m - 1 - i) * chunk for i in range(m)]]]
    res = store.get_into_ranges([reg.ctypes.data], [[key]], dst, src, [[[chunk] * m]])
    assert res == [[[chunk] * m]]
    want = b"".join(value[(m - 1 - i) * chunk:(m - i) * chunk] for i in range(m))
    assert reg[:n].tobytes() == want


# ---- 5. setup_dummy ----------------------------------------------------------------------

def test_setup_dummy_fails_without_real_client(master, storage):
    st = MooncakeDistributedStore()
    # no real client serves port 3 (the storage fixture may serve the default 50052);
    # the dummy round trips are in test_dummy.py
    assert st.setup_dummy(3200 << 20, 512 << 20, "127.0.0.1:3") == -1
    assert st.health_check() == 1
    assert st.put(k(), b"v") != 0
    # a client that was set up is dropped first, as upstream replaces it
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp", "", master.addr) == 0
    assert st.health_check() == 0
    assert st.setup_dummy(0, 0, "127.0.0.1:1") == -1
    assert st.health_check() == 1
    with pytest.raises(TypeError):
        st.setup_dummy("lots", 0, "127.0.0.1:50052")


# ---- 6. init_all, the offload tier, put_from_with_metadata, sessions, tasks ---------------

def test_init_all(master):
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", master.addr) == 0
    try:
        assert st.init_all("tcp", "") == INVALID               # already initialized
        assert st.health_check() == 0
    finally:
        st.close()
    # upstream's fixed etcd (127.0.0.1:2379) and master: with neither there, it fails cleanly
    st = MooncakeDistributedStore()
    rc = st.init_all("tcp", "", 4 << 20)
    try:
        assert isinstance(rc, int)
        if rc != 0:
            assert st.health_check() == 1
    finally:
        st.close()
    with pytest.raises(TypeError):
        st.init_all("tcp", "", "lots")


def _on(store, seg, key, value):
    c = ReplicateConfig()
    c.preferred_segments = [seg]
    assert store.put(key, value, c) == 0
    return _segments(store, key)


def test_extra_segments(master, storage, tmp_path):
    st = MooncakeDistributedStore()
    assert st.allocate_and_mount_segment(1 << 20) == {"ret": -1, "segment_ids": [],
                                                      "allocated_size": 0}   # not set up
    assert st.mount_segment("/nonexistent", 4096)["ret"] == -1
    assert st.unmount_segment(["1-2"]) == -1
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", master.addr) == 0
    reader = MooncakeDistributedStore()
    assert reader.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", master.addr) == 0
    try:
        host = st.get_hostname()
        # allocate_and_mount_segment: rounded up to 4 MiB, one id "<u64>-<u64>"
        r = st.allocate_and_mount_segment(5 << 20)
        assert r["ret"] == 0 and r["allocated_size"] == 8 << 20
        assert len(r["segment_ids"]) == 1
        a, _, b = r["segment_ids"][0].partition("-")
        assert a.isdigit() and b.isdigit()
        value = os.urandom(300 << 10)
        ka = k("xseg")
        assert _on(st, f"{host}#1", ka, value) == [f"{host}#1"]
        assert st.get(ka) == value and reader.get(ka) == value   # served to others too
        # a replica task whose source is an extra segment is run by its owner too
        kt = k("xseg-move")
        assert _on(st, f"{host}#1", kt, value) == [f"{host}#1"]
        tid, err = reader.create_move_task(kt, f"{host}#1", storage.segment)
        assert err == 0
        assert _wait_task(reader, tid).status == mooncake.store.TaskStatus.SUCCESS
        assert _segments(reader, kt) == [storage.segment] and reader.get(kt) == value
        # mount_segment: a file range, MAP_SHARED: the value lands in the file
        f = tmp_path / "seg.bin"
        f.write_bytes(b"\0" * (12 << 20))
        assert st.mount_segment(str(f), 4096, offset=4097)["ret"] == -1   # not page-aligned
        assert st.mount_segment(str(f), 12 << 20, offset=4096)["ret"] == -1  # past the end
        assert st.mount_segment(str(f), 0)["ret"] == -1
        assert st.mount_segment(str(f), 4 << 20, protocol="cxl")["ret"] == -1
        m = st.mount_segment(str(f), 8 << 20, offset=4 << 20)
        assert m["ret"] == 0 and len(m["segment_ids"]) == 1
        kf = k("xseg")
        c = ReplicateConfig()
        c.preferred_segments = [f"{host}#{i}" for i in range(2, 9)]  # "<hostname>#<n>"
        assert st.put(kf, value, c) == 0
        segs = _segments(st, kf)
        assert len(segs) == 1 and segs[0].startswith(host + "#"), segs
        fseg = segs[0]
        assert reader.get(kf) == value
        assert value in f.read_bytes()[4 << 20:]
        # ids are per kind, and must parse
        assert st.unmount_segment(r["segment_ids"]) == -1
        assert st.unmount_and_free_segment(m["segment_ids"]) == -1
        assert st.unmount_segment(["garbage"]) == -1
        assert st.unmount_segment(["1-2", "x-"]) == -1
        # immediate unmount: the objects on it are gone, the id is used up
        assert st.unmount_and_free_segment(r["segment_ids"]) == 0
        assert st.is_exist(ka) == 0 and reader.get(ka) == b""
        assert st.unmount_and_free_segment(r["segment_ids"]) == -1
        c = ReplicateConfig()
        c.preferred_segments = [f"{host}#1"]
        kb = k("xseg")
        assert st.put(kb, b"elsewhere", c) == 0 and _segments(st, kb) != [f"{host}#1"]
        # graceful unmount: readable while a read lease is held, then dropped and freed
        assert reader.get(kf) == value               # a read lease (the fixture master: 1 s)
        t0 = time.monotonic()
        assert st.unmount_segment(m["segment_ids"], grace_period_seconds=1) == 0
        if time.monotonic() - t0 < 0.5:
            assert st.is_exist(kf) == 1              # still being drained
        wait_for(lambda: st.is_exist(kf) == 0, timeout=10, what="the drained segment to go")
        assert fseg not in _on(st, fseg, k("xseg"), b"v")
        assert st.unmount_segment(m["segment_ids"]) == -1
        # close() unmounts what is left
        r2 = st.allocate_and_mount_segment(1)
        assert r2["ret"] == 0 and r2["allocated_size"] == 4 << 20
        kc = k("xseg")
        c.preferred_segments = [f"{host}#{i}" for i in range(3, 12) if f"{host}#{i}" != fseg]
        assert st.put(kc, b"on-it", c) == 0
        assert _segments(st, kc)[0].startswith(host + "#")
    finally:
        st.close()
    assert reader.is_exist(kc) == 0
    reader.close()


def test_extra_segments_remount_after_master_restart(tmp_path):
    from conftest import free_port, start_master
    port = free_port()
    m = start_master(lease_ttl_ms=200, client_ttl=1, port=port)
    st = MooncakeDistributedStore()
    try:
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "",
                        f"127.0.0.1:{port}") == 0
        assert st.allocate_and_mount_segment(4 << 20)["ret"] == 0
        seg = f"{st.get_hostname()}#1"
        assert _on(st, seg, k("rm"), b"before") == [seg]
        m.kill()
        m = start_master(lease_ttl_ms=200, client_ttl=1, port=port)
        # the new master (no log) knows nothing; the client re-mounts its extra segment after
        # a lease period, empty (the puts below reach the master before the client's next
        # ping: that ping still asks for the re-mount)
        def mounted():
            c = ReplicateConfig()
            c.preferred_segments = [seg]
            key = k("rm")
            return st.put(key, b"after", c) == 0 and _segments(st, key) == [seg]
        wait_for(mounted, timeout=15, interval=0.2, what="the extra segment to be re-mounted")
        assert st.health_check() == 0
    finally:
        st.close()
        m.stop()


def test_new_methods_on_a_dummy_client(master, tmp_path):
    """Upstream's dummy clients refuse the segment calls ("requires RealClient")."""
    from test_dummy import RealClient
    real = RealClient(master.addr, str(tmp_path))
    d = MooncakeDistributedStore()
    try:
        assert d.setup_dummy(64 << 20, 16 << 20, real.addr) == 0
        assert d.mount_segment(str(tmp_path / "none"), 4096)["ret"] == -1
        assert d.allocate_and_mount_segment(4 << 20)["ret"] == -1
        assert d.unmount_segment(["1-2"]) == -1
        assert d.unmount_and_free_segment(["1-2"]) == -1
        assert d.unmount_local_disk_segment() == -1
        assert d.get_offload_rpc_read_count() == 0
        assert d.init_all("tcp", "") == INVALID
        key = k("dummy")
        assert d.put(key, b"v") == 0
        assert d.batch_replica_clear([key]) == []
        assert d.is_exist(key) == 1
    finally:
        d.close()
        real.stop()


def test_no_offload_tier(store):
    assert store.get_offload_rpc_read_count() == 0
    assert store.unmount_local_disk_segment() == 0
    assert store.unmount_local_disk_segment(grace_period_seconds=3) == 0
    fresh = MooncakeDistributedStore()
    assert fresh.get_offload_rpc_read_count() == 0
    assert fresh.unmount_local_disk_segment() == -1             # not initialized


def test_put_from_with_metadata(store, reg):
    meta, data = b"META:v1|", os.urandom(5000)
    reg[:len(meta)] = np.frombuffer(meta, dtype=np.uint8)
    reg[4096:4096 + len(data)] = np.frombuffer(data, dtype=np.uint8)
    base = reg.ctypes.data
    key = k("meta")
    assert store.put_from_with_metadata(key, base + 4096, base, len(data), len(meta)) == 0
    assert store.get(key) == meta + data                        # metadata first, then data
    assert store.get_size(key) == len(meta) + len(data)
    key2 = k("meta")                                            # no metadata
    assert store.put_from_with_metadata(key2, base + 4096, 0, len(data), 0,
                                        ReplicateConfig()) == 0
    assert store.get(key2) == data
    key3 = k("meta")
    assert store.put_from_with_metadata(key3, base + 4096, base, 0, len(meta)) == 0
    assert store.is_exist(key3) == 0                            # size 0: nothing stored
    c = ReplicateConfig()
    c.prefer_alloc_in_same_node = True
    assert store.put_from_with_metadata(k(), base + 4096, base, 16, 8, c) == -1
    c = ReplicateConfig()
    c.nof_replica_num = 1
    assert store.put_from_with_metadata(k(), base + 4096, base, 16, 8, c) == -INVALID  # positive
    loose = (ctypes.c_ubyte * 64)()
    bad = store.put_from_with_metadata(k(), ctypes.addressof(loose), base, 64, 8)
    assert bad > 0
    assert MooncakeDistributedStore().put_from_with_metadata(k(), base, base, 8, 8) == INVALID


def test_batch_get_session(store, reg):
    v1, v2 = os.urandom(3000), os.urandom(700)
    k1, k2, missing = k("gs"), k("gs"), k("gs-missing")
    assert store.put(k1, v1) == 0 and store.put(k2, v2) == 0
    assert store.batch_get_session_start([]) == []
    assert store.batch_get_session_start([k1, k2, missing]) == [0, 0, NOT_FOUND]
    base = reg.ctypes.data
    reg[:8192] = 0
    res = store.batch_get_into_multi_buffer_ranges(
        [k1, k2, missing],
        [[base, base + 100], [base + 1000], [base + 2000]],
        [[10, 20], [700], [4]],
        [[0, 2980], [0], [0]])
    assert res == [30, 700, INVALID]                            # no session for missing
    assert reg[:10].tobytes() == v1[:10]
    assert reg[100:120].tobytes() == v1[2980:3000]
    assert reg[1000:1700].tobytes() == v2
    # a range past the object, lists of different lengths
    assert store.batch_get_into_multi_buffer_ranges([k1], [[base]], [[10]], [[2995]]) == [INVALID]
    assert store.batch_get_into_multi_buffer_ranges([k1], [[base]], [[10, 1]], [[0]]) == [INVALID]
    assert store.batch_get_into_multi_buffer_ranges([k1, k2], [[base]], [[1]], [[0]]) == \
        [INVALID, INVALID]
    assert store.batch_get_session_end([k1, missing]) == 0
    assert store.batch_get_into_multi_buffer_ranges([k1], [[base]], [[10]], [[0]]) == [INVALID]
    assert store.batch_get_into_multi_buffer_ranges([k2], [[base]], [[5]], [[1]]) == [5]
    assert reg[:5].tobytes() == v2[1:6]
    assert store.batch_get_session_end([k2]) == 0
    fresh = MooncakeDistributedStore()
    assert fresh.batch_get_session_start([k1]) == []
    assert fresh.batch_get_session_end([k1]) == -1


def test_batch_get_session_lease_expires(store, reg, monkeypatch):
    # the session lasts DEFAULT_KV_LEASE_TTL (the client's view of the master's read lease)
    monkeypatch.setenv("DEFAULT_KV_LEASE_TTL", "200")
    key = k("gsl")
    p = reg.ctypes.data
    assert store.put(key, b"abcdef") == 0
    assert store.batch_get_session_start([key]) == [0]
    assert store.batch_get_into_multi_buffer_ranges([key], [[p]], [[3]], [[1]]) == [3]
    time.sleep(0.25)
    assert store.batch_get_into_multi_buffer_ranges([key], [[p]], [[3]], [[0]]) == \
        [mooncake.STATUS_CODES["LEASE_EXPIRED"]]
    # that closed the session
    assert store.batch_get_into_multi_buffer_ranges([key], [[p]], [[3]], [[0]]) == [INVALID]
    assert reg[:3].tobytes() == b"bcd"


def test_batch_put_session(store, reg):
    base = reg.ctypes.data
    data = os.urandom(6000)
    reg[:6000] = np.frombuffer(data, dtype=np.uint8)
    k1, k2, k3 = k("ps"), k("ps"), k("ps")
    assert store.put(k3, b"already") == 0
    c = ReplicateConfig()
    c.group_ids = ["g1", "g2", "g3"]
    assert store.batch_put_session_start([k1, k2, k3], [4000, 100, 10], c) == \
        [0, 0, mooncake.STATUS_CODES["OBJECT_ALREADY_EXISTS"]]
    assert store.batch_put_session_start([k1], [4000]) == [INVALID]   # session exists
    assert store.is_exist(k1) == 0                              # not readable before the end
    # two ranges of k1 (out of order), one range of k2; one past the end of k2
    res = store.batch_put_from_multi_buffer_ranges(
        [k1, k2], [[base + 2000, base], [base + 5000]], [[2000, 2000], [100]],
        [[2000, 0], [0]])
    assert res == [4000, 100]
    assert store.batch_put_from_multi_buffer_ranges([k2], [[base]], [[50]], [[60]]) == [INVALID]
    loose = (ctypes.c_ubyte * 16)()
    assert store.batch_put_from_multi_buffer_ranges([k2], [[ctypes.addressof(loose)]], [[16]],
                                                    [[0]]) == [INVALID]
    assert store.batch_put_from_multi_buffer_ranges([k3], [[base]], [[1]], [[0]]) == [INVALID]
    assert store.batch_put_session_end([k1, k2, k3]) == [0, 0, INVALID]
    assert store.get(k1) == data[:4000]
    assert store.get(k2) == data[5000:5100]
    assert store.get(k3) == b"already"
    # ended: no session any more
    assert store.batch_put_from_multi_buffer_ranges([k1], [[base]], [[1]], [[0]]) == [INVALID]
    assert store.batch_put_session_end([k1]) == [INVALID]
    # revoke: nothing stored, the key can be started again
    k4 = k("ps")
    assert store.batch_put_session_start([k4], [64]) == [0]
    assert store.batch_put_from_multi_buffer_ranges([k4], [[base]], [[64]], [[0]]) == [64]
    assert store.batch_put_session_revoke([k4, k("nosess")]) == [0, INVALID]
    assert store.is_exist(k4) == 0
    assert store.batch_put_session_end([k4]) == [INVALID]
    # refused settings and mismatched lists
    c = ReplicateConfig()
    c.nof_replica_num = 1
    assert store.batch_put_session_start([k4], [64], c) == [INVALID]
    assert store.batch_put_session_start([k4, k()], [64]) == [INVALID, INVALID]
    c = ReplicateConfig()
    c.group_ids = ["one"]
    assert store.batch_put_session_start([k4, k()], [64, 64], c) == [INVALID, INVALID]
    # a config is taken at start: replica_num=2 honoured at the end
    c = ReplicateConfig()
    c.replica_num = 2
    assert store.batch_put_session_start([k4], [64], c) == [0]
    c.replica_num = 1
    assert store.batch_put_from_multi_buffer_ranges([k4], [[base]], [[64]], [[0]]) == [64]
    assert store.batch_put_session_end([k4]) == [0]
    assert len(store.get_replica_desc(k4)) == 2 and store.get(k4) == data[:64]
    assert MooncakeDistributedStore().batch_put_session_start([k()], [1]) == []


def test_sessions_end_with_close(master):
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", master.addr) == 0
    key = k("close")
    assert st.batch_put_session_start([key], [16]) == [0]
    st.close()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", master.addr) == 0
    try:
        assert st.batch_put_session_end([key]) == [INVALID]
        assert st.is_exist(key) == 0
    finally:
        st.close()


def test_batch_replica_clear(store, storage, master):
    own, other = store.get_hostname(), storage.segment
    c = ReplicateConfig()
    c.replica_num = 2
    c.preferred_segments = [own, other]
    k1, k2, k3 = k("rc"), k("rc"), k("rc")
    for key in (k1, k2, k3):
        assert store.put(key, b"r" * 5000, c) == 0
    # one segment's replica: the other stays readable
    assert store.batch_replica_clear([k1], other) == [k1]
    assert _segments(store, k1) == [own] and store.get(k1) == b"r" * 5000
    assert store.batch_replica_clear([k1], other) == []         # none there any more
    # all replicas; missing and empty keys are skipped
    assert store.batch_replica_clear([k2, "", k("rc-missing")]) == [k2]
    assert store.is_exist(k2) == 0
    # a leased key (just read) is skipped until the lease ends (the fixture master: 1 s)
    assert store.get(k3) == b"r" * 5000
    assert store.batch_replica_clear([k3]) == []
    assert store.is_exist(k3) == 1
    time.sleep(1.1)
    assert store.batch_replica_clear([k3, k1], own) == [k3, k1]
    assert _segments(store, k3) == [other] and store.is_exist(k1) == 0
    # another client's object is never cleared
    st2 = MooncakeDistributedStore()
    assert st2.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", master.addr) == 0
    try:
        k4 = k("rc")
        assert st2.put(k4, b"theirs") == 0
        assert store.batch_replica_clear([k4]) == []
        assert st2.batch_replica_clear([k4]) == [k4]
        assert store.is_exist(k4) == 0
    finally:
        st2.close()
    assert store.batch_replica_clear([]) == []
    assert MooncakeDistributedStore().batch_replica_clear([k3]) == []
    with pytest.raises(TypeError):
        store.batch_replica_clear("key")


def _wait_task(store, tid, deadline_s=15):
    """Polls query_task until the task is finished (SUCCESS or FAILED) or the deadline."""
    from mooncake.store import TaskStatus
    end = time.monotonic() + deadline_s
    while True:
        r, err = store.query_task(tid)
        assert err == 0 and r.id == tid
        if r.status in (TaskStatus.SUCCESS, TaskStatus.FAILED) or time.monotonic() > end:
            return r
        time.sleep(0.05)


def test_replica_tasks(store, storage):
    """Upstream's create_copy_task / create_move_task / query_task: the owner of the source
    segment (this store) runs them; a copy adds a replica on the target, a move leaves one
    replica, on the target; the bytes stay the same."""
    from mooncake.store import TaskStatus, TaskType
    own, other = store.get_hostname(), storage.segment
    c = ReplicateConfig()
    c.replica_num = 1
    c.preferred_segment = own
    ck, mk = k("task-copy"), k("task-move")
    assert store.put(ck, b"c" * 70000, c) == 0 and store.put(mk, b"m" * 5000, c) == 0
    assert _segments(store, ck) == [own] and _segments(store, mk) == [own]
    tid, err = store.create_copy_task(ck, [other])
    assert err == 0 and tid != (0, 0)
    r = _wait_task(store, tid)
    assert (r.status, r.type, r.message) == (TaskStatus.SUCCESS, TaskType.REPLICA_COPY, "")
    assert r.created_at_ms_epoch > 0 and r.last_updated_at_ms_epoch >= r.created_at_ms_epoch
    assert sorted(_segments(store, ck)) == sorted([own, other])
    assert store.get(ck) == b"c" * 70000
    tid, err = store.create_move_task(mk, own, other)
    assert err == 0
    r = _wait_task(store, tid)
    assert (r.status, r.type) == (TaskStatus.SUCCESS, TaskType.REPLICA_MOVE)
    assert _segments(store, mk) == [other] and store.get(mk) == b"m" * 5000
    # refusals, with upstream's codes
    codes = mooncake.STATUS_CODES
    assert store.create_copy_task(k("task-missing"), [other]) == ((0, 0),
                                                                  codes["OBJECT_NOT_FOUND"])
    assert store.create_copy_task(ck, ["no-such-segment"]) == ((0, 0), codes["INVALID_PARAMS"])
    assert store.create_copy_task(ck, []) == ((0, 0), codes["INVALID_PARAMS"])
    assert store.create_move_task(mk, other, other) == ((0, 0), codes["INVALID_PARAMS"])
    assert store.create_move_task(mk, own, other) == ((0, 0), codes["INVALID_PARAMS"])  # gone
    assert store.query_task((1, 2)) == (None, -1400)            # TASK_NOT_FOUND
    with pytest.raises(TypeError):
        store.query_task("1-2")
    with pytest.raises(TypeError):
        store.create_copy_task(ck, other)


# ---- 7. names --------------------------------------------------------------------------
# The full list of upstream's methods, with the status of each here, is docs/compatibility.md,
# checked by test_compatibility.py.


def test_upstream_module_names():
    for name in ("MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction",
                 "ObjectDataType", "ReplicaStatus", "TaskType", "TaskStatus",
                 "ReplicaDescriptor", "MemoryDescriptor", "BufferHandle"):
        assert hasattr(ms, name), name


BIND_CHECK = r"""
import ctypes, json, os, platform, sys
import mooncake.store as ms
from mooncake import _numa
nodes = sorted(int(d[4:]) for d in os.listdir("/sys/devices/system/node")
               if d.startswith("node") and d[4:].isdigit())
before = sorted(os.sched_getaffinity(0))
ms.bind_to_numa_node(999)                      # no such node: a warning, nothing changes
unchanged = sorted(os.sched_getaffinity(0)) == before
node = nodes[-1]
os.sched_setaffinity(0, {min(_numa.node_cpus(node))})   # narrower than the node: bind widens it
ms.bind_to_numa_node(node)
cpus = sorted(os.sched_getaffinity(0))
mode = ctypes.c_int(-1)
mask = ctypes.c_ulong(0)
nr = {"x86_64": 239, "aarch64": 236}.get(platform.machine())   # get_mempolicy
libc = ctypes.CDLL(None, use_errno=True)
ok = nr is not None and libc.syscall(nr, ctypes.byref(mode), ctypes.byref(mask),
                                     ctypes.c_ulong(65), None, ctypes.c_ulong(0)) == 0
print(json.dumps({"node": node, "cpus": cpus, "want": sorted(_numa.node_cpus(node)),
                  "unchanged": unchanged, "mode": mode.value if ok else None,
                  "mask": mask.value if ok else None}))
"""


def test_bind_to_numa_node():
    """Upstream's module-level bind_to_numa_node: the thread runs on the node's CPUs and
    prefers its memory (MPOL_PREFERRED); a node that does not exist only warns. In a child
    process, so the test runner keeps its own CPUs."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", BIND_CHECK], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["unchanged"], "a missing node changed the CPUs"
    assert "Invalid NUMA node: 999" in r.stderr
    assert got["cpus"] == got["want"]
    if got["mode"] is not None:
        assert got["mode"] == 1 and got["mask"] == 1 << got["node"]   # MPOL_PREFERRED
    with pytest.raises(TypeError):
        ms.bind_to_numa_node("0")
