"""mooncake.engine.TransferEngine against a peer process (te_peer.py), metadata P2PHANDSHAKE."""
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from conftest import GilProbe, TePeer, sha256, sigstop, wait_for
from te_peer import pattern

import mooncake
import mooncake.engine
from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

LOCAL_SIZE = 8 << 20


@pytest.fixture(scope="module")
def eng():
    """A local engine with one registered 8 MiB numpy buffer."""
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = np.zeros(LOCAL_SIZE, dtype=np.uint8)
    assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
    te.buf = buf  # keep the registered memory alive as long as the engine
    yield te
    assert te.unregister_memory(buf.ctypes.data) == 0
    te.close()


def local_addr(eng, off=0):
    return eng.buf.ctypes.data + off


def test_initialize_reports_name_and_port(eng):
    port = eng.get_rpc_port()
    assert 0 < port < 65536
    assert eng.get_local_hostname() == f"127.0.0.1:{port}"


def test_sync_write_then_read(eng, peer):
    n = 1 << 20
    eng.buf[:n] = pattern(n, 1)
    assert eng.transfer_sync_write(peer.name, local_addr(eng), peer.addr + 4096, n) == 0
    assert peer.sha(4096, n) == sha256(eng.buf[:n])

    peer.fill(0, n, 2)
    eng.buf[n:2 * n] = 0
    assert eng.transfer_sync_read(peer.name, local_addr(eng, n), peer.addr, n) == 0
    assert sha256(eng.buf[n:2 * n]) == sha256(pattern(n, 2))


def test_transfer_sync_with_opcode(eng, peer):
    n = 65536
    eng.buf[:n] = pattern(n, 3)
    assert eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.WRITE) == 0
    assert peer.sha(0, n) == sha256(pattern(n, 3))
    eng.buf[:n] = 0
    assert eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.READ) == 0
    assert sha256(eng.buf[:n]) == sha256(pattern(n, 3))
    # upstream's spelling of the members, also as module and class attributes
    assert eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.Read) == 0
    assert TransferOpcode.Write is TransferOpcode.WRITE and TransferOpcode.Read == 0
    assert mooncake.engine.Write == 1 and mooncake.engine.Read == 0
    assert TransferEngine.TransferOpcode.Write == 1


def test_batch_sync(eng, peer):
    chunk, count = 64 * 1024, 16
    total = chunk * count
    eng.buf[:total] = pattern(total, 4)
    locals_ = [local_addr(eng, i * chunk) for i in range(count)]
    # scatter in reverse order on the peer
    peers = [peer.addr + (count - 1 - i) * chunk for i in range(count)]
    assert eng.batch_transfer_sync_write(peer.name, locals_, peers, [chunk] * count) == 0
    expect = b"".join(bytes(eng.buf[(count - 1 - i) * chunk:(count - i) * chunk])
                      for i in range(count))
    assert peer.sha(0, total) == sha256(expect)

    back = [local_addr(eng, total + i * chunk) for i in range(count)]
    assert eng.batch_transfer_sync_read(peer.name, back, peers, [chunk] * count) == 0
    assert sha256(eng.buf[total:2 * total]) == sha256(eng.buf[:total])
    # generic form with opcode
    assert eng.batch_transfer_sync(peer.name, back, peers, [chunk] * count,
                                   TransferOpcode.READ) == 0


def test_batch_async(eng, peer):
    chunk, count = 128 * 1024, 8
    total = chunk * count
    eng.buf[:total] = pattern(total, 5)
    locals_ = [local_addr(eng, i * chunk) for i in range(count)]
    peers = [peer.addr + i * chunk for i in range(count)]
    bid = eng.batch_transfer_async_write(peer.name, locals_, peers, [chunk] * count)
    assert bid > 0
    assert eng.get_batch_transfer_status([bid]) == 0
    assert peer.sha(0, total) == sha256(eng.buf[:total])

    peer.fill(0, total, 6)
    back = [local_addr(eng, total + i * chunk) for i in range(count)]
    b1 = eng.batch_transfer_async_read(peer.name, back[:4], peers[:4], [chunk] * 4)
    b2 = eng.batch_transfer_async(peer.name, back[4:], peers[4:], [chunk] * 4,
                                  TransferOpcode.READ)
    assert b1 > 0 and b2 > 0 and b1 != b2
    assert eng.get_batch_transfer_status([b1, b2]) == 0
    assert sha256(eng.buf[total:2 * total]) == sha256(pattern(total, 6))
    # ids are released once waited for
    assert eng.get_batch_transfer_status([b1]) == -1
    assert eng.transfer_check_status(b2) == -1


def test_submit_and_check_status(eng, peer):
    n = 256 * 1024
    eng.buf[:n] = pattern(n, 7)
    bid = eng.transfer_submit_write(peer.name, local_addr(eng), peer.addr, n)
    assert bid > 0
    status = wait_for(lambda: eng.transfer_check_status(bid) or None, timeout=10,
                      what="transfer completion")
    assert status == 1
    assert peer.sha(0, n) == sha256(pattern(n, 7))


def test_managed_buffer(eng, peer):
    n = 1 << 20
    addr = eng.allocate_managed_buffer(n)
    assert addr != 0
    data = bytes(pattern(4096, 8))
    assert eng.write_bytes_to_buffer(addr, data, len(data)) == 0
    assert eng.read_bytes_from_buffer(addr, len(data)) == data
    assert eng.transfer_sync_write(peer.name, addr, peer.addr, len(data)) == 0
    assert peer.sha(0, len(data)) == sha256(data)
    # a managed buffer is not released by unregister_memory
    assert eng.unregister_memory(addr) < 0
    assert eng.free_managed_buffer(addr, n + 1) < 0          # wrong length
    assert eng.free_managed_buffer(addr, n) == 0
    assert eng.free_managed_buffer(addr, n) < 0              # twice
    assert eng.free_managed_buffer(local_addr(eng), 16) < 0  # not a managed buffer
    assert eng.write_bytes_to_buffer(addr, data, len(data)) < 0  # freed: refused, no crash
    assert eng.allocate_managed_buffer(0) == 0


def test_first_buffer_address(eng, peer):
    assert eng.get_first_buffer_address(peer.name) == peer.addr
    assert eng.get_first_buffer_address("127.0.0.1:1") == 0


def test_batch_register_memory(eng, peer):
    bufs = [np.zeros(65536, dtype=np.uint8) for _ in range(4)]
    addrs = [b.ctypes.data for b in bufs]
    assert eng.batch_register_memory(addrs, [b.nbytes for b in bufs]) == 0
    for i, b in enumerate(bufs):
        b[:] = pattern(b.nbytes, 10 + i)
    assert eng.batch_transfer_sync_write(peer.name, addrs,
                                         [peer.addr + i * 65536 for i in range(4)],
                                         [65536] * 4) == 0
    assert peer.sha(0, 4 * 65536) == sha256(b"".join(bytes(b) for b in bufs))
    assert eng.batch_unregister_memory(addrs) == 0
    # now unregistered: refused
    assert eng.transfer_sync_write(peer.name, addrs[0], peer.addr, 16) < 0
    # a failing batch registers nothing
    assert eng.batch_register_memory([addrs[0], 0x1000], [65536, 4096]) < 0
    assert eng.transfer_sync_write(peer.name, addrs[0], peer.addr, 16) < 0


def test_bad_addresses_return_codes(eng, peer):
    n = 4096
    # unregistered / absurd local addresses
    assert eng.transfer_sync_write(peer.name, 0xdead0000, peer.addr, n) < 0
    assert eng.transfer_sync_read(peer.name, 0x10, peer.addr, n) < 0
    assert eng.transfer_sync_write(peer.name, local_addr(eng, LOCAL_SIZE - 8), peer.addr, 16) < 0
    # absurd / out-of-range remote addresses: the peer refuses, nobody crashes
    assert eng.transfer_sync_write(peer.name, local_addr(eng), 0x10, n) < 0
    assert eng.transfer_sync_read(peer.name, local_addr(eng), peer.addr + peer.len - 8, 16) < 0
    assert eng.transfer_sync_write(peer.name, local_addr(eng), 2 ** 64 - 8, 16) < 0
    # unknown peer
    assert eng.transfer_sync_write("127.0.0.1:1", local_addr(eng), peer.addr, n) < 0
    assert eng.batch_transfer_async_write(peer.name, [0x10], [peer.addr], [n]) == 0
    assert eng.transfer_submit_write(peer.name, 0x10, peer.addr, n) == 0
    # mismatched batch lists
    assert eng.batch_transfer_sync_write(peer.name, [local_addr(eng)], [peer.addr, peer.addr],
                                         [n]) < 0
    # registration of memory that is not mapped
    assert eng.register_memory(0x1000, 4096) < 0
    assert eng.register_memory(local_addr(eng), 0) < 0
    assert eng.unregister_memory(0x1000) < 0
    # raw buffer I/O outside registered memory
    assert eng.write_bytes_to_buffer(0x1000, b"abc", 3) < 0
    assert eng.write_bytes_to_buffer(local_addr(eng), b"abc", 10) < 0  # length > data
    with pytest.raises(ValueError):
        eng.read_bytes_from_buffer(0x1000, 3)
    # unknown batch ids
    assert eng.transfer_check_status(987654321) == -1
    assert eng.get_batch_transfer_status([987654321]) == -1
    assert peer.alive()
    # and the engine still works
    eng.buf[:n] = pattern(n, 11)
    assert eng.transfer_sync_write(peer.name, local_addr(eng), peer.addr, n) == 0
    assert peer.sha(0, n) == sha256(pattern(n, 11))


def test_bad_types_raise(eng, peer):
    with pytest.raises(TypeError):
        eng.transfer_sync_write(peer.name, "0x1000", peer.addr, 16)
    with pytest.raises(TypeError):
        eng.transfer_sync_write(12345, local_addr(eng), peer.addr, 16)
    with pytest.raises(TypeError):
        eng.transfer_sync_write(peer.name, 1.5, peer.addr, 16)
    with pytest.raises(ValueError):
        eng.transfer_sync_write(peer.name, local_addr(eng), peer.addr, -1)
    with pytest.raises(OverflowError):
        eng.transfer_sync_write(peer.name, local_addr(eng), 2 ** 70, 16)
    with pytest.raises(TypeError):
        eng.batch_transfer_sync_write(peer.name, 5, [peer.addr], [16])
    with pytest.raises(TypeError):
        eng.batch_transfer_sync_write(peer.name, [local_addr(eng)], [peer.addr], ["16"])
    with pytest.raises(TypeError):
        eng.register_memory("x", 10)
    with pytest.raises(TypeError):
        eng.write_bytes_to_buffer(local_addr(eng), "text", 4)
    with pytest.raises(ValueError):
        eng.transfer_sync(peer.name, local_addr(eng), peer.addr, 16, 7)
    with pytest.raises(TypeError):
        eng.transfer_sync_write(peer.name, local_addr(eng), peer.addr)
    with pytest.raises(ValueError):
        eng.transfer_sync_write("bad\0name", local_addr(eng), peer.addr, 16)
    with pytest.raises(TypeError):
        eng.initialize(1, "P2PHANDSHAKE", "tcp", "")


def test_uninitialized_and_closed_engine():
    te = TransferEngine()
    buf = np.zeros(4096, dtype=np.uint8)
    assert te.register_memory(buf.ctypes.data, buf.nbytes) < 0
    assert te.transfer_sync_write("127.0.0.1:1", buf.ctypes.data, 0, 16) < 0
    assert te.get_rpc_port() < 0
    assert te.allocate_managed_buffer(4096) == 0
    assert te.get_batch_transfer_status([1]) == -1
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") < 0  # twice
    assert te.close() == 0
    assert te.close() == 0
    assert te.register_memory(buf.ctypes.data, buf.nbytes) < 0


def test_gil_released_during_transfer(monkeypatch):
    """Another Python thread runs while a transfer call is blocked in the library."""
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "5")
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = np.zeros(4096, dtype=np.uint8)
    assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
    probe = GilProbe()
    try:
        rc = probe.call(te.transfer_sync_write, probe.addr, buf.ctypes.data, 0x1000, 16)
    finally:
        probe.close()
    assert rc < 0                     # the probe is not a Transfer Engine
    assert probe.released(5.0), (probe.duration, probe.seen_at and probe.seen_at - probe.t0)
    te.close()


def test_concurrent_threads(eng, peer):
    """Many threads transferring disjoint ranges on one engine."""
    nthreads, n = 8, 64 * 1024
    errors = []

    def work(i):
        try:
            off = i * n
            for rep in range(10):
                eng.buf[off:off + n] = pattern(n, 100 + i * 10 + rep)
                if eng.transfer_sync_write(peer.name, local_addr(eng, off), peer.addr + off,
                                           n) != 0:
                    errors.append((i, "write"))
                eng.buf[off:off + n] = 0
                if eng.transfer_sync_read(peer.name, local_addr(eng, off), peer.addr + off,
                                          n) != 0:
                    errors.append((i, "read"))
                if sha256(eng.buf[off:off + n]) != sha256(pattern(n, 100 + i * 10 + rep)):
                    errors.append((i, "data"))
        except Exception as e:  # pragma: no cover - reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors


def test_logging_bridge(caplog):
    """Library log lines (from C, any thread) reach logging.getLogger('mooncake')."""
    caplog.set_level(logging.INFO, logger="mooncake")
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    mooncake.flush_logs()
    recs = [r for r in caplog.records if r.name == "mooncake" and r.pathname.endswith(".c")]
    assert recs, "no library log line reached Python logging"
    assert any("serving" in r.getMessage() for r in recs)
    assert all(r.lineno > 0 for r in recs)
    te.close()


def test_log_level_control():
    old = mooncake.get_log_level()
    try:
        mooncake.set_log_level("error")
        assert mooncake.get_log_level() == 40
        mooncake.set_log_level(logging.DEBUG)
        assert mooncake.get_log_level() == 10
        with pytest.raises(ValueError):
            mooncake.set_log_level("loud")
    finally:
        mooncake.set_log_level(old)


@pytest.mark.parametrize("value,expect", [("error", "40"), ("debug", "10")])
def test_log_level_from_env(value, expect):
    """MC_LOG_LEVEL sets the library's level when the package is imported."""
    out = subprocess.run([sys.executable, "-c", "import mooncake; print(mooncake.get_log_level())"],
                         env={**os.environ, "MC_LOG_LEVEL": value}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expect


def test_log_level_from_env_refuses_bad_value():
    out = subprocess.run([sys.executable, "-c", "import mooncake"],
                         env={**os.environ, "MC_LOG_LEVEL": "loud"}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0
    assert "MC_LOG_LEVEL must be debug, info, warn, error or off, got 'loud'" in out.stderr


def test_status_table():
    assert mooncake.STATUS_CODES["OBJECT_NOT_FOUND"] == -704
    assert mooncake.STATUS_CODES["INVALID_PARAMS"] == -600
    assert mooncake.status_name(-600) == "INVALID_PARAMS"


def test_exit_with_live_engine_and_logging_threads():
    """Interpreter exit while C threads may still log must not crash or hang."""
    code = textwrap.dedent("""
        import logging, sys
        import numpy as np
        import mooncake
        from mooncake.engine import TransferEngine
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        mooncake.set_log_level("debug")
        engines = []
        for i in range(3):
            te = TransferEngine()
            assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
            engines.append(te)
        buf = np.zeros(1 << 20, dtype=np.uint8)
        assert engines[0].register_memory(buf.ctypes.data, buf.nbytes) == 0
        for te in engines[1:]:
            te.transfer_sync_read(engines[0].get_local_hostname(), 0x10, buf.ctypes.data, 16)
        print("done", flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "done"


def test_auto_protocol_same_host():
    """protocol 'auto' (shared memory between same-host peers) moves the same bytes."""
    p = TePeer(size=4 << 20, protocol="auto")
    try:
        te = TransferEngine()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "auto", "") == 0
        buf = np.zeros(4 << 20, dtype=np.uint8)
        assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
        buf[:] = pattern(buf.nbytes, 21)
        assert te.transfer_sync_write(p.name, buf.ctypes.data, p.addr, buf.nbytes) == 0
        assert p.sha(0, buf.nbytes) == sha256(buf)
        p.fill(0, 1 << 20, 22)
        assert te.transfer_sync_read(p.name, buf.ctypes.data, p.addr, 1 << 20) == 0
        assert sha256(buf[:1 << 20]) == sha256(pattern(1 << 20, 22))
        assert te.transfer_sync_write(p.name, buf.ctypes.data, p.addr + p.len - 8, 16) < 0
        # a notification reaches a peer whose data goes over shared memory
        assert te.transfer_sync(p.name, buf.ctypes.data, p.addr, 4096, TransferOpcode.Write,
                                TransferNotify("shm", "peer")) == 0
        assert peer_notifies(p) == [("shm", "peer")]
        assert te.send_probe(p.name) == 0
        te.unregister_memory(buf.ctypes.data)
        te.close()
    finally:
        p.stop()


def test_te_tuning_from_env(monkeypatch):
    """The tools' MC_TE_* variables become engine config fields; bad values name the variable."""
    from mooncake import _config
    for name, *_ in _config._TE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MC_TE_TCP_STRIPE", "2")
    monkeypatch.setenv("MC_TE_HUGEPAGES", "0")
    monkeypatch.setenv("MC_BUSY_POLL_US", "50")
    monkeypatch.setenv("MC_FORCE_TCP", "")
    assert _config.te_tuning_from_env() == {"tcp_stripe": 2, "hugepages": -1,
                                             "busy_poll_us": 50}
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "auto", "") == 0
    te.close()
    monkeypatch.setenv("MC_TE_TCP_BUF", "abc")
    with pytest.raises(ValueError, match="MC_TE_TCP_BUF must be a size in bytes"):
        TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    monkeypatch.setenv("MC_TE_TCP_BUF", "65536")
    monkeypatch.setenv("MC_FORCE_TCP", "2")
    with pytest.raises(ValueError, match="MC_FORCE_TCP must be 0 or 1"):
        _config.te_tuning_from_env()


# ---- notifications, probes, async failure codes, topology ---------------------------------

def peer_notifies(peer):
    return [tuple(x) for x in json.loads(peer.cmd("notifies"))]


def test_notify_after_transfer(eng, peer):
    """The target receives the notification once the bytes are in its memory, in order."""
    n = 65536
    assert peer_notifies(peer) == []
    eng.buf[:n] = pattern(n, 31)
    assert eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.Write,
                             TransferNotify("req-1", "kv ready")) == 0
    assert peer.sha(0, n) == sha256(pattern(n, 31))
    eng.buf[:n] = 0
    assert eng.batch_transfer_sync(peer.name, [local_addr(eng)], [peer.addr], [n],
                                   TransferOpcode.Read,
                                   notify=TransferNotify("req-2", "h\u00e9llo")) == 0
    assert sha256(eng.buf[:n]) == sha256(pattern(n, 31))
    assert eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.Write,
                             None) == 0  # no notification
    assert peer_notifies(peer) == [("req-1", "kv ready"), ("req-2", "h\u00e9llo")]
    assert peer_notifies(peer) == []  # drained
    # a failed transfer sends none
    assert eng.transfer_sync(peer.name, local_addr(eng), peer.addr + peer.len - 8, 16,
                             TransferOpcode.Write, TransferNotify("no", "no")) < 0
    # over a cap: refused before anything moves
    big = TransferNotify("big", "x" * (mooncake.engine.NOTIFY_MSG_MAX + 1))
    assert eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.Write,
                             big) < 0
    assert peer_notifies(peer) == []
    with pytest.raises(TypeError):
        eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.Write,
                          TransferNotify(1, "m"))
    with pytest.raises(AttributeError):
        eng.transfer_sync(peer.name, local_addr(eng), peer.addr, n, TransferOpcode.Write,
                          object())
    assert eng.get_notifies() == []  # nothing came to the sender
    assert peer.alive()


def test_notify_queue_cap_and_bytes():
    """Own-segment notifications (no network): bytes that are not UTF-8 survive; the queue
    refuses beyond its cap, counts it, keeps order, and accepts again once drained."""
    te = TransferEngine()
    assert te.get_notifies() == []  # not initialized
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    me = te.get_local_hostname()
    W = TransferOpcode.Write
    assert te.batch_transfer_sync(me, [], [], [], W, TransferNotify(b"\xff\x00n", b"m")) == 0
    (got,) = te.get_notifies()
    assert got.name.encode("utf-8", "surrogateescape") == b"\xff\x00n" and got.msg == "m"
    cap = mooncake.engine.NOTIFY_QUEUE_MAX
    for i in range(cap):
        assert te.batch_transfer_sync(me, [], [], [], W, TransferNotify(f"n{i}", "m")) == 0
    assert te.batch_transfer_sync(me, [], [], [], W, TransferNotify("over", "m")) == -3006
    stats = te.notify_stats()
    assert stats["queued"] == cap and stats["refused_full"] == 1
    got = te.get_notifies()
    assert len(got) == cap and got[0] == TransferNotify("n0", "m")
    assert got[-1].name == f"n{cap - 1}"
    assert te.batch_transfer_sync(me, [], [], [], W, TransferNotify("again", "m")) == 0
    assert te.get_notifies() == [TransferNotify("again", "m")]
    te.close()
    assert te.get_notifies() == []


def test_send_probe(eng, peer):
    assert eng.send_probe(peer.name) == 0
    assert eng.send_probe(eng.get_local_hostname()) == 0
    t0 = time.monotonic()
    assert eng.send_probe("127.0.0.1:1") < 0          # nothing listens: refused at once
    assert time.monotonic() - t0 < 2
    assert eng.send_probe("not-a-host-port") < 0
    assert TransferEngine().send_probe(peer.name) < 0  # not initialized
    # a stopped peer: negative within the timeout, answers again once resumed
    p = TePeer()
    try:
        sigstop(p.proc.pid)
        t0 = time.monotonic()
        assert eng.send_probe(p.name, timeout_ms=300) < 0
        assert time.monotonic() - t0 < 3
        os.kill(p.proc.pid, signal.SIGCONT)
        assert eng.send_probe(p.name) == 0
        name = p.name
    finally:
        os.kill(p.proc.pid, signal.SIGCONT)
        p.stop()
    assert eng.send_probe(name) < 0  # dead peer


def test_async_failures_return_zero(eng, peer):
    """Upstream: a failed async submission returns batch id 0 (sync calls: negative)."""
    n = 4096
    for target in ("127.0.0.1:1", "bad name"):
        assert eng.transfer_submit_write(target, local_addr(eng), peer.addr, n) == 0
        assert eng.batch_transfer_async_write(target, [local_addr(eng)], [peer.addr], [n]) == 0
        assert eng.batch_transfer_async_read(target, [local_addr(eng)], [peer.addr], [n]) == 0
        assert eng.batch_transfer_async(target, [local_addr(eng)], [peer.addr], [n],
                                        TransferOpcode.Read) == 0
        assert eng.transfer_sync_write(target, local_addr(eng), peer.addr, n) < 0
    assert eng.batch_transfer_async_write(peer.name, [local_addr(eng)], [peer.addr, 0], [n]) == 0
    assert TransferEngine().transfer_submit_write(peer.name, 0x1000, peer.addr, n) == 0


def test_check_status_codes(monkeypatch, peer):
    """transfer_check_status: 1 done, 0 pending, -1 failed, -2 timed out."""
    monkeypatch.delenv("MC_TRANSFER_TIMEOUT", raising=False)
    monkeypatch.setenv("MC_TE_TIMEOUT_MS", "500")
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = np.zeros(1 << 20, dtype=np.uint8)
    assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
    n = 4096

    def final(bid):
        return wait_for(lambda: te.transfer_check_status(bid) or None, timeout=10,
                        what="a final status")

    bid = te.transfer_submit_write(peer.name, buf.ctypes.data, peer.addr, n)
    assert bid > 0 and final(bid) == 1
    bid = te.transfer_submit_write(peer.name, buf.ctypes.data, peer.addr + peer.len - 8, n)
    assert bid > 0 and final(bid) == -1  # refused by the peer
    p = TePeer()
    try:
        assert te.transfer_sync_write(p.name, buf.ctypes.data, p.addr, n) == 0  # connected
        sigstop(p.proc.pid)
        bid = te.transfer_submit_write(p.name, buf.ctypes.data, p.addr, n)
        assert bid > 0
        assert te.transfer_check_status(bid) == 0  # pending while the peer is stopped
        assert final(bid) == -2
    finally:
        os.kill(p.proc.pid, signal.SIGCONT)
        p.stop()
    te.unregister_memory(buf.ctypes.data)
    te.close()


def sysfs_nodes():
    base = "/sys/devices/system/node"
    try:
        return sorted(int(d[4:]) for d in os.listdir(base)
                      if d.startswith("node") and d[4:].isdigit())
    except OSError:
        return []


def test_local_topology_real(monkeypatch):
    monkeypatch.delenv("MC_USE_TENT", raising=False)
    monkeypatch.delenv("MC_USE_TEV1", raising=False)
    te = TransferEngine()  # needs no initialize, like upstream
    nodes = sysfs_nodes()
    classic = json.loads(te.get_local_topology())
    assert sorted(classic) == [f"cpu:{i}" for i in nodes]
    for pref, avail in classic.values():
        assert isinstance(pref, list) and isinstance(avail, list)
    native = json.loads(te.get_local_topology(native=True))
    assert [m["name"] for m in native["mems"]] == [f"cpu:{i}" for i in nodes]
    assert [m["numa_node"] for m in native["mems"]] == nodes
    nics = {n["name"]: n for n in native["nics"]}
    want = {d for d in os.listdir("/sys/class/net") if d != "lo"}
    assert want <= set(nics) and "lo" not in nics
    for name in want:
        assert nics[name]["type"] == 1
    for m in native["mems"]:
        ranks = m["device_list"]
        assert sorted(ranks["rank0"] + ranks["rank1"]) == list(range(len(native["nics"])))
    monkeypatch.setenv("MC_USE_TENT", "1")  # upstream's switch to the native shape
    assert set(json.loads(te.get_local_topology())) == {"nics", "mems"}


def test_local_topology_fake_sysfs(tmp_path):
    """Missing, unreadable or garbage files leave fields out; nothing raises."""
    root = tmp_path
    node = root / "devices/system/node"
    (node / "node0").mkdir(parents=True)
    (node / "node0/cpulist").write_text("0-3\n")
    (node / "node1").mkdir()                    # no cpulist
    (node / "nodeX").mkdir()                    # not a node
    (node / "online").write_text("0-1\n")
    pci = root / "devices/pci0000:00/0000:3b:00.0"
    (pci / "net/eth9").mkdir(parents=True)
    (pci / "numa_node").write_text("1\n")
    (pci / "net/eth9/speed").write_text("25000\n")
    (pci / "infiniband/mlx5_0").mkdir(parents=True)
    virt = root / "devices/virtual/net/veth0"
    virt.mkdir(parents=True)
    (virt / "speed").write_text("garbage")
    net = root / "class/net"
    net.mkdir(parents=True)
    os.symlink(pci / "net/eth9", net / "eth9")
    os.symlink(virt, net / "veth0")
    os.symlink(root / "nowhere", net / "dangling")
    os.symlink(root / "devices/virtual/net/lo", net / "lo")
    ib = root / "class/infiniband"
    ib.mkdir(parents=True)
    os.symlink(pci / "infiniband/mlx5_0", ib / "mlx5_0")
    classic = json.loads(mooncake.engine.local_topology(sysfs=str(root), native=False))
    assert classic == {"cpu:0": [[], ["mlx5_0"]], "cpu:1": [["mlx5_0"], []]}
    native = json.loads(mooncake.engine.local_topology(sysfs=str(root), native=True))
    nics = {n["name"]: n for n in native["nics"]}
    assert set(nics) == {"mlx5_0", "eth9", "veth0", "dangling"}
    assert nics["mlx5_0"] == {"name": "mlx5_0", "pci_bus_id": "0000:3b:00.0", "type": 0,
                              "numa_node": 1}
    assert nics["eth9"]["speed_mbps"] == 25000 and nics["eth9"]["numa_node"] == 1
    assert nics["veth0"] == {"name": "veth0", "pci_bus_id": "", "type": 1, "numa_node": -1}
    mems = native["mems"]
    assert [m["name"] for m in mems] == ["cpu:0", "cpu:1"]
    assert mems[0]["cpus"] == "0-3" and "cpus" not in mems[1]
    ids = [n["name"] for n in native["nics"]]
    assert [ids[i] for i in mems[1]["device_list"]["rank0"]] == ["mlx5_0", "eth9"]
    # the device filter applies to RDMA devices, as upstream's device_name
    classic = json.loads(mooncake.engine.local_topology("mlx5_9", sysfs=str(root), native=False))
    assert classic == {"cpu:0": [[], []], "cpu:1": [[], []]}
    # no sysfs at all
    assert mooncake.engine.local_topology(sysfs=str(root / "none"), native=True) == \
        '{"nics": [], "mems": []}'


def test_redis_env_values(monkeypatch):
    """MC_REDIS_* become the engine's redis fields; bad values name the variable and never
    show a password."""
    from mooncake import _config
    for name, *_ in _config._TE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MC_REDIS_USERNAME", "alice")
    monkeypatch.setenv("MC_REDIS_PASSWORD", "pw secret")
    monkeypatch.setenv("MC_REDIS_DB_INDEX", "0")
    assert _config.te_tuning_from_env() == {"redis_username": "alice",
                                             "redis_password": "pw secret",
                                             "redis_db_index": 0}
    monkeypatch.setenv("MC_REDIS_DB_INDEX", "256")
    with pytest.raises(ValueError, match="MC_REDIS_DB_INDEX must be a Redis database number "
                                         "between 0 and 255"):
        _config.te_tuning_from_env()
    monkeypatch.setenv("MC_REDIS_DB_INDEX", "1")
    monkeypatch.setenv("MC_REDIS_USERNAME", "al ice")
    with pytest.raises(ValueError, match="MC_REDIS_USERNAME must be"):
        _config.te_tuning_from_env()
    monkeypatch.setenv("MC_REDIS_USERNAME", "alice")
    monkeypatch.setenv("MC_REDIS_PASSWORD", "pw\nsecret")
    with pytest.raises(ValueError, match="MC_REDIS_PASSWORD must be") as e:
        _config.te_tuning_from_env()
    assert "secret" not in str(e.value)
    monkeypatch.setenv("MC_REDIS_PASSWORD", "p" * 1025)
    with pytest.raises(ValueError, match="value not shown"):
        _config.te_tuning_from_env()


def _free_port():
    from conftest import free_port
    return free_port()


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server with a password on a free loopback port, stopped by pid."""
    import shutil
    import socket
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(exe, os.X_OK):
        pytest.fail("redis-server not installed (scripts/install-deps.sh)")
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path),
                             "--requirepass", "py-s3cret"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False
    try:
        wait_for(up, what="redis-server")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_redis_metadata_two_engines(monkeypatch, redis_server):
    """Two engines exchange descriptors through redis:// metadata with MC_REDIS_PASSWORD."""
    from mooncake import _config
    for name, *_ in _config._TE_ENV:
        monkeypatch.delenv(name, raising=False)
    uri = f"redis://127.0.0.1:{redis_server}"
    monkeypatch.setenv("MC_REDIS_PASSWORD", "wrong")
    assert TransferEngine().initialize("127.0.0.1", uri, "tcp", "") < 0
    monkeypatch.setenv("MC_REDIS_PASSWORD", "py-s3cret")
    a, b = TransferEngine(), TransferEngine()
    assert a.initialize("127.0.0.1", uri, "tcp", "") == 0
    # upstream's spelling: bare host:port with metadata_type "redis"
    assert b.initialize_ext("127.0.0.1", f"127.0.0.1:{redis_server}", "tcp", "", "redis") == 0
    n = 1 << 20
    abuf = pattern(n, 7)
    bbuf = np.zeros(n, dtype=np.uint8)
    assert a.register_memory(abuf.ctypes.data, n) == 0
    assert b.register_memory(bbuf.ctypes.data, n) == 0
    assert b.transfer_sync_read(a.get_local_hostname(), bbuf.ctypes.data, abuf.ctypes.data,
                                n) == 0
    assert sha256(bbuf) == sha256(abuf)
    assert a.unregister_memory(abuf.ctypes.data) == 0
    assert b.unregister_memory(bbuf.ctypes.data) == 0
    a.close()
    b.close()
