"""mooncake.store.MooncakeDistributedStore against a real mooncake_master and mooncake_client.

Fixtures (conftest.py) start the master on a free port (--port=0) and one storage server per
module; processes are stopped by PID.
"""
import contextlib
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

from conftest import GilProbe, free_port, sha256, sigstop, start_master, start_storage, wait_for

import mooncake
from mooncake.store import (BufferHandle, MooncakeDistributedStore, ReplicaStatus,
                            ReplicateConfig)

NOT_FOUND = mooncake.STATUS_CODES["OBJECT_NOT_FOUND"]
INVALID = mooncake.STATUS_CODES["INVALID_PARAMS"]
NOT_READY = mooncake.STATUS_CODES["UNAVAILABLE_IN_CURRENT_STATUS"]
LEASED = mooncake.STATUS_CODES["OBJECT_HAS_LEASE"]


def k(prefix="k"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def data(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def upsert_unleased(store, key, value, timeout=15.0):
    """upsert, waiting out a read lease (OBJECT_HAS_LEASE) left by an earlier get."""
    deadline = time.monotonic() + timeout
    while True:
        rc = store.upsert(key, value)
        if rc != LEASED or time.monotonic() > deadline:
            return rc
        time.sleep(0.05)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ---- bytes API ----------------------------------------------------------------------------

def test_health_and_hostname(store):
    assert store.health_check() == 0
    host = store.get_hostname()
    assert host.startswith("127.0.0.1:")
    assert 12300 <= int(host.rsplit(":", 1)[1]) <= 14300


def test_put_get_roundtrip(store):
    key = k()
    v = data(100_000, 1)
    assert store.put(key, v) == 0
    assert store.get(key) == v
    assert store.get_size(key) == len(v)
    assert store.is_exist(key) == 1
    # put is create-once: success, old value kept
    assert store.put(key, b"other") == 0
    assert store.get(key) == v
    # upsert overwrites (also with a different size) once no read lease protects the object
    assert upsert_unleased(store, key, b"new value") == 0
    assert store.get(key) == b"new value"
    assert store.get_size(key) == 9


def test_read_stats_count_lease_hits(store):
    key = k("stats")
    v = data(8192, 5)
    assert store.put(key, v) == 0
    s0 = store.read_stats()
    assert set(s0) == {"master_lookups", "lease_hits", "lease_misses", "speculative_hits",
                       "feed_placements", "offload_reads_served"}
    assert s0["offload_reads_served"] == 0  # not a storage server of the SSD tier
    assert store.get(key) == v          # asks the master, takes a read lease
    s1 = store.read_stats()
    assert s1["master_lookups"] == s0["master_lookups"] + 1
    assert store.get(key) == v          # read under the lease, without the master
    s2 = store.read_stats()
    assert s2["master_lookups"] == s1["master_lookups"]
    assert s2["lease_hits"] == s1["lease_hits"] + 1


def test_placement_feed_first_get_skips_the_master(store, master, monkeypatch):
    """A reader set up with MC_STORE_PLACEMENT_FEED=<prefix> (a decode instance) is pushed what
    others put under the prefix, with a read lease: its first get of such a key does not ask
    the master. Keys outside the prefix are looked up as usual."""
    prefix = k("feed") + "/"
    monkeypatch.setenv("MC_STORE_PLACEMENT_FEED", prefix)
    reader = MooncakeDistributedStore()
    assert reader.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr) == 0
    monkeypatch.delenv("MC_STORE_PLACEMENT_FEED")
    try:
        v, w = data(16384, 11), data(16384, 12)
        outside, inside = k("nofeed"), prefix + "block-0"
        assert store.put(outside, w) == 0      # committed first: seen once inside arrives
        assert store.put(inside, v) == 0
        wait_for(lambda: reader.read_stats()["feed_placements"] >= 1, what="the placement")
        s0 = reader.read_stats()
        assert s0["feed_placements"] == 1
        assert reader.get(inside) == v
        s1 = reader.read_stats()
        assert s1["master_lookups"] == s0["master_lookups"]
        assert s1["lease_hits"] == s0["lease_hits"] + 1
        assert reader.get(outside) == w
        assert reader.read_stats()["master_lookups"] == s1["master_lookups"] + 1
    finally:
        reader.close()


def test_missing_key(store):
    key = k("missing")
    assert store.get(key) == b""
    assert store.get_buffer(key) is None
    assert store.is_exist(key) == 0
    assert store.get_size(key) < 0
    assert store.remove(key) < 0


def test_bytes_like_values(store):
    arr = np.arange(1000, dtype=np.float32)
    for v in (bytearray(b"ba" * 100), memoryview(b"mv" * 100), arr, arr.reshape(10, 100)):
        key = k()
        assert store.put(key, v) == 0
        assert store.get(key) == memoryview(v).cast("B").tobytes()
    key = k()
    rc = store.put(key, b"")                  # empty values: refused or stored empty
    assert rc == INVALID or (rc == 0 and store.get(key) == b"")
    with pytest.raises(TypeError):
        store.put(k(), "a str is not bytes")
    with pytest.raises(TypeError):
        store.put(k(), 12345)
    with pytest.raises((BufferError, ValueError, TypeError)):
        store.put(k(), np.arange(100, dtype=np.int64)[::2])   # not contiguous


def test_put_parts(store):
    key = k()
    assert store.put_parts(key, b"Hello, ", bytearray(b"World"), memoryview(b"!")) == 0
    assert store.get(key) == b"Hello, World!"
    cfg = ReplicateConfig()
    wait_for(lambda: store.upsert_parts(key, b"a", b"b", config=cfg) != LEASED, timeout=15,
             what="read lease to expire")
    assert store.get(key) == b"ab"
    with pytest.raises(TypeError):
        store.put_parts(key, b"a", "b")
    with pytest.raises(TypeError):
        store.put_parts(key, b"a", bogus=1)
    with pytest.raises(TypeError):
        store.put_parts()


def test_put_get_batch(store):
    keys = [k() for _ in range(20)]
    vals = [data(1000 + i, i) for i in range(20)]
    assert store.put_batch(keys, vals) == 0
    assert store.get_batch(keys) == vals
    assert store.get_batch(keys[:3] + [k("missing")]) == vals[:3] + [b""]
    wait_for(lambda: store.upsert_batch(keys[:2], [b"x", b"y"]) != LEASED, timeout=15,
             what="read lease to expire")
    assert store.get_batch(keys[:2]) == [b"x", b"y"]
    assert store.put_batch(keys[:2], [b"only one"]) == INVALID
    assert store.get_batch([]) == []
    assert store.batch_is_exist(keys[:3] + [k("missing")]) == [1, 1, 1, 0]


def test_get_buffer_zero_copy(store):
    key = k()
    v = np.arange(1 << 18, dtype=np.float32)
    assert store.put(key, v) == 0
    h = store.get_buffer(key)
    assert isinstance(h, BufferHandle)
    assert len(h) == h.size() == v.nbytes
    a = np.frombuffer(h, dtype=np.float32)
    assert a.ctypes.data == h.ptr()          # a view, not a copy
    assert np.array_equal(a, v)
    mv = memoryview(h)
    del h                                    # views keep the memory alive
    gc.collect()
    assert np.array_equal(a, v) and mv.nbytes == v.nbytes
    hs = store.batch_get_buffer([key, k("missing")])
    assert hs[1] is None and np.array_equal(np.frombuffer(hs[0], dtype=np.float32), v)


# ---- zero copy ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reg(store):
    """A registered 4 MiB numpy buffer."""
    buf = np.zeros(4 << 20, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    yield buf
    assert store.unregister_buffer(buf.ctypes.data) == 0


def test_put_from_get_into(store, reg):
    n = 1 << 20
    src, dst = reg[:n], reg[n:2 * n]
    src[:] = np.frombuffer(data(n, 5), dtype=np.uint8)
    key = k()
    assert store.put_from(key, src.ctypes.data, n) == 0
    dst[:] = 0
    assert store.get_into(key, dst.ctypes.data, n) == n
    assert np.array_equal(src, dst)
    # buffer too small: negative, no overflow
    assert store.get_into(key, dst.ctypes.data, n - 1) < 0
    # upsert_from replaces
    wait_for(lambda: store.upsert_from(key, src.ctypes.data, 1000, ReplicateConfig()) != LEASED,
             timeout=15, what="read lease to expire")
    assert store.get_into(key, dst.ctypes.data, n) == 1000
    assert np.array_equal(dst[:1000], src[:1000])
    # missing key
    assert store.get_into(k("missing"), dst.ctypes.data, n) == NOT_FOUND


def test_zero_copy_needs_registration(store, reg):
    loose = np.zeros(4096, dtype=np.uint8)
    assert store.put_from(k(), loose.ctypes.data, 4096) == INVALID
    assert store.get_into(k(), loose.ctypes.data, 4096) == INVALID
    assert store.put_from(k(), 0x1000, 16) == INVALID
    # range running past the registered buffer
    assert store.put_from(k(), reg.ctypes.data + reg.nbytes - 8, 16) == INVALID
    assert store.register_buffer(0x1000, 4096) < 0          # not mapped
    assert store.register_buffer(reg.ctypes.data, 0) < 0
    assert store.unregister_buffer(0x1000) < 0
    with pytest.raises(ValueError):
        store.put_from(k(), reg.ctypes.data, -1)
    with pytest.raises(TypeError):
        store.get_into(k(), "addr", 16)


def test_batch_zero_copy(store, reg):
    n, count = 64 * 1024, 8
    keys = [k() for _ in range(count)]
    reg[:n * count] = np.frombuffer(data(n * count, 6), dtype=np.uint8)
    ptrs = [reg.ctypes.data + i * n for i in range(count)]
    assert store.batch_put_from(keys, ptrs, [n] * count) == [0] * count
    out = [reg.ctypes.data + (count + i) * n for i in range(count)]
    reg[n * count:2 * n * count] = 0
    assert store.batch_get_into(keys, out, [n] * count) == [n] * count
    assert np.array_equal(reg[:n * count], reg[n * count:2 * n * count])
    # per-key problems are per-key results
    res = store.batch_get_into(keys[:2] + [k("missing")], out[:2] + [out[2]],
                               [n, n, n])
    assert res[:2] == [n, n] and res[2] == NOT_FOUND
    res = store.batch_put_from([k(), k()], [ptrs[0], 0x1000], [n, n])
    assert res[0] == 0 and res[1] == INVALID
    # mismatched list lengths: every key fails
    assert store.batch_get_into(keys[:2], out[:1], [n]) == [INVALID, INVALID]
    fresh = [k(), k()]
    assert store.batch_put_from(fresh, ptrs[:2], [n, n]) == [0, 0]
    assert store.batch_upsert_from(fresh, ptrs[:2], [10, 10]) == [0, 0]
    assert store.get_size(fresh[0]) == 10


def test_multi_buffers(store, reg):
    """vLLM style: one key -> several layer buffers."""
    layers, n, nkeys = 4, 16 * 1024, 3
    reg[:layers * n * nkeys] = np.frombuffer(data(layers * n * nkeys, 7), dtype=np.uint8)
    keys = [k() for _ in range(nkeys)]
    base = reg.ctypes.data
    src = [[base + (j * layers + i) * n for i in range(layers)] for j in range(nkeys)]
    sizes = [[n] * layers for _ in range(nkeys)]
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True    # refused by puts, as upstream's
    assert store.batch_put_from_multi_buffers(keys, src, sizes, cfg) == [INVALID] * nkeys
    assert store.batch_is_exist(keys) == [0] * nkeys
    assert store.batch_put_from_multi_buffers(keys, src, sizes, ReplicateConfig()) == [0] * nkeys
    assert store.get_size(keys[0]) == layers * n
    off = layers * n * nkeys
    dst = [[base + off + (j * layers + i) * n for i in range(layers)] for j in range(nkeys)]
    reg[off:2 * off] = 0
    assert store.batch_get_into_multi_buffers(keys, dst, sizes) == [layers * n] * nkeys
    assert np.array_equal(reg[:off], reg[off:2 * off])
    assert store.batch_get_into_multi_buffers(keys, dst, sizes, True) == [layers * n] * nkeys
    # inner length mismatch for one key only
    res = store.batch_put_from_multi_buffers([k(), k()], [src[0], src[1]],
                                             [sizes[0], sizes[1][:2]])
    assert res[0] == 0 and res[1] == INVALID
    with pytest.raises(TypeError):
        store.batch_put_from_multi_buffers(keys, [1, 2, 3], sizes)


# ---- management ---------------------------------------------------------------------------

def test_remove_family(store):
    prefix = f"rm-{uuid.uuid4().hex[:8]}"
    keys = [f"{prefix}-{i}" for i in range(6)]
    assert store.put_batch(keys, [b"v"] * 6) == 0
    assert store.remove(keys[0], force=True) == 0
    assert store.is_exist(keys[0]) == 0
    assert store.batch_remove(keys[1:3], force=True) == [0, 0]
    assert store.batch_remove([k("missing")], True)[0] < 0
    assert store.remove_by_regex(f"^{prefix}-[34]$", force=True) == 2
    assert store.batch_is_exist(keys) == [0, 0, 0, 0, 0, 1]
    # without force a freshly read key may be leased; it becomes removable after the lease
    store.get(keys[5])
    wait_for(lambda: store.remove(keys[5]) == 0, timeout=15, what="lease expiry then remove")
    assert store.is_exist(keys[5]) == 0


def test_replica_desc(store, storage):
    key = k()
    assert store.put(key, b"x" * 1000) == 0
    descs = store.get_replica_desc(key)
    assert len(descs) == 1
    d = descs[0]
    assert d.is_memory_replica() and not d.is_disk_replica()
    assert d.status == ReplicaStatus.COMPLETE
    bd = d.get_memory_descriptor().buffer_descriptor
    assert bd.size == 1000 and bd.buffer_address != 0 and bd.transport_endpoint
    m = store.batch_get_replica_desc([key, k("missing")])
    assert len(m[key]) == 1 and list(m.values())[1] == []
    assert store.get_replica_desc(k("missing")) == []


def test_replicate_config_fields():
    c = ReplicateConfig()
    assert c.replica_num == 1 and not c.with_soft_pin and not c.with_hard_pin
    assert c.preferred_segment == "" and c.preferred_segments == []
    c.replica_num = 3
    c.with_soft_pin = True
    c.soft_pin_ttl_ms = 60000
    c.with_hard_pin = True
    c.preferred_segment = "127.0.0.1:12345"
    c.preferred_segments = ["a:1", "b:2"]
    c.prefer_alloc_in_same_node = "True"
    assert (c.replica_num, c.with_soft_pin, c.soft_pin_ttl_ms, c.with_hard_pin) == \
        (3, True, 60000, True)
    assert c.preferred_segments == ["a:1", "b:2"] and c.prefer_alloc_in_same_node is True
    assert "replica_num=3" in str(c)
    assert ReplicateConfig(replica_num=2, with_soft_pin=True).replica_num == 2
    with pytest.raises(ValueError):
        c.replica_num = -1
    with pytest.raises(TypeError):
        c.replica_num = "2"
    with pytest.raises(TypeError):
        c.with_soft_pin = None
    with pytest.raises(TypeError):
        c.preferred_segment = 5
    with pytest.raises(TypeError):
        c.preferred_segments = "a:1"
    with pytest.raises(TypeError):
        ReplicateConfig(bogus=1)


def test_config_argument_checked(store):
    with pytest.raises(TypeError):
        store.put(k(), b"v", {"replica_num": 2})
    cfg = ReplicateConfig()
    cfg.with_soft_pin = True
    cfg.preferred_segment = store.get_hostname()
    key = k()
    assert store.put(key, b"pinned", cfg) == 0
    assert store.get(key) == b"pinned"


def test_bad_arguments(store):
    with pytest.raises(TypeError):
        store.get(5)
    with pytest.raises(ValueError):
        store.get("bad\0key")
    with pytest.raises(TypeError):
        store.get_batch("notalist")
    with pytest.raises(TypeError):
        store.is_exist(None)
    with pytest.raises(TypeError):
        store.batch_is_exist([1, 2])
    assert store.put("x" * 5000, b"v") < 0          # key over the limit: code, not a crash
    assert store.get("x" * 5000) == b""
    assert store.put("", b"v") < 0
    assert store.health_check() == 0


def test_not_set_up_and_closed(master, storage):
    st = MooncakeDistributedStore()
    assert st.health_check() == 1
    assert st.get_hostname() == ""
    assert st.put("a", b"b") == NOT_READY
    assert st.get("a") == b""
    assert st.is_exist("a") == NOT_READY
    assert st.batch_is_exist(["a", "b"]) == [NOT_READY, NOT_READY]
    assert st.close() == 0
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp", "", master.addr) == 0
    assert st.health_check() == 0
    assert st.put(k(), b"v") == 0
    assert st.close() == 0
    assert st.close() == 0
    assert st.health_check() == 1
    assert st.put("a", b"b") == NOT_READY


# ---- setup forms and environment ----------------------------------------------------------

def test_setup_dict_and_size_strings(master, storage):
    st = MooncakeDistributedStore()
    rc = st.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                   "global_segment_size": "16MB", "local_buffer_size": "8 MiB",
                   "protocol": "tcp", "device_name": "",
                   "master_server_address": master.addr})
    assert rc == 0
    key = k()
    assert st.put(key, b"dict") == 0 and st.get(key) == b"dict"
    st.close()
    # a size upstream cannot parse is a code, as upstream's setup returns
    assert MooncakeDistributedStore().setup({"global_segment_size": "lots",
                                             "master_server_address": master.addr}) == INVALID


def test_setup_from_environment(master, storage, monkeypatch):
    monkeypatch.setenv("MOONCAKE_MASTER", master.addr)
    monkeypatch.setenv("MC_METADATA_SERVER", "P2PHANDSHAKE")
    monkeypatch.setenv("LOCAL_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("PROTOCOL", "tcp")
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    st = MooncakeDistributedStore()
    assert st.setup(global_segment_size=0, local_buffer_size="8MB") == 0
    assert st.get_hostname().startswith("127.0.0.1:")
    st.close()
    monkeypatch.delenv("MOONCAKE_MASTER")
    monkeypatch.setenv("MASTER_SERVER", master.addr)
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "", 0, 8 << 20, "", "", "") == 0
    st.close()


def test_setup_config_path(master, storage, monkeypatch, tmp_path):
    p = tmp_path / "mooncake.json"
    p.write_text('{"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", '
                 '"global_segment_size": "0", "local_buffer_size": "8MB", '
                 f'"master_server_address": "{master.addr}"}}')
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(p))
    st = MooncakeDistributedStore()
    assert st.setup() == 0
    st.close()


def test_setup_failure_is_a_code():
    st = MooncakeDistributedStore()
    rc = st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp", "", "127.0.0.1:1")
    assert rc < 0
    assert st.health_check() == 1
    with pytest.raises(TypeError):
        st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp", "", 5)
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", -1, 8 << 20, "tcp", "", "127.0.0.1:1") \
        == INVALID


# ---- processes, threads, failures ---------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys
    from mooncake.store import MooncakeDistributedStore
    master, mode, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 8 << 20, "tcp", "", master) == 0
    if mode == "put":
        for i in range(20):
            assert st.put(f"{prefix}-{i}", (f"child {i} " * 100).encode()) == 0
        print("put done", flush=True)
        sys.stdin.readline()          # keep our segment mounted until the parent read it
    else:
        for i in range(20):
            assert st.get(f"{prefix}-{i}") == (f"parent {i} " * 100).encode(), i
        print("get done", flush=True)
    st.close()
""")


def test_two_processes_share_objects(store, master):
    prefix = k("xproc")
    child = subprocess.Popen([sys.executable, "-c", CHILD, master.addr, "put", prefix],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "put done"
        for i in range(20):
            assert store.get(f"{prefix}-{i}") == (f"child {i} " * 100).encode()
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            os.kill(child.pid, 9)
            child.wait()
    p2 = k("xproc")
    for i in range(20):
        assert store.put(f"{p2}-{i}", (f"parent {i} " * 100).encode()) == 0
    r = subprocess.run([sys.executable, "-c", CHILD, master.addr, "get", p2],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "get done"


def test_replication_survives_a_dead_server():
    """2 replicas on two storage servers; kill one (SIGKILL); the object stays readable."""
    m = start_master(client_ttl=2)
    s1 = s2 = None
    st = MooncakeDistributedStore()
    try:
        s1 = start_storage(m.addr, "32MB")
        s2 = start_storage(m.addr, "32MB")
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", m.addr) == 0
        cfg = ReplicateConfig(replica_num=2)
        keys = [k("rep") for _ in range(10)]
        vals = [data(64 * 1024, i) for i in range(10)]
        for key, v in zip(keys, vals):
            assert st.put(key, v, cfg) == 0
        descs = st.get_replica_desc(keys[0])
        assert len(descs) == 2
        segs = {d.get_memory_descriptor().buffer_descriptor.segment_name for d in descs}
        assert segs == {s1.segment, s2.segment}
        s1.kill()
        for key, v in zip(keys, vals):
            got = wait_for(lambda: st.get(key) or None, timeout=20,
                           what="read from the surviving replica")
            assert got == v
        # once the master dropped the dead server, only one replica is listed
        wait_for(lambda: len(st.get_replica_desc(keys[0])) == 1, timeout=20,
                 what="master to drop the dead server's replicas")
    finally:
        st.close()
        for s in (s1, s2):
            if s:
                s.stop()
        m.stop()


def test_many_threads(store):
    nthreads, rounds = 16, 30
    errors = []

    def work(t):
        try:
            for r in range(rounds):
                key = f"thr-{t}-{r}-{uuid.uuid4().hex[:6]}"
                v = data(2048 + t, t * 1000 + r)
                if store.put(key, v) != 0:
                    errors.append((t, r, "put"))
                if store.get(key) != v:
                    errors.append((t, r, "get"))
                if store.is_exist(key) != 1:
                    errors.append((t, r, "exist"))
        except Exception as e:  # pragma: no cover
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors


def test_gil_released_during_setup():
    """Another Python thread runs while setup() waits for the master (a silent probe)."""
    probe = GilProbe()
    st = MooncakeDistributedStore()
    try:
        rc = probe.call(st.setup, "127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp", "",
                        probe.addr)
    finally:
        probe.close()
    assert rc < 0
    assert probe.released(5.0), (probe.duration, probe.seen_at and probe.seen_at - probe.t0)


def test_store_knobs_validated_at_setup(master, monkeypatch):
    # The store knobs and the engine tuning come from the environment through mooncake._config
    # (the C library reads none): a bad value is a ValueError naming the variable, before
    # anything is set up.
    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    monkeypatch.setenv("MC_STORE_LEASE_CACHE", "x")
    with pytest.raises(ValueError, match="MC_STORE_LEASE_CACHE must be 0 or 1"):
        store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr)
    monkeypatch.delenv("MC_STORE_LEASE_CACHE")
    monkeypatch.setenv("MC_FORCE_TCP", "2")  # the client's engine tuning, as TransferEngine's
    with pytest.raises(ValueError, match="MC_FORCE_TCP must be 0 or 1"):
        store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr)
    monkeypatch.delenv("MC_FORCE_TCP")
    with pytest.raises(ValueError, match="replica_hints"):
        store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr,
                    replica_hints=(1 << 22) + 1)
    monkeypatch.setenv("MC_STORE_NOT_READY_WAIT_MS", "soon")
    with pytest.raises(ValueError, match="MC_STORE_NOT_READY_WAIT_MS must be an integer"):
        store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr)
    monkeypatch.delenv("MC_STORE_NOT_READY_WAIT_MS")
    with pytest.raises(ValueError, match="not_ready_wait_ms"):
        store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr,
                    not_ready_wait_ms=3600001)
    assert not store.is_setup()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr,
                       not_ready_wait_ms=0) == 0
    store.close()


def test_no_rss_growth_over_100k_round_trips(master, storage, monkeypatch):
    # The client's replica-hint table is a bounded cache (120 bytes per entry plus the key,
    # 262144 entries by default) that fills as distinct keys pass; 100k distinct keys would
    # grow it by tens of MB without any leak. A small table keeps this test about leaks.
    from mooncake.store import MooncakeDistributedStore
    monkeypatch.setenv("MC_STORE_REPLICA_HINTS", "1024")
    store = MooncakeDistributedStore()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "",
                       master.addr) == 0
    prefix = f"rss-{uuid.uuid4().hex[:8]}"
    v = data(4096, 9)

    def rounds(start, n):
        for i in range(start, start + n):
            key = f"{prefix}-{i}"
            if store.put(key, v) != 0 or store.get(key) != v or \
                    store.remove(key, force=True) != 0:
                return False
        return True

    assert rounds(0, 5000)          # warm up allocator caches
    gc.collect()
    before = rss_bytes()
    assert rounds(5000, 50_000)
    gc.collect()
    mid = rss_bytes()
    assert rounds(55_000, 50_000)
    gc.collect()
    after = rss_bytes()
    store.close()
    # a leak of even 100 bytes per round trip would show as ~5 MB per 50k
    assert after - mid < 4 << 20, (before, mid, after)
    assert after - before < 8 << 20, (before, mid, after)


@contextlib.contextmanager
def lease_cluster(n_clients, size, client_ttl=3, port=0):
    """A master of its own (10 s read leases, no WAL), one storage server of `size` and
    n_clients clients that contribute no memory. Yields (master, server, clients, procs);
    processes the test appends to procs are stopped with the others."""
    m = start_master(lease_ttl_ms=10000, client_ttl=client_ttl, port=port)
    procs, clients = [m], []
    try:
        procs.append(start_storage(m.addr, size=size))
        for _ in range(n_clients):
            st = MooncakeDistributedStore()
            clients.append(st)
            assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", m.addr) == 0
        yield m, procs[1], clients, procs
    finally:
        for st in clients:
            st.close()
        for p in reversed(procs):
            p.stop()


def test_upsert_releases_leased_space():
    """An upsert of a value another client holds a read lease on retires the old replica; once
    the writer has stamped it, the master frees that space at once (ReleaseRetired), not when
    the lease ends. In an 8 MiB pool: K (3 MiB) read by B (10 s lease), upserted by A (3 MiB),
    then L (3 MiB) put by A. With the old K released that is 6 MiB and both stay; with the old
    K held it would be 9 MiB and the new K would be evicted to place L."""
    with lease_cluster(2, "8MB") as (_, _, (a, b), _):
        old, new, other = b"o" * (3 << 20), b"n" * (3 << 20), b"l" * (3 << 20)
        assert a.put("K", old) == 0
        assert b.get("K") == old  # B now holds a read lease on the old K
        assert a.upsert("K", new) == 0
        assert a.put("L", other) == 0
        assert a.is_exist("K") == 1 and a.is_exist("L") == 1
        assert a.get("K") == new and a.get("L") == other


def test_forced_remove_stamps_and_releases_leased_space():
    """A forced remove of a value another client holds a read lease on: the remover stamps the
    old replica before remove returns (the reader, which would read it under its cached lease
    without asking the master, finds it gone at once) and then hands its space back. In an
    8 MiB pool: K and L (3 MiB each) read by B (10 s leases, so neither is evictable), K
    removed by A with force, then M (3 MiB) put by A: fits only if K's space came back."""
    with lease_cluster(2, "8MB") as (_, _, (a, b), _):
        k, l, mv = b"k" * (3 << 20), b"l" * (3 << 20), b"m" * (3 << 20)
        assert a.put("K", k) == 0 and a.put("L", l) == 0
        assert b.get("K") == k and b.get("L") == l  # B holds leases on both
        assert b.get("K") == k  # served from B's cached lease
        assert a.remove("K", force=True) == 0
        assert b.get("K") == b""  # the stamp sent B to the master
        assert a.put("M", mv) == 0
        assert a.get("M") == mv and b.get("L") == l


def test_dropped_storage_server_stops_serving():
    """A storage server frozen past client_ttl is dropped by the master, and the key it held is
    put again on another server. A reader that holds a read lease on the old replica (and would
    read it without asking the master) must get the new value once the frozen server resumes:
    that server stopped serving its segment shortly before the master could drop it (the
    reader's cached read is refused, and it asks the master), and it stays unmounted and
    unserved for a lease period after it learns of the drop; then it mounts and serves again."""
    with lease_cluster(3, "16MB", client_ttl=1) as (m, s1, (a, b, c), procs):
        old, new = data(64 << 10, 1), data(64 << 10, 2)
        assert a.put("D", old) == 0  # s1 is the only segment
        assert b.get("D") == old     # b and c hold 10 s read leases on the replica in s1
        assert c.get("D") == old
        s2 = start_storage(m.addr, size="16MB")
        procs.append(s2)
        sigstop(s1.proc.pid)
        try:
            wait_for(lambda: a.is_exist("D") == 0, timeout=10,
                     what="the master to drop the frozen storage server")
            on_s2 = ReplicateConfig()
            on_s2.preferred_segment = s2.segment
            assert a.put("D", new, on_s2) == 0
        finally:
            os.kill(s1.proc.pid, signal.SIGCONT)
        before = b.read_stats()
        assert b.get("D") == new
        after = b.read_stats()
        # the cached read was tried (b's lease still ran) and refused by the fence
        assert after["lease_misses"] == before["lease_misses"] + 1, (before, after)
        # once s1 has heard from the master that it was dropped, it still serves nothing: not
        # even after four more heartbeats (250 ms each with client_ttl 1 s), in which it would
        # have mounted again without the wait (the assertions hold whatever the timing; the
        # pause only lets a missing wait show)
        s1.wait_stderr("the master dropped this client", timeout=10)
        time.sleep(1.0)
        before = c.read_stats()
        assert c.get("D") == new
        after = c.read_stats()
        assert after["lease_misses"] == before["lease_misses"] + 1, (before, after)

        # s1 mounts again once no lease on its old contents can be left, and serves again
        on_s1 = ReplicateConfig()
        on_s1.preferred_segment = s1.segment
        v = data(4096, 3)

        def lands_on_s1():
            key = k("back")
            if a.put(key, v, on_s1) != 0:
                return False
            d = a.get_replica_desc(key)[0].get_memory_descriptor().buffer_descriptor
            return key if d.transport_endpoint == s1.segment else False
        key = wait_for(lands_on_s1, timeout=20, interval=0.2, what="s1 to mount again")
        assert b.get(key) == v


@contextlib.contextmanager
def held_cluster(hold_sec):
    """A master (client_ttl 1 s, 1 s read leases, --segment_hold_sec=hold_sec), one storage
    server and a writer and a reader that contribute no memory. Yields (master, server,
    writer, reader, procs)."""
    m = start_master(lease_ttl_ms=1000, client_ttl=1, extra=[f"--segment_hold_sec={hold_sec}"])
    procs, clients = [m], []
    try:
        procs.append(start_storage(m.addr, size="16MB"))
        for _ in range(2):
            st = MooncakeDistributedStore()
            clients.append(st)
            assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", m.addr) == 0
        yield m, procs[1], clients[0], clients[1], procs
    finally:
        for st in clients:
            st.close()
        for p in reversed(procs):
            p.stop()


def put_many(store, n, size, seed):
    vals = {k("held"): data(size, seed + i) for i in range(n)}
    for key, v in vals.items():
        assert store.put(key, v) == 0
    return vals


def test_stalled_storage_server_keeps_its_objects():
    """A storage server stopped (SIGSTOP) for longer than client_ttl but shorter than the
    master's --segment_hold_sec is not a dead one: the master holds its segment's objects
    aside, unreadable (gets fail cleanly, exists says no), and gives them back when the same
    process resumes and re-mounts the same segment: every object with its exact bytes."""
    with held_cluster(60) as (m, s1, w, r, procs):
        vals = put_many(w, 40, 32 << 10, 100)
        sums = {key: sha256(v) for key, v in vals.items()}
        first = next(iter(vals))
        assert sha256(r.get(first)) == sums[first]
        sigstop(s1.proc.pid)
        try:
            wait_for(lambda: r.is_exist(first) == 0, timeout=10,
                     what="the master to hold the stopped server's segment")
            # held: the server was silent for client_ttl; absent, no bytes, never wrong ones
            for key in vals:
                assert r.is_exist(key) == 0
                assert r.get(key) == b""
        finally:
            os.kill(s1.proc.pid, signal.SIGCONT)

        def all_back():
            return all(sha256(r.get(key)) == s for key, s in sums.items())
        wait_for(all_back, timeout=20, interval=0.2, what="the held objects to come back")
        assert r.is_exist(first) == 1


def test_storage_server_stalled_past_the_hold_loses_its_objects():
    """A stop longer than --segment_hold_sec drops the segment and its objects as without a
    hold: after SIGCONT the server mounts its segment again, empty."""
    with held_cluster(2) as (m, s1, w, r, procs):
        vals = put_many(w, 5, 4096, 200)
        sigstop(s1.proc.pid)
        try:
            m.wait_stderr("not re-mounted in time", timeout=15)
        finally:
            os.kill(s1.proc.pid, signal.SIGCONT)
        on_s1 = ReplicateConfig()
        on_s1.preferred_segment = s1.segment
        v = data(4096, 3)

        def lands_on_s1():
            key = k("back")
            if w.put(key, v, on_s1) != 0:
                return False
            d = w.get_replica_desc(key)[0].get_memory_descriptor().buffer_descriptor
            return key if d.transport_endpoint == s1.segment else False
        key = wait_for(lands_on_s1, timeout=20, interval=0.2, what="s1 to mount again")
        assert r.get(key) == v
        for key in vals:
            assert r.is_exist(key) == 0
            assert r.get(key) == b""


def test_master_restart_without_wal_orphans_old_contents():
    """A master restarted without a write-ahead log knows neither the objects nor the leases it
    granted. A storage server it did not recover keeps its segment unserved and unmounted for
    a lease period, so a reader holding a cached lease on an old replica there gets the key's
    value put after the restart (on a server started since), not the old one."""
    port = free_port()
    with lease_cluster(2, "16MB", client_ttl=1, port=port) as (m, s1, (a, b), procs):
        old, new = data(64 << 10, 4), data(64 << 10, 5)
        assert a.put("R", old) == 0  # s1 is the only segment
        assert b.get("R") == old     # b holds a 10 s read lease on the replica in s1
        m.kill()
        m2 = start_master(lease_ttl_ms=10000, client_ttl=1, port=port)
        procs.append(m2)
        # s1 has heard from the new master (it logs either way; this build: "did not recover")
        line = s1.wait_stderr(("did not recover segment", "asked to re-mount"), timeout=10)
        # its last answered ping was before the restart: after client_ttl more its serving
        # limit (7/8 of it after that ping) has passed, whatever the timing, unless it
        # mounted again at once and so extended it
        time.sleep(1.0)
        s2 = start_storage(m2.addr, size="16MB")
        procs.append(s2)
        on_s2 = ReplicateConfig()
        on_s2.preferred_segment = s2.segment
        assert a.put("R", new, on_s2) == 0
        before = b.read_stats()
        assert b.get("R") == new
        after = b.read_stats()
        # the cached read was tried (b's lease still ran) and refused
        assert after["lease_misses"] == before["lease_misses"] + 1, (before, after)
        assert "did not recover segment" in line
