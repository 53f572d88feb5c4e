"""Pure-Python helpers: size strings, metadata / protocol normalisation, environment."""
import pytest

from mooncake import _config
from mooncake._config import normalize_metadata, normalize_protocol, parse_size


@pytest.mark.parametrize("text,expect", [
    (4096, 4096), ("4096", 4096), ("512MB", 512 << 20), ("512 mb", 512 << 20),
    ("1GB", 1 << 30), ("1GiB", 1 << 30), ("16k", 16 << 10), ("1.5GB", 3 << 29),
    ("2T", 2 << 40), ("0", 0), ("10B", 10), (" 64 MiB ", 64 << 20), (1024.0, 1024),
])
def test_parse_size(text, expect):
    assert parse_size(text) == expect


@pytest.mark.parametrize("bad", ["", "MB", "12XB", "-5", "1.3B", "abc", "5 5"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_parse_size_types():
    with pytest.raises(ValueError):
        parse_size(-1)
    with pytest.raises(TypeError):
        parse_size(True)
    with pytest.raises(TypeError):
        parse_size(None)
    with pytest.raises(TypeError):
        parse_size([1])


def test_metadata_spellings(monkeypatch):
    monkeypatch.delenv("MOONCAKE_TE_META_DATA_SERVER", raising=False)
    monkeypatch.delenv("MC_METADATA_SERVER", raising=False)
    assert normalize_metadata("P2PHANDSHAKE") == "P2PHANDSHAKE"
    assert normalize_metadata("p2phandshake") == "P2PHANDSHAKE"
    assert normalize_metadata("http://h:8080/metadata") == "http://h:8080/metadata"
    assert normalize_metadata("etcd://h:2379") == "etcd://h:2379"
    assert normalize_metadata("127.0.0.1:2379") == "etcd://127.0.0.1:2379"
    assert normalize_metadata("h:8080/metadata", "http") == "http://h:8080/metadata"
    assert normalize_metadata("anything", "p2p") == "P2PHANDSHAKE"
    assert normalize_metadata("") == "P2PHANDSHAKE"
    assert normalize_metadata(None) == "P2PHANDSHAKE"
    with pytest.raises(ValueError):
        normalize_metadata("h:1", "zookeeper")
    with pytest.raises(TypeError):
        normalize_metadata(5)


def test_metadata_env(monkeypatch):
    monkeypatch.delenv("MOONCAKE_TE_META_DATA_SERVER", raising=False)
    monkeypatch.setenv("MC_METADATA_SERVER", "http://m:1/metadata")
    assert normalize_metadata("") == "http://m:1/metadata"
    monkeypatch.setenv("MOONCAKE_TE_META_DATA_SERVER", "etcd://e:2")
    assert normalize_metadata(None) == "etcd://e:2"
    assert normalize_metadata("P2PHANDSHAKE") == "P2PHANDSHAKE"  # explicit wins


def test_protocol(monkeypatch):
    monkeypatch.delenv("MOONCAKE_PROTOCOL", raising=False)
    monkeypatch.delenv("PROTOCOL", raising=False)
    assert normalize_protocol("TCP") == "tcp"
    assert normalize_protocol("rdma") == "auto"
    assert normalize_protocol(None) == "tcp"
    monkeypatch.setenv("PROTOCOL", "shm")
    assert normalize_protocol("") == "shm"
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "auto")
    assert normalize_protocol("") == "auto"


def test_lease_ttl_and_timeout(monkeypatch):
    monkeypatch.delenv("DEFAULT_KV_LEASE_TTL", raising=False)
    assert _config.default_kv_lease_ttl_ms() == 10000
    monkeypatch.setenv("DEFAULT_KV_LEASE_TTL", "500")
    assert _config.default_kv_lease_ttl_ms() == 500
    monkeypatch.setenv("DEFAULT_KV_LEASE_TTL", "soon")
    with pytest.raises(ValueError):
        _config.default_kv_lease_ttl_ms()
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "2.5")
    assert _config.transfer_timeout_ms() == 2500
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "x")
    assert _config.transfer_timeout_ms() == 0


def test_engine_initialize_uses_env(monkeypatch):
    from mooncake.engine import TransferEngine
    monkeypatch.delenv("MOONCAKE_TE_META_DATA_SERVER", raising=False)
    monkeypatch.setenv("MC_METADATA_SERVER", "P2PHANDSHAKE")
    monkeypatch.setenv("LOCAL_HOSTNAME", "127.0.0.1")
    te = TransferEngine()
    assert te.initialize("", "", "tcp", "") == 0
    assert te.get_local_hostname().startswith("127.0.0.1:")
    te.close()


def test_store_knobs_from_env(monkeypatch):
    for name in ("MC_STORE_REPLICA_HINTS", "MC_STORE_LEASE_CACHE", "MC_STORE_PLACEMENT_FEED",
                 "MC_STORE_NOT_READY_WAIT_MS"):
        monkeypatch.delenv(name, raising=False)
    assert _config.store_replica_hints() is None      # default table
    assert _config.store_lease_cache() is True
    assert _config.store_placement_feed() is None     # no feed
    assert _config.store_not_ready_wait_ms() is None  # the library's default wait
    monkeypatch.setenv("MC_STORE_REPLICA_HINTS", "1024")
    monkeypatch.setenv("MC_STORE_LEASE_CACHE", "0")
    monkeypatch.setenv("MC_STORE_PLACEMENT_FEED", "")
    monkeypatch.setenv("MC_STORE_NOT_READY_WAIT_MS", "0")
    assert _config.store_replica_hints() == 1024
    assert _config.store_lease_cache() is False
    assert _config.store_placement_feed() == ""       # every key
    assert _config.store_not_ready_wait_ms() == 0     # gets do not wait
    monkeypatch.setenv("MC_STORE_REPLICA_HINTS", "0")
    monkeypatch.setenv("MC_STORE_LEASE_CACHE", "1")
    assert _config.store_replica_hints() == 0         # no hints
    assert _config.store_lease_cache() is True


@pytest.mark.parametrize("name,value,fn,msg", [
    ("MC_STORE_REPLICA_HINTS", "lots", "store_replica_hints", "from 0 to 4194304"),
    ("MC_STORE_REPLICA_HINTS", "-1", "store_replica_hints", "from 0 to 4194304"),
    ("MC_STORE_REPLICA_HINTS", "4194305", "store_replica_hints", "from 0 to 4194304"),
    ("MC_STORE_LEASE_CACHE", "x", "store_lease_cache", "must be 0 or 1, got 'x'"),
    ("MC_STORE_LEASE_CACHE", "yes", "store_lease_cache", "must be 0 or 1"),
    ("MC_STORE_PLACEMENT_FEED", "p" * 4097, "store_placement_feed", "at most 4096 bytes"),
    ("MC_STORE_NOT_READY_WAIT_MS", "soon", "store_not_ready_wait_ms", "from 0 to 3600000"),
    ("MC_STORE_NOT_READY_WAIT_MS", "3600001", "store_not_ready_wait_ms", "from 0 to 3600000"),
])
def test_store_knobs_rejected(monkeypatch, name, value, fn, msg):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=msg):
        getattr(_config, fn)()
