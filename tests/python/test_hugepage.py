"""MC_STORE_USE_HUGEPAGE / MC_STORE_HUGEPAGE_SIZE: dummy-client shared memory
(alloc_from_mem_pool, MooncakeHostMemAllocator, setup_dummy's local buffer) and a client's own
segments (setup, mooncake_client) on huge pages, a hard requirement as upstream's: with too few
free huge pages the allocation fails with an error naming the sysfs knob, never falls back to
base pages.

The failure path runs whenever the host has fewer free huge pages than asked for (this test
asks for more than are free). The success path needs huge pages: run as root, it reserves
2 MiB pages (and one 1 GiB page) for itself (nr_hugepages, restored afterwards) and is
skipped, saying why, when it cannot."""
import logging
import os
import subprocess
import tempfile

import pytest

from conftest import Proc, bin_path, start_master
from mooncake import _config
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator
from test_dummy import RealClient

SYS_2MB = "/sys/kernel/mm/hugepages/hugepages-2048kB"
SYS_1GB = "/sys/kernel/mm/hugepages/hugepages-1048576kB"


def free_pages(sysdir):
    try:
        with open(os.path.join(sysdir, "free_hugepages")) as f:
            return int(f.read())
    except OSError:
        return 0


def kernel_page_kb(addr):
    """KernelPageSize (kB) of the mapping of this process holding addr."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("KernelPageSize:"):
                return int(line.split()[1])
    raise AssertionError(f"no mapping holds {addr:#x}")


@pytest.fixture
def env(monkeypatch):
    def set_(use=None, size=None):
        for k, v in (("MC_STORE_USE_HUGEPAGE", use), ("MC_STORE_HUGEPAGE_SIZE", size)):
            if v is None:
                monkeypatch.delenv(k, raising=False)
            else:
                monkeypatch.setenv(k, v)
    return set_


def test_variables(env):
    env()
    assert _config.store_hugepage_size() == 0
    for off in ("", "0", "false", "No", "off"):
        env(off, "1GB")
        assert _config.store_hugepage_size() == 0
    for on in ("1", "true", "YES", "on"):
        env(on)
        assert _config.store_hugepage_size() == 2 << 20
    for size, want in (("2MB", 2 << 20), ("2m", 2 << 20), ("2097152", 2 << 20),
                       ("1GB", 1 << 30), ("1 GiB", 1 << 30), ("", 2 << 20)):
        env("1", size)
        assert _config.store_hugepage_size() == want, size
    for bad_use in ("2", "maybe"):
        env(bad_use)
        with pytest.raises(ValueError, match="MC_STORE_USE_HUGEPAGE"):
            _config.store_hugepage_size()
    for bad_size in ("4MB", "4KB", "1.5GB", "fast", "-2MB"):
        env("1", bad_size)
        with pytest.raises(ValueError, match="MC_STORE_HUGEPAGE_SIZE"):
            _config.store_hugepage_size()
        with pytest.raises(ValueError, match="MC_STORE_HUGEPAGE_SIZE"):
            MooncakeHostMemAllocator().alloc(4096)


def test_off_means_base_pages(env):
    env("0")
    a = MooncakeHostMemAllocator()
    p = a.alloc(4 << 20)
    assert p and kernel_page_kb(p) == 4
    assert a.free(p) == 0


@pytest.mark.parametrize("size,sysdir", [("2MB", SYS_2MB), ("1GB", SYS_1GB)])
def test_required_fails_without_free_huge_pages(env, caplog, size, sysdir):
    env("1", size)
    page = 2 << 20 if size == "2MB" else 1 << 30
    want = (free_pages(sysdir) + 1) * page  # one page more than the host has free
    if want > 8 << 30:
        pytest.skip(f"{free_pages(sysdir)} free {size} pages: too many to exhaust in a test")
    caplog.set_level(logging.ERROR, logger="mooncake")
    st = MooncakeDistributedStore()
    assert st.alloc_from_mem_pool(want) == 0
    assert MooncakeHostMemAllocator().alloc(want) == 0
    text = caplog.text
    assert "huge pages" in text and f"{sysdir}/nr_hugepages" in text, text


@pytest.fixture(scope="module")
def real():
    m = start_master(lease_ttl_ms=500)
    with tempfile.TemporaryDirectory(prefix="mc-huge-") as d:
        r = RealClient(m.addr, d)
        yield r
        r.stop()
    m.stop()


def test_dummy_local_buffer_required(env, real):
    """setup_dummy with a local buffer on huge pages the host does not have: -1, no fallback."""
    need = free_pages(SYS_2MB) + 1
    env("1", "2MB")
    d = MooncakeDistributedStore()
    assert d.setup_dummy(0, need * (2 << 20), real.addr) == -1
    env()
    assert d.setup_dummy(0, 4 << 20, real.addr) == 0  # the same call on base pages works
    d.close()


@pytest.fixture
def reserved_pages():
    """Four more free 2 MiB pages for this test (root only); the old count is restored."""
    path = os.path.join(SYS_2MB, "nr_hugepages")
    try:
        with open(path) as f:
            old = int(f.read())
        with open(path, "w") as f:
            f.write(str(old + 4))
    except OSError as e:
        pytest.skip(f"cannot reserve huge pages ({path}: {e.strerror}); the success path of "
                    "MC_STORE_USE_HUGEPAGE is untested here")
    try:
        if free_pages(SYS_2MB) < 4:
            pytest.skip("the kernel granted fewer than 4 free 2 MiB pages; the success path "
                        "of MC_STORE_USE_HUGEPAGE is untested here")
        yield
    finally:
        with open(path, "w") as f:
            f.write(str(old))


def test_huge_pages_used_when_reserved(env, real, reserved_pages):
    env("1", "2MB")
    a = MooncakeHostMemAllocator()
    p = a.alloc(3 << 20)  # rounded up to two 2 MiB pages
    assert p and kernel_page_kb(p) == 2048
    d = MooncakeDistributedStore()
    assert d.setup_dummy(0, 2 << 20, real.addr) == 0  # local buffer: one more huge page
    try:
        import ctypes
        ctypes.memset(p, 0x5A, 3 << 20)
        assert d.register_buffer(p, 3 << 20) == 0
        assert d.put_from("huge/k", p, 3 << 20) == 0
        ctypes.memset(p, 0, 3 << 20)
        assert d.get_into("huge/k", p, 3 << 20) == 3 << 20
        assert ctypes.string_at(p, 3 << 20) == b"\x5a" * (3 << 20)
        assert d.get("huge/k") == b"\x5a" * (3 << 20)  # through the huge-page local buffer
        assert d.unregister_buffer(p) == 0
    finally:
        d.close()
        assert a.free(p) == 0


def shareable_page_kb(pid="self"):
    """KernelPageSize (kB) of every transfer-engine shareable mapping (memfd
    "mc-te-shareable": a client's own segments and the peers' it maps) of a process."""
    out = []
    with open(f"/proc/{pid}/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                inside = "memfd:mc-te-shareable" in line
            elif inside and line.startswith("KernelPageSize:"):
                out.append(int(line.split()[1]))
    return out


@pytest.fixture(scope="module")
def master():
    m = start_master()
    yield m
    m.stop()


def setup_client(st, master, segment):
    return st.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 << 20, "auto", "", master.addr)


def test_setup_segment_required_fails(env, caplog, master):
    """setup with a segment on huge pages the host does not have: an error, no fallback."""
    need = free_pages(SYS_2MB) + 1
    if need > 4096:
        pytest.skip(f"{need - 1} free 2 MiB pages: too many to exhaust in a test")
    env("1", "2MB")
    caplog.set_level(logging.ERROR, logger="mooncake")
    st = MooncakeDistributedStore()
    assert setup_client(st, master, need * (2 << 20)) != 0
    text = caplog.text
    assert f"{SYS_2MB}/nr_hugepages" in text, text
    env("1", "4MB")
    assert setup_client(st, master, 4 << 20) == -600  # INVALID_PARAMS, as for the dummy
    env()
    assert setup_client(st, master, 4 << 20) == 0  # the same call on base pages works
    st.close()


def test_mooncake_client_required_fails(master):
    """mooncake_client with a segment on huge pages the host does not have exits non-zero,
    naming the sysfs knob; a huge page size other than 2MB / 1GB is refused up front."""
    need = free_pages(SYS_1GB) + 1
    if need > 8:
        pytest.skip(f"{need - 1} free 1 GiB pages: too many to exhaust in a test")
    argv = [bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
            "--metadata_server=P2PHANDSHAKE", f"--master_server_address={master.addr}",
            f"--global_segment_size={need}GB", "--protocol=tcp", "--log_level=warn"]
    env = dict(os.environ, MC_STORE_USE_HUGEPAGE="1", MC_STORE_HUGEPAGE_SIZE="1GB")
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and f"{SYS_1GB}/nr_hugepages" in r.stderr, r.stderr
    env["MC_STORE_HUGEPAGE_SIZE"] = "4MB"
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "MC_STORE_HUGEPAGE_SIZE must be 2MB or 1GB" in r.stderr, \
        r.stderr


def test_setup_segment_on_huge_pages(env, master, reserved_pages):
    env("1", "2MB")
    st = MooncakeDistributedStore()
    assert setup_client(st, master, 3 << 20) == 0  # rounded up to two 2 MiB pages
    try:
        assert shareable_page_kb() == [2048]
        assert st.put("huge/seg", b"\x33" * (1 << 20)) == 0
        assert st.get("huge/seg") == b"\x33" * (1 << 20)
    finally:
        st.close()


@pytest.fixture
def reserved_1g_page():
    """One more free 1 GiB page for this test (root only); the old count is restored."""
    path = os.path.join(SYS_1GB, "nr_hugepages")
    try:
        with open(path) as f:
            old = int(f.read())
        with open(path, "w") as f:
            f.write(str(old + 1))
    except OSError as e:
        pytest.skip(f"cannot reserve a 1 GiB page ({path}: {e.strerror})")
    try:
        if free_pages(SYS_1GB) < 1:
            pytest.skip("the kernel granted no free 1 GiB page")
        yield
    finally:
        with open(path, "w") as f:
            f.write(str(old))


def test_storage_server_on_1g_pages_over_shm(env, master, reserved_1g_page):
    """mooncake_client's segment on a 1 GiB page; a client on the same host reads and writes
    it through the shm transport, which maps the peer's memfd on 1 GiB boundaries."""
    env()
    srv = Proc([bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
                "--metadata_server=P2PHANDSHAKE", f"--master_server_address={master.addr}",
                "--global_segment_size=64MB", "--protocol=auto", "--log_level=warn"],
               "mooncake_client ready",
               env=dict(os.environ, MC_STORE_USE_HUGEPAGE="1", MC_STORE_HUGEPAGE_SIZE="1GB"))
    try:
        assert shareable_page_kb(srv.proc.pid) == [1 << 20]
        st = MooncakeDistributedStore()
        assert setup_client(st, master, 0) == 0
        try:
            value = bytes(range(256)) * (16 << 10)  # 4 MiB
            assert st.put("huge/1g", value) == 0
            assert st.get("huge/1g") == value
            # the bytes went through our own mapping of the peer's 1 GiB page
            assert shareable_page_kb() == [1 << 20]
        finally:
            st.close()
    finally:
        srv.stop()
