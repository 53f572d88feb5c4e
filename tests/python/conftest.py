"""Shared fixtures of the Python binding tests.

The package is imported from the build tree (ctest sets PYTHONPATH=<build>/python and
MC_BIN_DIR=<build>/bin). Helper processes are started here and stopped by PID.
"""
import hashlib
import json
import os
import select
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


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
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("te_peer did not answer")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                line = fd.readline()
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


def sha256(b):
    return hashlib.sha256(bytes(b)).hexdigest()


@pytest.fixture(scope="module")
def peer():
    p = TePeer()
    yield p
    p.stop()
