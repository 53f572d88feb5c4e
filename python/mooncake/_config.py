"""Pure-Python configuration helpers shared by mooncake.engine and mooncake.store.

Size strings, metadata/protocol normalisation and the environment variables that upstream
Mooncake tools and tests read. Nothing here touches the C library.
"""

import logging
import os
import re

log = logging.getLogger("mooncake")

DEFAULT_MASTER = "127.0.0.1:50051"
DEFAULT_METADATA = "P2PHANDSHAKE"
DEFAULT_KV_LEASE_TTL_MS = 10000

# Protocols our transfer engine implements, and upstream names that map onto them.
_OUR_PROTOCOLS = {"tcp", "shm", "auto", "ucx"}
_UPSTREAM_ONLY = {"rdma", "efa", "nvlink", "nvlink_intra", "hip", "ascend", "barex", "cxl",
                  "nvmeof", "hccs"}

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(value, what="size"):
    """Bytes from an int or a size string: "512MB", "1.5 GiB", "4096", "16k".

    Units are binary like upstream Mooncake (1 KB = 1024 bytes). Raises TypeError for other
    types and ValueError for malformed or negative values.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int or a size string, not bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} must not be negative")
        return value
    if isinstance(value, float):
        if value < 0 or value != int(value):
            raise ValueError(f"{what} must be a non-negative whole number of bytes")
        return int(value)
    if not isinstance(value, str):
        raise TypeError(f"{what} must be an int or a size string, not {type(value).__name__}")
    m = _SIZE_RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{what}: cannot parse size {value!r} (examples: 4096, '512MB', '1GiB')")
    number = float(m.group(1)) if "." in m.group(1) else int(m.group(1))
    result = number * _UNITS[m.group(2).lower()]
    if result != int(result):
        raise ValueError(f"{what}: {value!r} is not a whole number of bytes")
    return int(result)


def env_first(*names):
    """Value of the first non-empty environment variable among names, else None."""
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


def default_kv_lease_ttl_ms():
    """DEFAULT_KV_LEASE_TTL (ms) as upstream tests read it; 10000 when unset."""
    v = os.environ.get("DEFAULT_KV_LEASE_TTL")
    if not v:
        return DEFAULT_KV_LEASE_TTL_MS
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"DEFAULT_KV_LEASE_TTL must be an integer (ms), got {v!r}") from None


def _check_str(value, what):
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")


def normalize_metadata(server, metadata_type=None):
    """Turn the upstream spellings of a metadata server into a Transfer Engine URI.

    "" / None -> $MOONCAKE_TE_META_DATA_SERVER, $MC_METADATA_SERVER, else "P2PHANDSHAKE".
    "host:port" without a scheme means etcd (upstream default) unless metadata_type says
    otherwise ("etcd", "http", "redis", "p2p").
    """
    _check_str(server, "metadata_server")
    _check_str(metadata_type, "metadata_type")
    if not server:
        server = env_first("MOONCAKE_TE_META_DATA_SERVER", "MC_METADATA_SERVER") or DEFAULT_METADATA
    server = server.strip()
    mt = (metadata_type or "").strip().lower()
    if server.upper() == "P2PHANDSHAKE" or mt in ("p2p", "p2phandshake"):
        return "P2PHANDSHAKE"
    if "://" in server:
        return server
    if mt in ("", "etcd"):
        return "etcd://" + server
    if mt == "http":
        return "http://" + server
    if mt == "redis":
        return "redis://" + server
    raise ValueError(f"unknown metadata_type {metadata_type!r} (etcd, http, redis, p2p)")


def normalize_protocol(protocol, default="tcp"):
    """Map upstream protocol names onto ours; "" / None -> $MOONCAKE_PROTOCOL, $PROTOCOL, default."""
    _check_str(protocol, "protocol")
    if not protocol:
        protocol = env_first("MOONCAKE_PROTOCOL", "PROTOCOL") or default
    p = protocol.strip().lower()
    if p in _UPSTREAM_ONLY:
        log.warning("protocol %r is not available in Mooncake-C; using 'auto' "
                    "(shared memory for same-host peers, TCP otherwise)", protocol)
        return "auto"
    return p


def transfer_timeout_ms():
    """MC_TRANSFER_TIMEOUT (seconds, upstream) as milliseconds; 0 = engine default."""
    v = os.environ.get("MC_TRANSFER_TIMEOUT")
    if not v:
        return 0
    try:
        secs = float(v)
    except ValueError:
        log.warning("ignoring MC_TRANSFER_TIMEOUT=%r (not a number)", v)
        return 0
    if secs <= 0:
        return 0
    return min(int(secs * 1000), 0xFFFFFFFF)


# Transfer-engine tuning from the environment: the variables the C tools read
# (tools/common/te_env.h), with the same ranges. The library reads no environment; the engine
# layer passes these as fields of mc_te_config_t (include/mooncake/te.h).
# (variable, config field, low, high, what the value is)
_TE_ENV = (
    ("MC_TE_TIMEOUT_MS", "transfer_timeout_ms", 1, 0xFFFFFFFF, "a number of milliseconds"),
    ("MC_TE_TCP_CONNECTIONS", "tcp_connections", 1, 64, "a number of connections"),
    ("MC_TE_WORKERS", "worker_threads", 1, 32, "a number of threads"),
    ("MC_TE_SLICE_SIZE", "slice_size", 4096, 64 << 20, "a size in bytes"),
    ("MC_FORCE_TCP", "force_tcp", 0, 1, None),
    ("MC_TE_HUGEPAGES", "hugepages", 0, 1, None),
    ("MC_TE_TCP_STRIPE", "tcp_stripe", 1, 64, "a number of connections"),
    ("MC_TE_TCP_BUF", "tcp_socket_buf", 4096, 1 << 30, "a size in bytes"),
    ("MC_BUSY_POLL_US", "busy_poll_us", 0, 10000, "a number of microseconds"),
    ("MC_META_TIMEOUT_MS", "metadata_timeout_ms", 100, 600000, "a number of milliseconds"),
    # redis:// metadata (upstream's variables); the two strings are byte lengths
    ("MC_REDIS_USERNAME", "redis_username", 1, 1024, "a Redis user name"),
    ("MC_REDIS_PASSWORD", "redis_password", 1, 1024, "a Redis password"),
    ("MC_REDIS_DB_INDEX", "redis_db_index", 0, 255, "a Redis database number"),
    ("MC_AUTH_TOKEN_FILE", "auth_token_file", 1, 4096, "a file path"),
    ("MC_TE_IDLE_TIMEOUT_S", "tcp_idle_timeout_s", 1, 86400, "a number of seconds"),
    ("MC_TE_MAX_SERVER_CONNS", "tcp_max_server_conns", 16, 65536, "a number of connections"),
)
_TE_ENV_STRINGS = ("redis_username", "redis_password", "auth_token_file")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _te_env_string(name, field, hi, what, v):
    """A user name or password from the environment, checked like tools/common/te_env.c:
    at most hi bytes, no control characters, no blanks in a user name. A refused password is
    never shown."""
    bad = len(v.encode("utf-8", "surrogateescape")) > hi or _CONTROL_RE.search(v) is not None
    if field == "redis_username":
        if bad or " " in v:
            raise ValueError(f"{name} must be {what} of at most {hi} bytes without blanks or "
                             f"control characters, got {v[:64]!r}")
    elif bad:
        raise ValueError(f"{name} must be {what} of at most {hi} bytes without control "
                         f"characters (value not shown)")
    return v
_DIGITS_RE = re.compile(r"^[0-9]+$")


def te_tuning_from_env():
    """Transfer-engine tuning fields from the environment, as a dict {config field: value}.

    Unset or empty variables are left out (the engine's default). MC_TE_HUGEPAGES=0 gives
    hugepages=-1 (never) and MC_BUSY_POLL_US=0 gives busy_poll_us=-1 (never spin), since a
    field's 0 means its default. MC_REDIS_USERNAME and MC_REDIS_PASSWORD give str values
    (redis:// metadata credentials), MC_AUTH_TOKEN_FILE a str path (docs/security.md), the
    others ints. Raises ValueError naming the variable,
    what it accepts and what it got (never a password).
    """
    out = {}
    for name, field, lo, hi, what in _TE_ENV:
        v = os.environ.get(name)
        if not v:
            continue
        if field in _TE_ENV_STRINGS:
            out[field] = _te_env_string(name, field, hi, what, v)
            continue
        n = int(v) if _DIGITS_RE.match(v) else None
        if n is None or not lo <= n <= hi:
            if what is None:
                raise ValueError(f"{name} must be 0 or 1, got {v!r}")
            raise ValueError(f"{name} must be {what} between {lo} and {hi}, got {v!r}")
        if field in ("hugepages", "busy_poll_us") and n == 0:
            n = -1
        out[field] = n
    return out


# Store client knobs read from the environment (the C library reads none itself; these are
# passed to the store's setup, which fills mc_store_config_t). Same names and defaults as the
# tools (mooncake_client --help).
REPLICA_HINTS_MAX = 1 << 22


def store_replica_hints():
    """MC_STORE_REPLICA_HINTS: entries of the replica hint table, None when unset (default,
    262144); 0 = no hints (no speculative reads, no lease cache). Range 0..4194304."""
    v = os.environ.get("MC_STORE_REPLICA_HINTS")
    if not v:
        return None
    try:
        n = int(v.strip())
    except ValueError:
        n = -1
    if not 0 <= n <= REPLICA_HINTS_MAX:
        raise ValueError(f"MC_STORE_REPLICA_HINTS must be an integer from 0 to "
                         f"{REPLICA_HINTS_MAX}, got {v!r}")
    return n


def store_lease_cache():
    """MC_STORE_LEASE_CACHE: True (default, also when unset) = gets read under read leases this
    client still holds; "0" = False, every get asks the master. Only "0" and "1" are valid."""
    v = os.environ.get("MC_STORE_LEASE_CACHE")
    if not v:
        return True
    if v.strip() not in ("0", "1"):
        raise ValueError(f"MC_STORE_LEASE_CACHE must be 0 or 1, got {v!r}")
    return v.strip() == "1"


NOT_READY_WAIT_MAX_MS = 3600000


def store_not_ready_wait_ms():
    """MC_STORE_NOT_READY_WAIT_MS: how long a get waits for a key not ready yet (its put in
    flight, or its segment awaiting the storage server's re-mount after a master restart or
    takeover) before answering REPLICA_IS_NOT_READY; None when unset (default, 1500 ms);
    0 = no wait. Range 0..3600000."""
    v = os.environ.get("MC_STORE_NOT_READY_WAIT_MS")
    if not v:
        return None
    n = int(v.strip()) if _DIGITS_RE.match(v.strip()) else -1
    if not 0 <= n <= NOT_READY_WAIT_MAX_MS:
        raise ValueError(f"MC_STORE_NOT_READY_WAIT_MS must be an integer from 0 to "
                         f"{NOT_READY_WAIT_MAX_MS}, got {v!r}")
    return n


def store_placement_feed():
    """MC_STORE_PLACEMENT_FEED: the key prefix of this client's placement feed, None when unset
    (no feed); an empty value means every key. At most 4096 bytes (a key)."""
    v = os.environ.get("MC_STORE_PLACEMENT_FEED")
    if v is not None and len(v.encode("utf-8", "surrogateescape")) > 4096:
        raise ValueError("MC_STORE_PLACEMENT_FEED must be at most 4096 bytes (a key), got "
                         f"{len(v.encode('utf-8', 'surrogateescape'))}")
    return v


def store_tenant_id(tenant_id):
    """The tenant a store client acts for: tenant_id, or $MOONCAKE_TENANT_ID when tenant_id is
    None, "" or "default" (upstream's default argument) and the variable is set, else
    "default". Checked by the store's setup (1..64 bytes, no leading '_', no control
    characters: else INVALID_PARAMS)."""
    if tenant_id in (None, "", "default"):
        return os.environ.get("MOONCAKE_TENANT_ID") or "default"
    return tenant_id


def store_client_metric():
    """MC_STORE_CLIENT_METRIC: True (default, also when unset) = the client keeps upstream's
    client metrics; "0"/"false"/"no" = none. Valid: 0, 1, true, false, yes, no (any case)."""
    v = os.environ.get("MC_STORE_CLIENT_METRIC")
    if v is None or not v.strip():
        return True
    t = v.strip().lower()
    if t not in ("0", "1", "true", "false", "yes", "no"):
        raise ValueError(f"MC_STORE_CLIENT_METRIC must be 0, 1, true, false, yes or no, got {v!r}")
    return t in ("1", "true", "yes")


HUGE_2MB = 2 << 20
HUGE_1GB = 1 << 30


def store_hugepage_size():
    """Page size of a client's own segments (setup: te_tuning hugepage_size) and of the
    dummy-client shared memory (alloc_from_mem_pool, MooncakeHostMemAllocator, setup_dummy's
    local buffer): 0 = base pages, or the huge page size when MC_STORE_USE_HUGEPAGE is on. As
    upstream, huge pages are then required: an allocation fails (setup non-zero, 0,
    setup_dummy -1) when the host has too few free, never falls back. The store programs read
    the same variables (tools/common/store_knobs.c).

    MC_STORE_USE_HUGEPAGE: unset, "", 0, false, no, off = off; 1, true, yes, on = on (upstream
    turns them on for any value that is set). MC_STORE_HUGEPAGE_SIZE (read only when on):
    2MB (default) or 1GB, any spelling parse_size reads (2M, 2MiB, 2097152, 1G, ...); other
    sizes raise ValueError (upstream warns and uses 2MB)."""
    v = os.environ.get("MC_STORE_USE_HUGEPAGE")
    t = (v or "").strip().lower()
    if t in ("", "0", "false", "no", "off"):
        return 0
    if t not in ("1", "true", "yes", "on"):
        raise ValueError(f"MC_STORE_USE_HUGEPAGE must be 1, true, yes, on or 0, false, no, off, "
                         f"got {v!r}")
    size = os.environ.get("MC_STORE_HUGEPAGE_SIZE")
    if size is None or not size.strip():
        return HUGE_2MB
    try:
        n = parse_size(size.strip(), "MC_STORE_HUGEPAGE_SIZE")
    except ValueError:
        n = None
    if n not in (HUGE_2MB, HUGE_1GB):
        raise ValueError(f"MC_STORE_HUGEPAGE_SIZE must be 2MB or 1GB, got {size!r}")
    return n


DEFAULT_CLIENT_HTTP_PORT = 9300  # upstream's client_http_port


def client_http_args(enable, port):
    """(enable, port) of setup()'s enable_client_http_server / client_http_port as upstream
    takes them (a bool or "true"/"false"; an int or a decimal string), or None for a value
    upstream refuses (setup then returns INVALID_PARAMS). Port 0 = a free port."""
    if isinstance(enable, str):
        t = enable.strip().lower()
        if t not in ("0", "1", "true", "false", "yes", "no", ""):
            return None
        enable = t in ("1", "true", "yes")
    elif not isinstance(enable, (bool, int)):
        return None
    if isinstance(port, str):
        try:
            port = int(port.strip())
        except ValueError:
            return None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        return None
    return bool(enable), port
