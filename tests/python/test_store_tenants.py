"""Tenants through the Python store client: setup(tenant_id=...) (also the dict key and
$MOONCAKE_TENANT_ID) isolates keys, listings and removals; invalid names are refused at setup;
keys starting with byte 0x01 are refused; with a tenant-bound token (MC_AUTH_TOKEN_FILE) the
client acts as the token's tenant and cannot name another, while a cluster-token client can
act for any tenant it names (docs/internals/master.md, "Tenants")."""
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from conftest import Proc, bin_path, wait_for

import mooncake
from mooncake.store import MooncakeDistributedStore

INVALID = mooncake.STATUS_CODES["INVALID_PARAMS"]
INVALID_KEY = mooncake.STATUS_CODES["INVALID_KEY"]
PERMISSION = mooncake.STATUS_CODES["PERMISSION_DENIED"]
NOT_FOUND = mooncake.STATUS_CODES["OBJECT_NOT_FOUND"]

CLUSTER = "py-tenants-cluster-secret-0123"
TENANT_A = "py-tenants-tenant-a-secret-0123"


def k(prefix="k"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def token_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    os.chmod(p, 0o600)
    return str(p)


def start(master_flags=(), env=None):
    """A master (no WAL) and one storage server, both with env (None: ours)."""
    m = Proc([bin_path("mooncake_master"), "--port=0", "--metrics_port=0", "--wal_dir=",
              "--log_level=warn", *master_flags], "mooncake_master listening", env=env)
    m.addr = f"127.0.0.1:{m.field('rpc_port')}"
    m.http = f"http://127.0.0.1:{m.field('metrics_port')}"
    s = Proc([bin_path("mooncake_client"), "--local_hostname=127.0.0.1",
              "--metadata_server=P2PHANDSHAKE", f"--master_server_address={m.addr}",
              "--global_segment_size=64MB", "--protocol=tcp", "--log_level=warn"],
             "mooncake_client ready", env=env)
    return m, s


@pytest.fixture(scope="module")
def cluster():
    m, s = start()
    yield m
    s.stop()
    m.stop()


def client(addr, **kw):
    st = MooncakeDistributedStore()
    rc = st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", addr, **kw)
    return st, rc


def test_tenants_isolate(cluster):
    a, rc = client(cluster.addr, tenant_id="a")
    assert rc == 0
    b, rc = client(cluster.addr, tenant_id="b")
    assert rc == 0
    d, rc = client(cluster.addr)  # the default tenant
    assert rc == 0
    try:
        key = k("same")
        assert a.put(key, b"value of a") == 0
        assert b.put(key, b"value of tenant b") == 0
        assert a.get(key) == b"value of a"  # the same key in two tenants: two objects
        assert b.get(key) == b"value of tenant b"
        assert d.is_exist(key) == 0 and d.get(key) == b""
        only_a = k("only-a")
        assert a.put(only_a, b"x") == 0
        assert b.is_exist(only_a) == 0
        assert b.get_size(only_a) == NOT_FOUND
        assert b.remove(only_a, force=True) == NOT_FOUND
        assert a.is_exist(only_a) == 1
        # removals are per tenant: b's regex and remove_all leave a's keys alone (force: the
        # gets above hold read leases)
        assert b.remove_by_regex("^only-", force=True) == 0
        assert b.remove_all(force=True) == 1
        assert a.get(key) == b"value of a" and a.is_exist(only_a) == 1
        assert a.remove_by_regex("^only-", force=True) == 1
        assert a.remove_all(force=True) == 1
    finally:
        for st in (a, b, d):
            st.close()


def http_get(master, path, **query):
    """(status, body) of an admin GET."""
    url = f"{master.http}{path}?{urllib.parse.urlencode(query)}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_admin_http_per_tenant(cluster):
    """/query_key, /batch_query_keys and /get_all_keys act on "default", or on ?tenant_id=."""
    a, rc = client(cluster.addr, tenant_id="a")
    assert rc == 0
    d, rc = client(cluster.addr)
    assert rc == 0
    try:
        ka, kd = k("http-a"), k("http-d")
        assert a.put(ka, b"a's") == 0 and d.put(kd, b"default's") == 0
        st, body = http_get(cluster, "/get_all_keys")
        assert st == 200 and kd in body.split("\n") and ka not in body and "\x01" not in body
        st, body = http_get(cluster, "/get_all_keys", tenant_id="a")
        assert st == 200 and ka in body.split("\n") and kd not in body
        assert http_get(cluster, "/query_key", key=ka)[0] == 404
        st, body = http_get(cluster, "/query_key", key=ka, tenant_id="a")
        assert st == 200 and f'"key":"{ka}"' in body.replace(" ", "")
        st, body = http_get(cluster, "/batch_query_keys", keys=f"{ka},{kd}", tenant_id="a")
        assert st == 200 and '"ok":true' in body.replace(" ", "") \
            and "OBJECT_NOT_FOUND" in body
        assert http_get(cluster, "/query_key", key="\x01a\x01" + ka)[0] == 400
        assert http_get(cluster, "/get_all_keys", tenant_id="_a")[0] == 400
        assert a.remove(ka, force=True) == 0 and d.remove(kd, force=True) == 0
    finally:
        a.close()
        d.close()


def test_tenant_from_dict_and_env(cluster, monkeypatch):
    key = k("env")
    a, rc = client(cluster.addr, tenant_id="a")
    assert rc == 0
    assert a.put(key, b"from a") == 0
    monkeypatch.setenv("MOONCAKE_TENANT_ID", "a")
    via_env, rc = client(cluster.addr)
    assert rc == 0
    monkeypatch.delenv("MOONCAKE_TENANT_ID")
    via_dict = MooncakeDistributedStore()
    assert via_dict.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                           "global_segment_size": 0, "local_buffer_size": 16 << 20,
                           "protocol": "tcp", "master_server_address": cluster.addr,
                           "tenant_id": "a"}) == 0
    other, rc = client(cluster.addr, tenant_id="c")
    assert rc == 0
    try:
        assert via_env.get(key) == b"from a"
        assert via_dict.get(key) == b"from a"
        assert other.get(key) == b""
        assert a.remove(key, force=True) == 0
    finally:
        for st in (a, via_env, via_dict, other):
            st.close()


@pytest.mark.parametrize("name", ["_sys", "x" * 65, "tab\there", "del\x7f", "nl\n"])
def test_invalid_tenant_refused(cluster, name):
    st, rc = client(cluster.addr, tenant_id=name)
    assert rc == INVALID
    st.close()


def test_longest_tenant_and_reserved_key(cluster):
    st, rc = client(cluster.addr, tenant_id="t" * 64)
    assert rc == 0
    try:
        assert st.put("\x01" + k(), b"x") == INVALID_KEY  # the internal tenant mark
        key = k()
        assert st.put(key, b"long tenant") == 0 and st.get(key) == b"long tenant"
    finally:
        st.close()
    d, rc = client(cluster.addr)
    assert rc == 0
    try:
        assert d.put("\x01t\x01" + k(), b"x") == INVALID_KEY  # cannot forge another's key
    finally:
        d.close()


def test_tenant_token(tmp_path, monkeypatch):
    """A tenant-bound token acts as its tenant; a cluster token acts for the tenant named."""
    srv = token_file(tmp_path, "srv", f"{CLUSTER}\n{TENANT_A} tenant=a\n")
    cl = token_file(tmp_path, "cluster", f"{CLUSTER}\n")  # the cluster's clients
    # The tenant's client holds only its tenant token: it proves it to the master and to the
    # storage server's data port (which proves it back), and reads the storage server's
    # descriptor unchecked, since only cluster tokens sign descriptors.
    ta = token_file(tmp_path, "tenant-a", f"{TENANT_A} tenant=a\n")
    # the storage server proves the cluster token (its file's first line) to the master and
    # accepts both on its data port, where the tenant's client writes
    env = dict(os.environ, MC_AUTH_TOKEN_FILE=srv)
    m, s = start([f"--auth_token_file={srv}"], env=env)
    try:
        monkeypatch.setenv("MC_AUTH_TOKEN_FILE", ta)
        bad, rc = client(m.addr, tenant_id="b")
        assert rc == PERMISSION  # the token is bound to a
        bad.close()
        ca, rc = client(m.addr)  # unnamed: the token's tenant
        assert rc == 0
        monkeypatch.setenv("MC_AUTH_TOKEN_FILE", cl)
        admin_a, rc = client(m.addr, tenant_id="a")
        assert rc == 0
        admin, rc = client(m.addr)
        assert rc == 0
        try:
            key = k("tok")
            assert ca.put(key, b"tenant a's") == 0
            assert admin_a.get(key) == b"tenant a's"
            assert admin.is_exist(key) == 0
            assert admin.put(key, b"default's") == 0
            assert ca.get(key) == b"tenant a's"
            assert ca.remove_all(force=True) == 1
            assert admin.get(key) == b"default's"
            # the admin HTTP port sees every tenant: cluster tokens only
            url = f"{m.http}/get_all_keys?tenant_id=a"
            r = subprocess.run([bin_path("mooncake_auth_curl"), f"--auth_token_file={cl}", url],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            r = subprocess.run([bin_path("mooncake_auth_curl"), f"--auth_token_file={ta}", url],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 22 and "403" in r.stderr, (r.returncode, r.stderr)
        finally:
            for st in (ca, admin_a, admin):
                st.close()
    finally:
        s.stop()
        m.stop()


# ---- quotas (strict multi-tenant mode) ---------------------------------------------------

QUOTA_EXCEEDED = mooncake.STATUS_CODES["TENANT_QUOTA_EXCEEDED"]
NOT_REGISTERED = mooncake.STATUS_CODES["TENANT_NOT_REGISTERED"]


def http(master, method, path, body=None, **query):
    """(status, body) of an admin request."""
    url = f"{master.http}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    req = urllib.request.Request(url, data=body.encode() if body else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_quotas(tmp_path):
    import json
    policy = tmp_path / "tenant_quotas.yaml"
    policy.write_text("version: 1\ntenants:\n  - name: a\n    quota: 100KB\n")
    m, s = start(["--enable_multi_tenants=true", "--tenant_quota_connector_type=file",
                  f"--tenant_quota_connector_uri={policy}"])
    a = b = None
    try:
        a, rc = client(m.addr, tenant_id="a")
        assert rc == 0
        b, rc = client(m.addr, tenant_id="b")
        assert rc == 0
        v = b"x" * (40 << 10)
        assert a.put("a1", v) == 0 and a.put("a2", v) == 0
        assert a.put("a3", v) == 0                    # over 100 KiB: a1, the oldest, evicted
        assert a.is_exist("a1") == 0 and a.is_exist("a3") == 1
        assert a.put("big", b"y" * (101 << 10)) == QUOTA_EXCEEDED
        assert b.put("b1", v) == NOT_REGISTERED       # no policy for b
        st, body = http(m, "GET", "/api/v1/tenant_quotas", tenant_id="a")
        snap = json.loads(body)["data"]
        assert st == 200 and snap["requested_quota_bytes"] == 100 << 10
        assert snap["charged_bytes"] == 80 << 10 and snap["quota_reject_total"] == 1
        # /metrics shows what the master's cron last published
        wait_for(lambda: 'mooncake_tenant_quota_reject_total{tenant_id="a",'
                         'reason="quota_exceeded"} 1' in http(m, "GET", "/metrics")[1],
                 5, what="the reject in /metrics")
        assert f'mooncake_tenant_quota_charged_bytes{{tenant_id="a"}} {80 << 10}' \
            in http(m, "GET", "/metrics")[1]
        # register b through the admin API: the policy file follows
        assert http(m, "PUT", "/api/v1/tenant_quotas", '{"requested_quota_bytes":1048576}',
                    tenant_id="b")[0] == 200
        assert "name: \"b\"" in policy.read_text() and "quota: 1048576" in policy.read_text()
        assert b.put("b1", v) == 0
        st, body = http(m, "GET", "/api/v1/tenant_quotas")
        assert st == 200 and [t["tenant_id"] for t in json.loads(body)["data"]] == ["a", "b"]
        assert http(m, "DELETE", "/api/v1/tenant_quotas", tenant_id="b")[0] == 409  # not empty
        assert b.remove_all(force=True) == 1
        assert http(m, "DELETE", "/api/v1/tenant_quotas", tenant_id="b")[0] == 200
        assert "name: \"b\"" not in policy.read_text()
        assert b.put("b2", v) == NOT_REGISTERED
        assert http(m, "GET", "/api/v1/tenant_quotas", tenant_id="b")[0] == 404
        for bad in ('{"requested_quota_bytes":0}', '{"quota":5}', "not json",
                    '{"requested_quota_bytes":1,"x":2}'):
            assert http(m, "PUT", "/api/v1/tenant_quotas", bad, tenant_id="b")[0] == 400, bad
        assert http(m, "PUT", "/api/v1/tenant_quotas", '{"requested_quota_bytes":1}')[0] == 400
        assert http(m, "PUT", "/api/v1/tenant_quotas", '{"requested_quota_bytes":1}',
                    tenant_id="_b")[0] == 400
        assert http(m, "PUT", "/api/v1/tenant_quotas", "x" * 5000, tenant_id="b")[0] == 413
        assert http(m, "POST", "/api/v1/tenant_quotas", "{}", tenant_id="b")[0] == 405
    finally:
        for st in (a, b):
            if st:
                st.close()
        s.stop()
        m.stop()
    # the policy written by the API is what a restarted master loads
    m, s = start(["--enable_multi_tenants=true", "--tenant_quota_connector_type=file",
                  f"--tenant_quota_connector_uri={policy}"])
    try:
        st, body = http(m, "GET", "/api/v1/tenant_quotas")
        assert [t["tenant_id"] for t in json.loads(body)["data"]] == ["a"]
    finally:
        s.stop()
        m.stop()


def test_quota_api_needs_strict_mode(cluster):
    assert http(cluster, "GET", "/api/v1/tenant_quotas")[0] == 409


@pytest.mark.parametrize("flags,message", [
    (["--tenant_quota_connector_type=redis", "--enable_multi_tenants=true",
      "--tenant_quota_connector_uri=127.0.0.1:6379"], "redis"),
    (["--tenant_quota_connector_type=file", "--tenant_quota_connector_uri=/x"],
     "--enable_multi_tenants"),
    (["--enable_multi_tenants=true", "--tenant_quota_connector_type=file"], "connector_uri"),
])
def test_quota_flags_refused(flags, message):
    r = subprocess.run([bin_path("mooncake_master"), "--port=0", "--metrics_port=-1",
                        "--wal_dir=", *flags], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message in r.stderr, (r.returncode, r.stderr)


def test_bad_policy_file_stops_the_master(tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\ntenants:\n  - name: a\n    quota: lots\n")
    r = subprocess.run([bin_path("mooncake_master"), "--port=0", "--metrics_port=-1",
                        "--wal_dir=", "--enable_multi_tenants=true",
                        "--tenant_quota_connector_type=file",
                        f"--tenant_quota_connector_uri={policy}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "line 4" in r.stderr, (r.returncode, r.stderr)


def test_quota_api_signed(tmp_path):
    """With a token file, the quota API is signed like every admin request (the PUT body
    included), and refused to tenant tokens."""
    srv = token_file(tmp_path, "srv", f"{CLUSTER}\n{TENANT_A} tenant=a\n")
    ta = token_file(tmp_path, "ta", f"{TENANT_A} tenant=a\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\ntenants: []\n")
    m = Proc([bin_path("mooncake_master"), "--port=0", "--metrics_port=0", "--wal_dir=",
              "--log_level=warn", f"--auth_token_file={srv}", "--enable_multi_tenants=true",
              "--tenant_quota_connector_type=file", f"--tenant_quota_connector_uri={policy}"],
             "mooncake_master listening")
    m.http = f"http://127.0.0.1:{m.field('metrics_port')}"
    url = f"{m.http}/api/v1/tenant_quotas?tenant_id=a"

    def curl(token, *args):
        return subprocess.run([bin_path("mooncake_auth_curl"), f"--auth_token_file={token}",
                               *args, url], capture_output=True, text=True, timeout=30)
    try:
        assert http(m, "PUT", "/api/v1/tenant_quotas", '{"requested_quota_bytes":5}',
                    tenant_id="a")[0] == 401  # unsigned
        r = curl(srv, "-X", "PUT", "-d", '{"requested_quota_bytes":4096}')
        assert r.returncode == 0, r.stderr
        assert '"requested_quota_bytes":4096' in r.stdout
        r = curl(ta, "-X", "PUT", "-d", '{"requested_quota_bytes":1099511627776}')
        assert r.returncode == 22 and "403" in r.stderr, (r.returncode, r.stderr)
        assert "quota: 4096" in policy.read_text()
    finally:
        m.stop()
