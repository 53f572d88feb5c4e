"""Client metrics and the client HTTP server through the Python package and mooncake_client:
setup(enable_client_http_server=True, client_http_port=0) serves /metrics, /health and
/metrics/summary; the dict form's keys; MC_STORE_CLIENT_METRIC=0 turns the metrics off;
mooncake_client --enable_http_server=true --http_port=P serves them too."""

import json
import re
import urllib.error
import urllib.request

import pytest

from conftest import Proc, bin_path, free_port


def http_get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sample(text, series):
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    return int(float(m.group(1))) if m else None


def new_store():
    from mooncake.store import MooncakeDistributedStore
    return MooncakeDistributedStore()


def test_setup_serves_metrics(master, storage):
    st = new_store()
    rc = st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr,
                  enable_client_http_server=True, client_http_port=0, lease_cache=False)
    assert rc == 0
    try:
        port = st.client_http_port()
        assert port > 0
        assert st.put("cm-1", b"x" * 1000) == 0
        assert st.put("cm-2", b"y" * 3000) == 0
        assert st.get("cm-1") == b"x" * 1000
        assert st.get("cm-2") == b"y" * 3000
        assert st.get("cm-absent") == b""

        code, body = http_get(port, "/metrics")
        assert code == 200
        assert sample(body, "mooncake_transfer_write_bytes") == 4000
        assert sample(body, "mooncake_transfer_read_bytes") == 4000
        assert sample(body, "mooncake_transfer_put_latency_count") == 2
        assert sample(body, "mooncake_transfer_get_latency_count") == 3
        assert sample(body, 'mooncake_client_rpc_count{rpc_name="PutStart"}') == 2
        assert sample(body, 'mooncake_client_rpc_count{rpc_name="GetReplicaList"}') == 3
        assert "# TYPE mooncake_client_rpc_latency histogram" in body
        assert "mooncake_transfer_read_bytes 4000\n" in st.metrics_text()

        code, body = http_get(port, "/health")
        assert code == 200 and json.loads(body) == {"status": "healthy", "code": 0}
        code, body = http_get(port, "/metrics/summary")
        assert code == 200 and body.startswith("Client Metrics Summary")
        assert "Put: count=2" in body and "Get: count=3" in body
        assert "Client Metrics Summary" in st.metrics_text(summary=True)
        assert http_get(port, "/other")[0] == 404

        # the port is taken now: a second client sets up without the server (upstream)
        other = new_store()
        assert other.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr,
                           enable_client_http_server=True, client_http_port=port) == 0
        assert other.client_http_port() == 0
        assert other.put("cm-3", b"z") == 0 and other.get("cm-3") == b"z"
        other.close()
        assert http_get(port, "/health")[0] == 200
    finally:
        st.close()
    assert st.client_http_port() == 0
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


def test_setup_dict_keys_and_bad_port(master, storage):
    st = new_store()
    rc = st.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                   "master_server_address": master.addr, "global_segment_size": 0,
                   "protocol": "tcp", "enable_client_http_server": "true",
                   "client_http_port": "0"})
    assert rc == 0
    port = st.client_http_port()
    assert port > 0 and http_get(port, "/metrics")[0] == 200
    st.close()
    # off unless asked: no server
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr) == 0
    assert st.client_http_port() == 0
    assert "mooncake_transfer_read_bytes 0" in st.metrics_text()
    st.close()
    for bad in (70000, -1, "ninety"):
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr,
                        enable_client_http_server=True, client_http_port=bad) == -600


def test_client_metric_env_off(master, storage, monkeypatch):
    monkeypatch.setenv("MC_STORE_CLIENT_METRIC", "0")
    st = new_store()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr,
                    enable_client_http_server=True, client_http_port=0) == 0
    try:
        assert st.put("cm-off", b"1") == 0 and st.get("cm-off") == b"1"
        assert st.metrics_text() == ""
        code, body = http_get(st.client_http_port(), "/metrics")
        assert code == 503 and "mooncake_" not in body
    finally:
        st.close()
    monkeypatch.setenv("MC_STORE_CLIENT_METRIC", "maybe")
    with pytest.raises(ValueError, match="MC_STORE_CLIENT_METRIC"):
        st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr)


def test_mooncake_client_http_server(master):
    port = free_port()
    p = Proc([bin_path("mooncake_client"), "--host=127.0.0.1", "--protocol=tcp",
              f"--master_server_address={master.addr}", "--global_segment_size=16MB",
              "--enable_http_server=true", f"--http_port={port}", "--log_level=warn"],
             "mooncake_client http_port=")
    try:
        assert int(p.field("http_port")) == port
        code, body = http_get(port, "/metrics")
        assert code == 200
        assert sample(body, 'mooncake_client_rpc_count{rpc_name="MountSegment"}') == 1
        assert sample(body, "mooncake_transfer_read_bytes") == 0
        assert http_get(port, "/health")[0] == 200
        assert http_get(port, "/metrics/summary")[0] == 200
    finally:
        p.stop()
