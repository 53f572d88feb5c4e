"""Console scripts of the installed package (python/mooncake/cli.py, pyproject.toml).

The package is installed once per session with pip into a temporary directory, from a copy of
python/ (so pip's build/ and *.egg-info land in the copy, never in the source tree), reusing the
ctest build (MOONCAKE_BUILD_DIR, the parent of MC_BIN_DIR). The scripts then run from that
directory's bin/ with PYTHONPATH pointing at it, as a user's would after `pip install`:

* every script answers --help with exit 0 and lists upstream's flags;
* exit statuses and messages pass through (a refused flag gives the program's 2);
* mooncake_master from its script listens on the ports given, and is the C program itself
  (exec, same PID); mooncake_client with upstream's flags joins it and stays up;
* transfer_engine_bench target + initiator over tcp on loopback print upstream's result line
  (write with --verify, read), also through an HTTP metadata server started by
  mooncake_http_metadata_server with upstream's flags;
* mooncake.http_metadata_server.KVBootstrapServer starts, serves, reports and stops a server.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import LineReader, free_port, wait_for

SCRIPTS = ("mooncake_master", "mooncake_client", "transfer_engine_bench",
           "mooncake_http_metadata_server")

RESULT = re.compile(r"^Test completed: duration (\d+\.\d\d), batch count (\d+), "
                    r"throughput (\d+\.\d+) (\w+)/s$", re.M)


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """(bin directory, environment) of the package pip-installed into a temporary dir."""
    src_dir = os.path.join(os.environ["MC_SOURCE_DIR"], "python")
    build_dir = os.path.dirname(os.path.abspath(os.environ["MC_BIN_DIR"]))
    root = tmp_path_factory.mktemp("cli")
    src = root / "src"
    shutil.copytree(src_dir, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "*.so", "bin"))
    target = root / "site"
    env = dict(os.environ, MOONCAKE_BUILD_DIR=build_dir, PIP_NO_INPUT="1")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
         "--no-index", "--no-cache-dir", "--disable-pip-version-check",
         "--root-user-action=ignore", "--target", str(target), "."],
        cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"pip install failed:\n{r.stdout}\n{r.stderr}"
    bindir = target / "bin"
    run_env = dict(os.environ, PYTHONPATH=str(target),
                   PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                   MC_LOG_LEVEL="warn")
    return str(bindir), str(target), run_env


class Procs:
    """Processes a test started, stopped by PID at the end."""

    def __init__(self):
        self.procs = []

    def start(self, args, env, **kw):
        p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, **kw)
        p.lines = LineReader(p.stdout)  # for read_line
        self.procs.append(p)
        return p

    def stop(self, p, timeout=10):
        """SIGTERM, wait; returns (exit status, stdout, stderr)."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=timeout)
        return p.returncode, p.lines.buf.decode(errors="replace") + out, err

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


@pytest.fixture
def procs():
    ps = Procs()
    yield ps
    ps.stop_all()


def run(args, env, timeout=60):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def read_line(p, pattern, timeout=20.0):
    """The first stdout line of p matching pattern (a regex); fails if p exits first."""
    rx = re.compile(pattern)
    line = p.lines.wait_for(rx.search, timeout)
    if line:
        return rx.search(line)
    p.kill()
    out, err = p.communicate()
    pytest.fail(f"no line matching {pattern!r} from {p.args[0]}; stdout:\n{out}\nstderr:\n{err}")


def test_scripts_installed(installed):
    bindir, target, env = installed
    for name in SCRIPTS:
        found = shutil.which(name, path=env["PATH"])
        assert found == os.path.join(bindir, name), f"{name}: which found {found}"
        program = os.path.join(target, "mooncake", "bin", name)
        assert os.access(program, os.X_OK), f"{program} missing or not executable"


HELP_FLAGS = {
    "mooncake_master": ["--port", "--metrics_port"],
    "mooncake_client": ["--master_server_address", "--host", "--port", "--device_names",
                        "--local_buffer_size", "--threads", "--tenant_id", "--enable_offload",
                        "--start_offload_rpc_server", "--enable_http_server", "--http_port",
                        "--global_segment_size", "--metadata_server", "--protocol"],
    "transfer_engine_bench": ["--mode", "--operation", "--metadata_server",
                              "--local_server_name", "--segment_id", "--protocol",
                              "--device_name", "--buffer_size", "--batch_size", "--block_size",
                              "--duration", "--threads", "--report_unit", "--auto_discovery"],
    "mooncake_http_metadata_server": ["--port", "--host", "--log-level"],
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(installed, name):
    _, _, env = installed
    r = run([name, "--help"], env)
    assert r.returncode == 0, r.stderr
    missing = [f for f in HELP_FLAGS[name] if f not in r.stdout]
    assert not missing, f"{name} --help lacks {missing}:\n{r.stdout}"


def test_topology_dump(installed):
    """transfer_engine_topology_dump (a Python console script) prints the engine's view of
    this host as JSON: one entry per NUMA node in /sys, in both shapes."""
    bindir, _, env = installed
    assert shutil.which("transfer_engine_topology_dump", path=env["PATH"]) == \
        os.path.join(bindir, "transfer_engine_topology_dump")
    nodes = sorted(d for d in os.listdir("/sys/devices/system/node")
                   if d.startswith("node") and d[4:].isdigit())
    r = run(["transfer_engine_topology_dump"], env)
    assert r.returncode == 0, r.stderr
    classic = json.loads(r.stdout)
    assert sorted(classic) == sorted(f"cpu:{d[4:]}" for d in nodes)
    r = run(["transfer_engine_topology_dump", "--native"], env)
    assert r.returncode == 0, r.stderr
    native = json.loads(r.stdout)
    assert len(native["mems"]) == len(nodes)
    assert r.stdout.count("\n") > 3  # indented, for people


def test_rest_server_script(installed):
    """mc_store_rest_server (a Python console script, upstream's
    mooncake.mooncake_store_service:sync_main) is installed and takes upstream's flags."""
    bindir, _, env = installed
    assert shutil.which("mc_store_rest_server", path=env["PATH"]) == \
        os.path.join(bindir, "mc_store_rest_server")
    r = run(["mc_store_rest_server", "--help"], env)
    assert r.returncode == 0, r.stderr
    for flag in ("--config", "--define", "--port", "--max-wait-time", "--host"):
        assert flag in r.stdout, r.stdout
    env = {k: v for k, v in env.items() if k not in ("MOONCAKE_MASTER", "MOONCAKE_CONFIG_PATH")}
    r = run(["mc_store_rest_server", "--port=0"], env)
    assert r.returncode == 1 and "MOONCAKE_MASTER" in r.stderr, r.stderr


@pytest.mark.parametrize("args,message", [
    (["mooncake_client", "--tenant_id=_team1"], "tenant_id"),
    (["mooncake_client", "--enable_offload=true", "--start_offload_rpc_server=false"],
     "offload"),
    (["mooncake_client", "--http_port=70000"], "http_port"),
    (["mooncake_client", "--port=70000"], "--port"),
    (["transfer_engine_bench", "--protocol=rdma"], "rdma"),
    (["transfer_engine_bench", "--mode=initiator"], "--segment_id"),
    (["transfer_engine_bench", "--report_unit=TB"], "report_unit"),
    (["transfer_engine_bench", "--no_such_flag=1"], "no_such_flag"),
    (["mooncake_http_metadata_server", "--log-level=LOUD"], "log-level"),
    (["mooncake_master", "--port=-1"], "port"),
])
def test_refusals_pass_through(installed, args, message):
    _, _, env = installed
    r = run(args, env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr


def test_master_and_client(installed, procs):
    _, target, env = installed
    port, metrics = free_port(), free_port()
    master = procs.start(["mooncake_master", f"--port={port}", f"--metrics_port={metrics}"], env)
    wait_for(lambda: listening(port) or master.poll() is not None, 20, what="master port")
    assert master.poll() is None, master.communicate()
    wait_for(lambda: listening(metrics), 10, what="master metrics port")
    # exec: the script's process is the program itself
    exe = os.readlink(f"/proc/{master.pid}/exe")
    assert exe == os.path.join(target, "mooncake", "bin", "mooncake_master"), exe

    dummy_port = free_port()
    client = procs.start(["mooncake_client", f"--master_server_address=127.0.0.1:{port}",
                          f"--port={dummy_port}", "--host=127.0.0.1",
                          "--global_segment_size=16MB", "--device_names=", "--threads=1",
                          "--tenant_id=default"], env)
    m = read_line(client, r"mooncake_client ready segment=(\S+)")
    assert m.group(1).startswith("127.0.0.1:")
    time.sleep(0.5)
    assert client.poll() is None, "mooncake_client did not stay up"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # --port: dummies connect here
        s.connect(f"\0mooncake_client_{dummy_port}.sock")
    rc, _, err = procs.stop(client)
    assert rc == 0, err
    rc, _, err = procs.stop(master)
    assert rc == 0, err


def bench_pair(procs, env, metadata, extra_target=()):
    """A transfer_engine_bench target on loopback: (process, its segment name)."""
    target = procs.start(["transfer_engine_bench", "--mode=target", f"--metadata_server={metadata}",
                          "--local_server_name=127.0.0.1", "--protocol=tcp", "--buffer_size=4MB",
                          "--threads=2", "--batch_size=8", "--block_size=64KB",
                          *extra_target], env)
    m = read_line(target, r"transfer_engine_bench ready segment=(\S+) buffer_size=(\d+)")
    assert int(m.group(2)) == 4 << 20
    return target, m.group(1)


def initiator(env, metadata, segment, *args):
    r = run(["transfer_engine_bench", "--mode=initiator", f"--metadata_server={metadata}",
             "--local_server_name=127.0.0.1", f"--segment_id={segment}", "--protocol=tcp",
             "--buffer_size=4MB", "--threads=2", "--batch_size=8", "--block_size=65536",
             "--duration=1", *args], env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    m = RESULT.search(r.stdout)
    assert m, r.stdout
    duration, batches, rate, unit = float(m.group(1)), int(m.group(2)), float(m.group(3)), m.group(4)
    assert 0.9 <= duration < 5, r.stdout
    assert batches > 0 and rate > 0, r.stdout
    return r, unit, batches, duration, rate


def test_bench_p2p(installed, procs):
    _, _, env = installed
    target, seg = bench_pair(procs, env, "P2PHANDSHAKE")
    r, unit, batches, duration, rate = initiator(env, "P2PHANDSHAKE", seg, "--operation=write",
                                                 "--report_unit=MB", "--verify")
    assert unit == "MB"
    # the rate is what the batch count says
    want = batches * 8 * 65536 / duration / 1e6
    assert abs(rate - want) <= 0.02 * want + 0.01, (rate, want)
    assert re.search(r"^Verify: 1048576 bytes .* ok$", r.stdout, re.M), r.stdout
    _, unit, _, _, _ = initiator(env, "P2PHANDSHAKE", seg, "--operation=read")
    assert unit == "GB"  # upstream's default
    rc, _, err = procs.stop(target)
    assert rc == 0, err


def test_bench_through_http_metadata_server(installed, procs):
    _, _, env = installed
    port = free_port()
    meta = procs.start(["mooncake_http_metadata_server", f"--port={port}", "--host=127.0.0.1",
                        "--log-level", "WARNING"], env)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: listening(port) or meta.poll() is not None, 20, what="metadata port")
    assert meta.poll() is None, meta.communicate()
    with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
        assert resp.status == 200
    target, seg = bench_pair(procs, env, f"{url}/metadata")
    # the target published its segment there
    with urllib.request.urlopen(f"{url}/metadata?key=mooncake/ram/{seg}", timeout=5) as resp:
        assert resp.status == 200 and json.loads(resp.read())
    initiator(env, f"{url}/metadata", seg, "--operation=read", "--report_unit=GiB")
    for p in (target, meta):
        rc, _, err = procs.stop(p)
        assert rc == 0, err


KV_SNIPPET = r"""
import json, socket, urllib.request
from mooncake.http_metadata_server import KVBootstrapServer, KVPoll
s = KVBootstrapServer(port=0, host="127.0.0.1")
t = s.run()
assert t.is_alive() and s.poll() == KVPoll.Success and s.port > 0
url = f"http://127.0.0.1:{s.port}/metadata?key=k1"
req = urllib.request.Request(url, data=b'{"a": 1}', method="PUT")
assert urllib.request.urlopen(req, timeout=5).status == 200
assert urllib.request.urlopen(url, timeout=5).read() == b'{"a": 1}'
busy = KVBootstrapServer(port=s.port, host="127.0.0.1")
try:
    busy.run()
    raise SystemExit("a second server on the same port started")
except OSError as e:
    bind_error = str(e)
assert busy.poll() == KVPoll.Failed
s.close()
assert s.poll() == KVPoll.Failed and not t.is_alive()
print(json.dumps({"ok": True, "bind_error": bind_error}))
"""


def test_kv_bootstrap_server(installed):
    _, _, env = installed
    r = run([sys.executable, "-c", KV_SNIPPET], env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] and "did not start" in out["bind_error"]
