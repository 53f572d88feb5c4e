"""Standalone mode: mooncake_client (--port) serving dummy clients (setup_dummy) of this host.

A real client is started per module on a fresh port with its log in a temporary file; dummies
run in this process and in child processes. Covers the round trips of every served call,
zero copy through alloc_from_mem_pool / MooncakeHostMemAllocator memory, dummy processes
sharing keys, a dummy killed with -9 or silent (its regions are unmapped), a real client killed
or frozen (calls fail within the deadline) and malformed messages on a raw socket.
"""
import ctypes
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import LineReader, auth_handshake, bin_path, free_port, sigstop, start_master, wait_for
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator

RPC_FAIL = -900
INVALID_PARAMS = -600
HERE = os.path.dirname(os.path.abspath(__file__))


class RealClient:
    """mooncake_client --port=P: stdout read for the ready line, log in a temporary file."""

    def __init__(self, master_addr, tmpdir, tag="real"):
        self.port = free_port()
        self.log_path = os.path.join(tmpdir, f"{tag}-{self.port}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
             "--metadata_server=P2PHANDSHAKE", f"--master_server_address={master_addr}",
             "--global_segment_size=256MB", "--protocol=tcp", f"--port={self.port}",
             "--log_level=info"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = LineReader(self.proc.stdout).readline(20.0)
        assert line and line.startswith("mooncake_client ready"), f"real client: {line!r}"
        self.addr = f"127.0.0.1:{self.port}"

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def signal(self, sig):
        if sig == signal.SIGSTOP:
            sigstop(self.proc.pid)  # returns once every thread is stopped
        else:
            os.kill(self.proc.pid, sig)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.log.close()


@pytest.fixture(scope="module")
def tmpdir():
    with tempfile.TemporaryDirectory(prefix="mc-dummy-") as d:
        yield d


@pytest.fixture(scope="module")
def master():
    m = start_master(lease_ttl_ms=500)
    yield m
    m.stop()


@pytest.fixture(scope="module")
def real(master, tmpdir):
    r = RealClient(master.addr, tmpdir)
    yield r
    r.stop()


@pytest.fixture()
def dummy(real):
    d = MooncakeDistributedStore()
    assert d.setup_dummy(3200 << 20, 16 << 20, real.addr) == 0
    yield d
    d.close()


_n = [0]


def k(prefix="dk"):
    _n[0] += 1
    return f"{prefix}/{os.getpid()}/{_n[0]}"


def test_round_trip(dummy):
    key = k()
    assert dummy.health_check() == 0
    assert dummy.get_hostname() == ""
    assert dummy.put(key, b"hello dummy") == 0
    assert dummy.get(key) == b"hello dummy"
    assert dummy.get_size(key) == 11
    assert dummy.is_exist(key) == 1
    assert dummy.batch_is_exist([key, k()]) == [1, 0]
    assert dummy.get(k()) == b""
    assert dummy.put(key, b"other") == 0          # create-once: the value stays
    assert dummy.get(key) == b"hello dummy"
    assert dummy.upsert(key, b"new value") == 0
    assert bytes(dummy.get_buffer(key)) == b"new value"
    keys = [k(), k(), k()]
    assert dummy.put_batch(keys, [b"a", b"bb", b"ccc"]) == 0
    assert dummy.get_batch(keys) == [b"a", b"bb", b"ccc"]
    assert dummy.put_parts(k(), b"x", b"y") == 0
    # remove once our own read lease has run out (upstream's dummy test does the same)
    wait_for(lambda: dummy.remove(key) == 0, timeout=10, what="remove after the lease")
    assert dummy.is_exist(key) == 0
    assert dummy.batch_remove(keys, True) == [0, 0, 0]
    assert dummy.remove_by_regex("^nothing-here$", True) == 0
    assert dummy.get_replica_desc(key) == []


def test_zero_copy_with_mem_pool(dummy):
    n = 8 << 20
    src = dummy.alloc_from_mem_pool(n)
    dst = dummy.alloc_from_mem_pool(n)
    assert src and dst
    assert dummy.register_buffer(src, n) == 0
    assert dummy.register_buffer(dst, n) == 0
    pattern = os.urandom(n)
    ctypes.memmove(src, pattern, n)
    key = k()
    assert dummy.put_from(key, src, n) == 0
    ctypes.memset(dst, 0, n)
    assert dummy.get_into(key, dst, n) == n
    assert ctypes.string_at(dst, n) == pattern
    assert dummy.get_into(key, dst, 100) < 0       # too small
    # batches over pieces of the registered buffers
    keys = [k(), k(), k()]
    offs = [0, 1 << 20, 5 << 20]
    sizes = [4096, 1 << 20, 3 << 20]
    assert dummy.batch_put_from(keys, [src + o for o in offs], sizes) == [0, 0, 0]
    ctypes.memset(dst, 0, n)
    got = dummy.batch_get_into(keys, [dst + o for o in offs], sizes)
    assert got == sizes
    for o, s in zip(offs, sizes):
        assert ctypes.string_at(dst + o, s) == pattern[o:o + s]
    # several pieces per key
    mk = k()
    assert dummy.batch_put_from_multi_buffers([mk], [[src, src + 4096]], [[100, 200]]) == [0]
    assert dummy.batch_get_into_multi_buffers([mk], [[dst + 8192]], [[300]]) == [300]
    assert ctypes.string_at(dst + 8192, 300) == pattern[:100] + pattern[4096:4296]
    # get_into_ranges on a dummy, as upstream's test: per-fragment byte counts
    ra, rb = k(), k()
    assert dummy.put(ra, b"0123456789") == 0
    assert dummy.put(rb, b"abcdefghij") == 0
    res = dummy.get_into_ranges([dst, dst + 4096], [[ra, rb], [rb, ra]],
                                [[[0, 4], [10]], [[0], [6]]], [[[0, 6], [2]], [[4], [0]]],
                                [[[4, 3], [6]], [[6], [4]]])
    assert res == [[[4, 3], [6]], [[6], [4]]]
    assert ctypes.string_at(dst, 7) == b"0123678"
    assert ctypes.string_at(dst + 10, 6) == b"cdefgh"
    assert ctypes.string_at(dst + 4096, 10) == b"efghij0123"
    # memory that is not shared with the real client cannot be registered
    plain = ctypes.create_string_buffer(4096)
    assert dummy.register_buffer(ctypes.addressof(plain), 4096) < 0
    assert dummy.unregister_buffer(src) == 0
    alloc = MooncakeHostMemAllocator()
    assert alloc.free(src) == 0
    assert alloc.free(src) == -1
    p = alloc.alloc(1 << 20)
    assert p and dummy.register_buffer(p, 1 << 20) == 0
    assert dummy.put_from(k(), p, 1 << 20) == 0
    assert alloc.free(p) == 0                      # unregisters it from the dummy first
    assert alloc.free(dst) == 0


def test_upsert_from_and_batch_upsert_from(dummy):
    n = 1 << 20
    buf = dummy.alloc_from_mem_pool(n)
    assert dummy.register_buffer(buf, n) == 0
    key = k()
    ctypes.memset(buf, 1, n)
    assert dummy.put_from(key, buf, n) == 0
    ctypes.memset(buf, 2, n)
    assert dummy.upsert_from(key, buf, n) == 0
    assert dummy.get(key) == b"\x02" * n
    assert dummy.batch_upsert_from([key], [buf], [4]) == [0]
    assert dummy.get_size(key) == 4
    MooncakeHostMemAllocator().free(buf)


def test_tensors_round_trip(dummy):
    np = pytest.importorskip("numpy")
    t = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    key = k("tensor")
    assert dummy.put_tensor(key, t) == 0
    got = dummy.get_tensor(key)
    assert np.array_equal(np.asarray(got), t)
    keys = [k("tensor"), k("tensor")]
    assert dummy.batch_put_tensor(keys, [t, t * 2]) == [0, 0]
    got = dummy.batch_get_tensor(keys)
    assert np.array_equal(np.asarray(got[1]), t * 2)
    assert dummy.put_tensor_with_tp(k("tp"), t, tp_size=2, split_dim=2) == 0
    assert dummy.get_tensor(k("none")) is None


PEER = r"""
import ctypes, sys, time
from mooncake.store import MooncakeDistributedStore
addr, me, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = MooncakeDistributedStore()
assert d.setup_dummy(3200 << 20, 8 << 20, addr) == 0
val = lambda i: (b"peer%d-" % i) * 1000
mine = "xchg/%d" % me
buf = d.alloc_from_mem_pool(1 << 20)
assert d.register_buffer(buf, 1 << 20) == 0
ctypes.memmove(buf, val(me), len(val(me)))
assert d.put_from(mine, buf, len(val(me))) == 0
deadline = time.monotonic() + 10
keys = ["xchg/%d" % i for i in range(n)]
while d.batch_is_exist(keys) != [1] * n:
    assert time.monotonic() < deadline, "keys of the other dummies did not appear"
    time.sleep(0.02)
for i in range(n):
    assert d.get_size(keys[i]) == len(val(i))
    assert d.get(keys[i]) == val(i)
    assert d.get_into(keys[i], buf, 1 << 20) == len(val(i))
    assert ctypes.string_at(buf, len(val(i))) == val(i)
assert d.put(mine, b"again") == 0
deadline = time.monotonic() + 10
while d.remove(mine) != 0:
    assert time.monotonic() < deadline, "remove after the lease"
    time.sleep(0.05)
print("OK", flush=True)
d.close()
"""


def test_dummy_processes_exchange_keys(real):
    n = 3
    procs = [subprocess.Popen([sys.executable, "-c", PEER, real.addr, str(i), str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    try:
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0 and "OK" in out, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


HOLDER = r"""
import sys, time
from mooncake.store import MooncakeDistributedStore
d = MooncakeDistributedStore()
assert d.setup_dummy(0, 4 << 20, sys.argv[1]) == 0
for _ in range(2):
    p = d.alloc_from_mem_pool(2 << 20)
    assert d.register_buffer(p, 2 << 20) == 0
print("ready", flush=True)
time.sleep(600)
"""


def test_killed_dummy_is_unmapped(real, dummy):
    before = dummy.dummy_server_stats()
    p = subprocess.Popen([sys.executable, "-c", HOLDER, real.addr], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        now = dummy.dummy_server_stats()
        assert now["regions"] == before["regions"] + 3
        assert now["dummies"] == before["dummies"] + 1
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        wait_for(lambda: dummy.dummy_server_stats()["regions"] == before["regions"], timeout=5,
                 what="the killed dummy's regions to be unmapped")
        assert dummy.dummy_server_stats()["dummies"] == before["dummies"]
        wait_for(lambda: real.log_text().count("dummy gone") >= 3, timeout=5,
                 what="the unmap lines in the real client's log")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


# ---- raw socket ----------------------------------------------------------------------------

def frame(op, body=b"", req_id=7):
    return struct.pack("<IHHHHiIQI", 0x5052434D, 1, op, 0, 0, 0, len(body), req_id, 0) + body


def varint(v):
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(n, wt, v):
    if wt == 0:
        return varint((n << 3) | wt) + varint(v)
    return varint((n << 3) | wt) + varint(len(v)) + v


def raw_connect(port):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(f"\0mooncake_client_{port}.sock")
    auth_handshake(s)  # every connection starts with the cluster handshake
    return s


def recv_frame(s):
    hdr = b""
    while len(hdr) < 32:
        c = s.recv(32 - len(hdr))
        if not c:
            return None
        hdr += c
    _, _, op, flags, _, status, blen, req_id, _ = struct.unpack("<IHHHHiIQI", hdr)
    body = b""
    while len(body) < blen:
        body += s.recv(blen - len(body))
    return status, body


def results_of(body):
    """Field 2 (packed int64 results) of an RcResponse."""
    i, out = 0, []
    while i < len(body):
        tag = body[i]
        i += 1
        if tag == (2 << 3) | 2:
            n, shift, ln = 0, 0, 0
            while True:
                b = body[i]; i += 1
                ln |= (b & 0x7F) << shift; shift += 7
                if not b & 0x80:
                    break
            end = i + ln
            while i < end:
                v, shift = 0, 0
                while True:
                    b = body[i]; i += 1
                    v |= (b & 0x7F) << shift; shift += 7
                    if not b & 0x80:
                        break
                out.append(v - (1 << 64) if v >= 1 << 63 else v)
            return out
        # skip other fields (varints only in what we ask for)
        while body[i] & 0x80:
            i += 1
        i += 1
    return out


def closed(s):
    try:
        return s.recv(64) == b""
    except (ConnectionResetError, socket.timeout):
        return False


def test_malformed_messages_leave_others_served(real, dummy):
    # garbage
    s = raw_connect(real.port)
    s.sendall(b"\x00garbage that is no frame header at all.......")
    assert closed(s)
    s.close()
    # a header announcing an oversized body
    s = raw_connect(real.port)
    s.sendall(struct.pack("<IHHHHiIQI", 0x5052434D, 1, 1, 0, 0, 0, (64 << 20) + 1, 1, 0))
    assert closed(s)
    s.close()
    # a dummy of our own making: hello, then a get_into outside any registered region
    s = raw_connect(real.port)
    s.sendall(frame(1))
    assert recv_frame(s)[0] == 0
    key = k()
    assert dummy.put(key, b"0123456789") == 0
    slice_ = field(4, 2, field(1, 0, 0x7F0000001000) + field(2, 0, 10))
    s.sendall(frame(9, field(2, 2, key.encode()) + slice_ + field(5, 0, 1)))
    status, body = recv_frame(s)
    assert status == 0 and results_of(body) == [INVALID_PARAMS]
    # offsets that wrap, counts that do not add up: the whole request is refused
    s.sendall(frame(9, field(2, 2, key.encode()) +
                    field(4, 2, field(1, 0, (1 << 64) - 4) + field(2, 0, 10)) + field(5, 0, 1)))
    assert recv_frame(s)[0] == INVALID_PARAMS
    s.sendall(frame(9, field(2, 2, key.encode()) + slice_ + field(5, 0, 3)))
    assert recv_frame(s)[0] == INVALID_PARAMS
    # a register without its descriptor
    s.sendall(frame(3, field(10, 0, 0x7F0000000000) + field(11, 0, 4096)))
    assert recv_frame(s)[0] == INVALID_PARAMS
    # a body that is no protobuf
    s.sendall(frame(10, b"\xff\xff\xff\xff\xff\xff\x0a"))
    assert recv_frame(s)[0] == -3002
    s.close()
    # the good dummy was served throughout
    assert dummy.get(key) == b"0123456789"
    assert dummy.health_check() == 0


def test_silent_dummy_is_dropped(real, dummy):
    before = dummy.dummy_server_stats()["dummies"]
    s = raw_connect(real.port)
    s.sendall(frame(1))                          # hello, then never a ping
    assert recv_frame(s)[0] == 0
    t0 = time.monotonic()
    assert dummy.dummy_server_stats()["dummies"] == before + 1
    wait_for(lambda: dummy.dummy_server_stats()["dummies"] == before, timeout=20,
             interval=0.2, what="the silent dummy to be dropped")
    assert time.monotonic() - t0 >= 8.5
    assert closed(s)
    s.close()
    assert "silent for" in real.log_text()


# ---- a real client that dies or hangs ---------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_real_client_failure_is_a_bounded_error(master, tmpdir, sig):
    r = RealClient(master.addr, tmpdir, tag=f"fail{int(sig)}")
    d = MooncakeDistributedStore()
    try:
        assert d.setup_dummy(0, 4 << 20, r.addr, timeout_ms=2000) == 0
        buf = d.alloc_from_mem_pool(1 << 20)
        assert d.register_buffer(buf, 1 << 20) == 0
        assert d.put("fail/k", b"v") == 0
        r.signal(sig)
        if sig == signal.SIGKILL:
            r.proc.wait(timeout=10)
        t0 = time.monotonic()
        assert d.is_exist("fail/k") == RPC_FAIL
        assert d.get("fail/k") == b""
        assert d.put("fail/k2", b"v") == RPC_FAIL
        assert d.get_into("fail/k", buf, 1 << 20) == RPC_FAIL
        assert d.batch_is_exist(["fail/k", "x"]) == [RPC_FAIL, RPC_FAIL]
        took = time.monotonic() - t0
        assert took < 3.0, f"calls took {took:.1f}s"
        assert d.health_check() == 2
    finally:
        t0 = time.monotonic()
        d.close()
        assert time.monotonic() - t0 < 5
        r.stop()


def test_setup_dummy_without_real_client():
    d = MooncakeDistributedStore()
    assert d.setup_dummy(0, 0, "127.0.0.1:4") == -1
    assert d.health_check() == 1
    assert d.setup_dummy(0, 0, "no-port") == -1
