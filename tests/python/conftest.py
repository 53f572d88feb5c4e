"""Shared fixtures of the Python binding tests.

The package is imported from the build tree (ctest sets PYTHONPATH=<build>/python and
MC_BIN_DIR=<build>/bin). Helper processes are started here and stopped by PID.
"""
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "lib"))
from free_port import free_port  # noqa: E402  (re-exported for the tests)


def auth_handshake(sock):
    """Client half of the cluster handshake (src/common/auth.h) without a token, on a raw
    stream socket to a Mooncake-C port: every port greets with a 48-byte HELLO, takes a
    72-byte PROOF (here with no proof: flags 0, zero mac) and answers a 48-byte RESULT.
    Asserts the server let us in (it has no token file)."""
    import struct

    def recv_exact(n):
        b = b""
        while len(b) < n:
            c = sock.recv(n - len(b))
            assert c, "connection closed during the handshake"
            b += c
        return b

    hello = recv_exact(48)
    magic, version, flags = struct.unpack_from("<IHH", hello)
    assert (magic, version) == (0x5541434D, 1), hello[:8]
    assert flags & 1 == 0, "the server requires a cluster token"
    sock.sendall(struct.pack("<IHH", magic, version, 0) + os.urandom(32) + bytes(32))
    result = recv_exact(48)
    assert struct.unpack_from("<i", result, 8)[0] == 0, result


class LineReader:
    """Lines of a child's pipe, each wait bounded. It reads the descriptor itself: a buffered
    file's readline() may pull several lines into the file's buffer, and a select() on the
    descriptor then waits for bytes that never come while the wanted line sits in that
    buffer. Once a LineReader reads a pipe, nothing else may read it."""

    def __init__(self, stream):
        self.fd = stream.fileno()
        self.buf = b""
        self.eof = False

    def readline(self, timeout):
        """The next line (str, newline kept); "" at end of file; None after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            i = self.buf.find(b"\n")
            if i >= 0 or (self.eof and self.buf):
                n = i + 1 if i >= 0 else len(self.buf)
                line, self.buf = self.buf[:n], self.buf[n:]
                return line.decode(errors="replace")
            if self.eof:
                return ""
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            self.eof = not chunk
            self.buf += chunk

    def rest(self, timeout=10.0):
        """What is left until end of file (or timeout seconds), as one str."""
        deadline = time.monotonic() + timeout
        out = []
        while (line := self.readline(max(0.0, deadline - time.monotonic()))):
            out.append(line)
        return "".join(out)

    def wait_for(self, match, timeout):
        """Reads lines until match(line) is truthy and returns the line; "" when the pipe ends
        first, None when timeout seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(max(0.0, deadline - time.monotonic()))
            if not line or match(line):
                return line


def wait_for(cond, timeout=10.0, interval=0.01, what="condition"):
    """Poll cond() until it is truthy; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class TePeer:
    """A te_peer.py process: a Transfer Engine owning one registered buffer."""

    def __init__(self, size=8 << 20, protocol="tcp"):
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "te_peer.py"), str(size), protocol],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.out = LineReader(self.proc.stdout)
        line = self._readline(20.0)
        info = json.loads(line)
        if "error" in info:
            self.stop()
            raise RuntimeError(f"te_peer failed to start: {info['error']}")
        self.name = info["name"]
        self.addr = info["addr"]
        self.len = info["len"]
        self.port = info["port"]

    def _readline(self, timeout):
        line = self.out.readline(timeout)
        if line is None:
            raise TimeoutError("te_peer did not answer")
        if not line:
            raise RuntimeError(f"te_peer exited (rc={self.proc.poll()})")
        return line.strip()

    def cmd(self, line, timeout=20.0):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._readline(timeout)

    def fill(self, off, length, seed):
        assert self.cmd(f"fill {off} {length} {seed}") == "ok"

    def sha(self, off, length):
        return self.cmd(f"sha {off} {length}")

    def alive(self):
        return self.proc.poll() is None and self.cmd("ping") == "pong"

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                pass
        if self.proc.poll() is None:
            os.kill(self.proc.pid, 9)
            self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass


def sigstop(pid, timeout=10.0):
    """kill -STOP pid and wait until every thread of it is stopped: delivery is asynchronous,
    and a thread still running could answer one more request."""
    os.kill(pid, signal.SIGSTOP)

    def stopped():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
            for tid in tids:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                        return False
            return bool(tids)
        except FileNotFoundError:
            return False
    wait_for(stopped, timeout=timeout, what=f"process {pid} to stop")


def sha256(b):
    return hashlib.sha256(bytes(b)).hexdigest()


@pytest.fixture(scope="module")
def peer():
    p = TePeer()
    yield p
    p.stop()


# ---- store: master and storage-server processes ------------------------------------------

def bin_path(name):
    d = os.environ.get("MC_BIN_DIR")
    if not d:
        pytest.fail("MC_BIN_DIR is not set (run through ctest, or export MC_BIN_DIR=<build>/bin)")
    p = os.path.join(d, name)
    if not os.access(p, os.X_OK):
        pytest.fail(f"{p} is missing: build the '{name}' target")
    return p


class Proc:
    """A helper program started for a test; waits for its ready line, stopped by PID."""

    def __init__(self, argv, ready_prefix, timeout=20.0, env=None):
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env or dict(os.environ))
        self.out = LineReader(self.proc.stdout)
        self.err = LineReader(self.proc.stderr)
        self.ready_line = self._wait_line(ready_prefix, timeout)

    def _wait_line(self, prefix, timeout):
        line = self.out.wait_for(lambda ln: ln.startswith(prefix), timeout)
        if line:
            return line.strip()
        if line is None:
            self.stop()
            pytest.fail(f"{self.argv[0]} did not print {prefix!r} within {timeout}s")
        err = self.err.rest()[-2000:]
        self.stop()
        pytest.fail(f"{self.argv[0]} exited (rc={self.proc.poll()}): {err}")

    def wait_stderr(self, text, timeout):
        """Reads stderr until a line contains text (or one of a tuple of texts) and returns
        it; fails the test after timeout seconds."""
        texts = text if isinstance(text, tuple) else (text,)
        line = self.err.wait_for(lambda ln: any(t in ln for t in texts), timeout)
        if not line:
            pytest.fail(f"{self.argv[0]} did not log {text!r} within {timeout}s")
        return line

    def field(self, name):
        for tok in self.ready_line.split():
            if tok.startswith(name + "="):
                return tok.split("=", 1)[1]
        raise KeyError(name)

    def kill(self):
        """SIGKILL (simulated crash)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, 9)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, 9)
                self.proc.wait(timeout=10)
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass


def start_master(lease_ttl_ms=None, client_ttl=3, port=0, extra=()):
    """A master without a write-ahead log on port (0: a free one); extra: more flags."""
    if lease_ttl_ms is None:
        lease_ttl_ms = int(os.environ.get("DEFAULT_KV_LEASE_TTL", "1000"))
    m = Proc([bin_path("mooncake_master"), f"--port={port}", "--metrics_port=-1", "--wal_dir=",
              f"--default_kv_lease_ttl={lease_ttl_ms}", f"--client_ttl={client_ttl}",
              "--log_level=warn", *extra], "mooncake_master listening")
    m.addr = f"127.0.0.1:{m.field('rpc_port')}"
    return m


def start_storage(master_addr, size="64MB"):
    s = Proc([bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
              "--metadata_server=P2PHANDSHAKE", f"--master_server_address={master_addr}",
              f"--global_segment_size={size}", "--protocol=tcp", "--log_level=warn"],
             "mooncake_client ready")
    s.segment = s.field("segment")
    return s


@pytest.fixture(scope="module")
def master():
    m = start_master()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def storage(master):
    s = start_storage(master.addr)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def store(master, storage):
    from mooncake.store import MooncakeDistributedStore
    st = MooncakeDistributedStore()
    rc = st.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "", master.addr)
    assert rc == 0, f"setup failed: {rc}"
    yield st
    st.close()


class GilProbe:
    """Proves that a C call releases the GIL, without relying on scheduling luck.

    A Python thread accepts one connection on a local port, notes the time and closes it. Point
    the call at `addr` (a peer or master address only this probe listens on): the library
    connects while the call is in progress. If the GIL is free, the thread runs at once, closes
    the connection and the call usually fails fast. If the GIL were held, the thread could run
    only after the call returned, and nobody would answer, so the call would last until the
    library's own deadline. released() is true when the call ended far below that deadline or
    the thread ran early in a long call.
    """

    def __init__(self):
        import socket
        import threading
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.addr = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.in_call = False
        self.seen = None
        self.seen_at = None
        self.t0 = None
        self.duration = None
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        try:
            c, _ = self.srv.accept()
        except OSError:
            return
        self.seen_at = time.monotonic()
        self.seen = self.in_call
        c.close()

    def call(self, fn, *args):
        self.in_call = True
        self.t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.duration = time.monotonic() - self.t0
            self.in_call = False

    def released(self, deadline):
        """True if the call demonstrably let the probe thread run (deadline: the library's)."""
        if self.seen_at is None:
            return False
        if self.duration < deadline / 2:
            return True
        return self.seen_at - self.t0 < self.duration / 2

    def close(self):
        self.thread.join(10)
        self.srv.close()
