"""Python setup() with an HA master address: "etcd://h:p" and MC_STORE_CLUSTER_ID.

A real 1-member etcd and one mooncake_master --enable_ha (leader) are started on free loopback
ports and stopped by PID. Fails when etcd is not installed (scripts/install-deps.sh)."""
import os
import subprocess
import time
import urllib.request

import pytest

from conftest import Proc, bin_path, free_port, wait_for

ETCD = os.environ.get("MC_ETCD_BIN", "/usr/bin/etcd")


def etcd_up(ep):
    try:
        req = urllib.request.Request(f"http://{ep}/v3/kv/range", data=b'{"key":"eA=="}',
                                     method="POST")
        with urllib.request.urlopen(req, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def ha_master(tmp_path_factory):
    if not os.access(ETCD, os.X_OK):
        pytest.fail(f"{ETCD} not installed (scripts/install-deps.sh: etcd-server)")
    d = tmp_path_factory.mktemp("ha")
    cp, pp = free_port(), free_port()
    ep = f"127.0.0.1:{cp}"
    etcd = subprocess.Popen([ETCD, "--name", "e0", "--data-dir", str(d / "etcd"),
                             "--listen-client-urls", f"http://{ep}",
                             "--advertise-client-urls", f"http://{ep}",
                             "--listen-peer-urls", f"http://127.0.0.1:{pp}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
                             "--initial-cluster", f"e0=http://127.0.0.1:{pp}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: etcd_up(ep), timeout=20, interval=0.1, what="etcd")
        m = Proc([bin_path("mooncake_master"), "--enable_ha=true", f"--etcd_endpoints={ep}",
                  "--cluster_id=pyha", "--rpc_address=127.0.0.1", f"--port={free_port()}",
                  f"--metrics_port={free_port()}", f"--wal_dir={d / 'wal'}",
                  "--default_kv_lease_ttl=1000", "--log_level=warn"],
                 "mooncake_master listening", timeout=30)
        m.etcd = ep
        yield m
        m.stop()
    finally:
        etcd.kill()
        etcd.wait(timeout=10)


def test_setup_on_etcd_address(ha_master, monkeypatch):
    from mooncake.store import MooncakeDistributedStore
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", "pyha")
    st = MooncakeDistributedStore()
    rc = st.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "",
                  f"etcd://{ha_master.etcd}")
    assert rc == 0
    try:
        assert st.put("ha-py", b"x" * 1000) == 0
        assert st.get("ha-py") == b"x" * 1000
    finally:
        st.close()


def test_cluster_id_default_and_invalid(ha_master, monkeypatch):
    from mooncake.store import MooncakeDistributedStore
    addr = f"etcd://{ha_master.etcd}"
    # upstream's default cluster id, mooncake_cluster, is not this cluster: no leader there
    monkeypatch.delenv("MC_STORE_CLUSTER_ID", raising=False)
    t0 = time.monotonic()
    assert MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp",
                                            "", addr, rpc_timeout_ms=500) != 0
    assert time.monotonic() - t0 < 10
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", "bad id!")
    assert MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp",
                                            "", addr) == -600
