"""The local-disk (SSD) tier from Python: setup(enable_ssd_offload=True, ssd_offload_path=...)
makes the client a storage server with a disk; a value evicted from memory reads back exact
from the disk through another client; the disk path from MOONCAKE_OFFLOAD_FILE_STORAGE_PATH;
no path at all is INVALID_PARAMS."""
import json
import os
import time
import urllib.request

import pytest

from conftest import Proc, bin_path, start_master, wait_for
from mooncake.store import DiskDescriptor, MooncakeDistributedStore

VAL = 512 << 10


@pytest.fixture(scope="module")
def omaster():
    m = start_master(lease_ttl_ms=200, extra=("--enable_offload=true", "--metrics_port=0"))
    m.http = f"http://127.0.0.1:{m.field('metrics_port')}"
    yield m
    m.stop()


@pytest.fixture(autouse=True)
def fast_heartbeat(monkeypatch):
    monkeypatch.setenv("MC_OFFLOAD_HEARTBEAT_MS", "50")
    monkeypatch.setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "8MB")
    monkeypatch.setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "64MB")
    monkeypatch.setenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", "1MB")


def value(i):
    return bytes((i * 131 + j * 7 + (j >> 9)) & 0xff for j in range(256)) * (VAL // 256)


def wait_on_disk(master, store, key, n):
    """Waits until the master counts n objects on the disk tier of the storage server that
    holds key in memory (its /get_segments_detail; the server confirms each offload after
    writing it), so that evictions after this keep them."""
    endpoint = store.get_replica_desc(key)[0].get_memory_descriptor() \
        .buffer_descriptor.transport_endpoint

    def on_disk():
        with urllib.request.urlopen(f"{master.http}/get_segments_detail", timeout=5) as r:
            segs = json.loads(r.read())["segments"]
        return sum(sg.get("disk", {}).get("objects", 0) for sg in segs
                   if sg["endpoint"] == endpoint) >= n
    wait_for(on_disk, timeout=10, what=f"{n} objects on the disk tier of {endpoint}")


def do_setup(st, master, seg, **kw):
    return st.setup("127.0.0.1", "P2PHANDSHAKE", seg, 16 << 20, "tcp", "", master.addr, **kw)


def test_offload_and_disk_reads(omaster, tmp_path):
    srv, rd = MooncakeDistributedStore(), MooncakeDistributedStore()
    assert do_setup(srv, omaster, 4 << 20, enable_ssd_offload=True,
                 ssd_offload_path=str(tmp_path / "disk")) == 0
    assert do_setup(rd, omaster, 0) == 0
    try:
        for i in range(6):
            assert rd.put(f"py{i}", value(i)) == 0
        # wait until every value is on disk (eager offload), then push the first ones out of
        # the 4 MiB segment
        wait_on_disk(omaster, rd, "py0", 6)
        for i in range(6, 10):
            assert rd.put(f"py{i}", value(i)) == 0
        assert srv.get_offload_rpc_read_count() == 0
        # a key pushed out of memory is listed with its disk replica only
        deadline = time.monotonic() + 10
        while True:
            only_disk = [k for k in (f"py{i}" for i in range(6))
                         if (r := rd.get_replica_desc(k))
                         and all(d.is_local_disk_replica() for d in r)]
            if only_disk:
                break
            assert time.monotonic() < deadline
            time.sleep(0.02)
        (desc,) = rd.get_replica_desc(only_disk[0])
        assert not desc.is_memory_replica() and not desc.is_disk_replica()
        disk = desc.get_disk_descriptor()
        assert isinstance(disk, DiskDescriptor)
        assert disk.object_size == VAL and disk.file_path == ""
        assert disk.transport_endpoint
        with pytest.raises(AttributeError):
            disk.object_size = 1
        with pytest.raises(RuntimeError):
            desc.get_memory_descriptor()
        mem = rd.get_replica_desc("py9")[0]
        assert mem.is_memory_replica() and not mem.is_local_disk_replica()
        with pytest.raises(RuntimeError):
            mem.get_disk_descriptor()
        for i in range(10):
            assert rd.get(f"py{i}") == value(i), i
        assert srv.get_offload_rpc_read_count() >= 1  # the first ones came from the disk
        assert rd.get_offload_rpc_read_count() == 0   # not a storage server
    finally:
        rd.close()
        srv.close()


def test_path_from_environment_and_missing(omaster, tmp_path, monkeypatch):
    st = MooncakeDistributedStore()
    monkeypatch.delenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", raising=False)
    assert do_setup(st, omaster, 1 << 20, enable_ssd_offload=True) == -600
    monkeypatch.setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", str(tmp_path / "envdisk"))
    assert do_setup(st, omaster, 1 << 20, enable_ssd_offload=True) == 0
    assert os.path.isdir(tmp_path / "envdisk")
    st.close()


def test_mooncake_client_enable_offload(omaster, tmp_path):
    """mooncake_client --enable_offload=true --offload_path=DIR is a storage server of the tier:
    values pushed out of its 2 MiB segment read back exact from its disk."""
    env = dict(os.environ, MC_OFFLOAD_HEARTBEAT_MS="50",
               MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES="8MB",
               MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES="64MB",
               MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES="1MB")
    srv = Proc([bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
                "--metadata_server=P2PHANDSHAKE", f"--master_server_address={omaster.addr}",
                "--global_segment_size=2MB", "--protocol=tcp", "--log_level=warn",
                "--enable_offload=true", f"--offload_path={tmp_path / 'cdisk'}"],
               "mooncake_client ready", env=env)
    rd = MooncakeDistributedStore()
    try:
        assert do_setup(rd, omaster, 0) == 0
        for i in range(3):
            assert rd.put(f"mc{i}", value(i)) == 0
        wait_on_disk(omaster, rd, "mc0", 3)
        for i in range(3, 6):
            deadline = time.monotonic() + 10
            while (rc := rd.put(f"mc{i}", value(i))) == -200:  # eviction waits for offloads
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert rc == 0
        for i in range(6):
            assert rd.get(f"mc{i}") == value(i), i
    finally:
        rd.close()
        srv.stop()
