"""docs/compatibility.md is true: every row's status matches the package, the programs' --help,
a live master's /metrics and the sources that read environment variables.

The document is the one list of upstream's surface; this test only reads it."""
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import urllib.request

import pytest

import mooncake.engine as me
import mooncake.store as ms
from conftest import Proc, bin_path

SRC = os.environ.get("MC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
DOC = os.path.join(SRC, "docs", "compatibility.md")
STATUSES = {"same", "extended", "refused", "not yet"}
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([a-z ]+?)\s*\|")


def _tables():
    """{section heading: [(name, status), ...]} for every table row whose first cell is code."""
    out, section = {}, None
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                section = line[3:].strip()
                out[section] = []
            m = ROW.match(line)
            if m and section:
                out[section].append((m.group(1), m.group(2)))
    return out


TABLES = _tables()


def rows(section):
    assert section in TABLES, f"docs/compatibility.md has no section '{section}'"
    assert TABLES[section], f"section '{section}' has no rows"
    return TABLES[section]


def present(status):
    return status != "not yet"


def test_every_row_has_a_known_status_and_no_duplicates():
    for section, entries in TABLES.items():
        names = [n for n, _ in entries]
        assert len(names) == len(set(names)), f"{section}: duplicate rows"
        for name, status in entries:
            assert status in STATUSES, f"{section}: `{name}` has status '{status}'"


@pytest.mark.parametrize("section,owner", [
    ("mooncake.store.MooncakeDistributedStore", ms.MooncakeDistributedStore),
    ("mooncake.engine.TransferEngine", me.TransferEngine),
])
def test_methods(section, owner):
    wrong = [(n, s) for n, s in rows(section)
             if present(s) != callable(getattr(owner, n, None))]
    assert wrong == [], f"{section}: rows whose status does not match the class: {wrong}"


@pytest.mark.parametrize("section,module", [
    ("mooncake.store module names", ms),
    ("mooncake.engine module names", me),
])
def test_module_names(section, module):
    wrong = [(n, s) for n, s in rows(section) if present(s) != hasattr(module, n)]
    assert wrong == [], f"{section}: rows whose status does not match the module: {wrong}"


def test_package_modules():
    """A present module imports; a `not yet` one is absent."""
    wrong = []
    for name, status in rows("Python package modules"):
        if present(status):
            try:
                importlib.import_module(name)
            except Exception as e:  # any failure to import makes the row untrue
                wrong.append((name, status, repr(e)))
        elif importlib.util.find_spec(name) is not None:
            wrong.append((name, status, "importable"))
    assert wrong == [], f"Python package modules: rows that do not hold: {wrong}"


def test_replicate_config_attributes():
    cfg = ms.ReplicateConfig()
    wrong = [(n, s) for n, s in rows("mooncake.store.ReplicateConfig")
             if present(s) != hasattr(cfg, n)]
    assert wrong == [], wrong


def _help(program):
    out = subprocess.run([bin_path(program), "--help"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, f"{program} --help exited {out.returncode}: {out.stderr}"
    return set(re.findall(r"^\s+(--[a-z_]+)", out.stdout, re.M))


def test_program_flags():
    helps, wrong = {}, []
    for name, status in rows("Programs and flags"):
        program, flag = name.split()
        if program not in helps:
            helps[program] = _help(program)
        if present(status) != (flag in helps[program]):
            wrong.append((name, status))
    assert wrong == [], f"flags whose status does not match --help: {wrong}"


def test_rest_server_flags():
    out = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    flags = set(re.findall(r"(--[a-z][a-z_-]*)", out.stdout))
    wrong = [(n, s) for n, s in rows("mc_store_rest_server") if present(s) != (n in flags)]
    assert wrong == [], f"flags whose status does not match --help: {wrong}"


def test_master_metrics(tmp_path):
    # strict multi-tenant mode with one tenant, so that the per-tenant series exist
    policy = tmp_path / "tenant_quotas.yaml"
    policy.write_text("version: 1\ntenants:\n  - name: t\n    quota: 1GB\n")
    m = Proc([bin_path("mooncake_master"), "--port=0", "--metrics_port=0", "--wal_dir=",
              "--log_level=warn", "--enable_multi_tenants=true",
              "--tenant_quota_connector_type=file", f"--tenant_quota_connector_uri={policy}"],
             "mooncake_master listening")
    try:
        port = m.field("metrics_port")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        m.stop()
    series = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", text, re.M))
    wrong = [(n, s) for n, s in rows("Master metrics")
             if present(s) != (n in series or n + "_count" in series)]
    assert wrong == [], f"metrics whose status does not match /metrics: {wrong}"


def _sources_reading_env():
    text = []
    # the programs and the package; and a storage server's disk settings (store setup and the
    # disk engine's parser, docs/internals/disk-tier.md)
    roots = [os.path.join(SRC, "tools"), os.path.join(SRC, "python", "mooncake"),
             os.path.join(SRC, "src", "client"), os.path.join(SRC, "src", "disk")]
    for root in roots:
        for d, _, files in os.walk(root):
            for f in files:
                if f.endswith((".c", ".py")):
                    with open(os.path.join(d, f), encoding="utf-8") as fh:
                        text.append(fh.read())
    return "\n".join(text)


def test_environment_variables():
    src = _sources_reading_env()
    wrong = [(n, s) for n, s in rows("Environment variables")
             if present(s) != (f'"{n}"' in src)]
    assert wrong == [], f"variables whose status does not match the sources: {wrong}"


def test_nof_allocator_addresses_behave_as_upstream_without_nvmeof():
    """get_alloc_func_addr / get_free_func_addr point at callable C functions: alloc gives
    NULL for every size (no NVMe-oF memory), free accepts anything."""
    import ctypes
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(ms.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ms.get_free_func_addr())
    assert ms.get_alloc_func_addr() != ms.get_free_func_addr() != 0
    for size in (0, 4096, 1 << 30):
        assert alloc(size) is None
    free(None)
    free(0x1000)


def test_query_task_response_fields():
    r = ms.QueryTaskResponse()
    assert r.id == (0, 0) and r.status == ms.TaskStatus.PENDING and r.message == ""
    with pytest.raises(AttributeError):
        r.message = "x"
    assert repr(r).startswith("QueryTaskResponse(id=(0, 0), type=0, status=0")
