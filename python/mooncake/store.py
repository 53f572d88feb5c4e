"""``mooncake.store``: the Mooncake store client with upstream Mooncake's Python API.

Conventions (as upstream): ints are 0 on success or a negative status code; get_into returns
bytes read or a negative code; get returns b"" on a miss; is_exist returns 1 / 0 / negative;
get_buffer returns a BufferHandle (buffer protocol: numpy.frombuffer views it without a copy)
or None. Zero-copy calls need the memory registered first with register_buffer.

Environment variables honoured by setup() when an argument is missing or empty:
LOCAL_HOSTNAME, MOONCAKE_TE_META_DATA_SERVER / MC_METADATA_SERVER, MOONCAKE_MASTER /
MASTER_SERVER, MOONCAKE_PROTOCOL / PROTOCOL, MOONCAKE_CONFIG_PATH (JSON config used by a bare
setup()). DEFAULT_KV_LEASE_TTL is exposed through default_kv_lease_ttl_ms().
"""

import enum
import json
import logging
import os
from collections.abc import Mapping

from . import _config
from ._config import default_kv_lease_ttl_ms, parse_size
from ._store import BufferHandle, ReplicateConfig
from ._store import DistributedStore as _StoreBase
from .tensor import ParallelAxis, ReadTarget, TensorParallelism, TensorStoreMixin

log = logging.getLogger("mooncake")

DEFAULT_GLOBAL_SEGMENT_SIZE = 16 * 1024 * 1024
DEFAULT_LOCAL_BUFFER_SIZE = 16 * 1024 * 1024

_SENTINEL = object()


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class BufferDescriptor:
    """Where one replica's bytes live: size, buffer_address and the endpoint to transfer with."""

    __slots__ = ("size", "buffer_address", "transport_endpoint", "segment_name")

    def __init__(self, size=0, buffer_address=0, transport_endpoint="", segment_name=""):
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint
        self.segment_name = segment_name

    def __repr__(self):
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


Descriptor = BufferDescriptor


class MemoryDescriptor:
    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor

    @property
    def buffer_descriptors(self):
        return [self.buffer_descriptor]

    def __repr__(self):
        return f"MemoryDescriptor({self.buffer_descriptor!r})"


class ReplicaDescriptor:
    """One replica of an object (Mooncake-C replicas are always in memory)."""

    __slots__ = ("status", "_mem")

    def __init__(self, segment, endpoint, addr, size, status):
        self.status = ReplicaStatus.COMPLETE if status == 1 else ReplicaStatus.PROCESSING
        self._mem = MemoryDescriptor(BufferDescriptor(size, addr, endpoint, segment))

    def is_memory_replica(self):
        return True

    def is_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        return self._mem

    def get_disk_descriptor(self):
        raise RuntimeError("not a disk replica (Mooncake-C keeps replicas in memory)")

    def __repr__(self):
        return f"ReplicaDescriptor(status={self.status.name}, {self._mem.buffer_descriptor!r})"


def _config_get(cfg, *names, default=_SENTINEL):
    for n in names:
        if n in cfg and cfg[n] is not None and cfg[n] != "":
            return cfg[n]
    if default is _SENTINEL:
        raise ValueError(f"Missing required config field: {names[0]}")
    return default


class MooncakeDistributedStore(TensorStoreMixin, _StoreBase):
    """Client of a Mooncake store: contributes memory to the pool and puts/gets objects."""

    def setup(self, local_hostname=None, metadata_server=None,
              global_segment_size=DEFAULT_GLOBAL_SEGMENT_SIZE,
              local_buffer_size=DEFAULT_LOCAL_BUFFER_SIZE, protocol=None, rdma_devices="",
              master_server_addr=None, engine=None, **extra):
        """Connect to the master and mount this client's segment. Returns 0 or a negative code.

        Either the 7 upstream positional arguments (local_hostname, metadata_server,
        global_segment_size, local_buffer_size, protocol, rdma_devices, master_server_addr) or
        one dict with those keys (also accepted: device_name, master_server_address, and our
        host_label, rpc_timeout_ms, transfer_timeout_ms). Sizes may be ints or strings like
        "512MB". A hostname without port gets a free port (12300-14300). With no arguments at
        all the JSON file named by $MOONCAKE_CONFIG_PATH is used, else the environment.

        Store knobs, as keywords or (when not given) from the environment: replica_hints
        ($MC_STORE_REPLICA_HINTS; entries of the replica hint table, 0 = none), lease_cache
        ($MC_STORE_LEASE_CACHE; 0 = every get asks the master) and placement_feed
        ($MC_STORE_PLACEMENT_FEED; a key prefix, "" = every key). The client's transfer engine
        takes its tuning from the same variables as TransferEngine ($MC_TE_*, $MC_FORCE_TCP,
        ...). Invalid values raise ValueError.
        """
        if isinstance(local_hostname, Mapping):
            cfg = dict(local_hostname)
            cfg.update(extra)
            return self._setup_from_dict(cfg)
        if local_hostname is None and metadata_server is None and master_server_addr is None \
                and os.environ.get("MOONCAKE_CONFIG_PATH"):
            with open(os.environ["MOONCAKE_CONFIG_PATH"], "r", encoding="utf-8") as f:
                cfg = json.load(f)
            if not isinstance(cfg, dict):
                raise ValueError("MOONCAKE_CONFIG_PATH must name a JSON object")
            cfg.update(extra)
            return self._setup_from_dict(cfg)
        unknown = set(extra) - {"host_label", "rpc_timeout_ms", "transfer_timeout_ms",
                                "replica_hints", "lease_cache", "placement_feed"}
        if unknown:
            raise TypeError(f"setup() got unexpected keyword arguments: {sorted(unknown)}")
        if engine is not None:
            log.warning("setup(engine=...): Mooncake-C store clients use their own transfer "
                        "engine; the given engine is not shared")
        for name, v in (("local_hostname", local_hostname), ("rdma_devices", rdma_devices),
                        ("master_server_addr", master_server_addr)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name} must be str, not {type(v).__name__}")
        host = local_hostname or _config.env_first("LOCAL_HOSTNAME") or "localhost"
        meta = _config.normalize_metadata(metadata_server)
        master = (master_server_addr or _config.env_first("MOONCAKE_MASTER", "MASTER_SERVER")
                  or _config.DEFAULT_MASTER)
        proto = _config.normalize_protocol(protocol)
        gs = parse_size(global_segment_size, "global_segment_size")
        lb = parse_size(local_buffer_size, "local_buffer_size")
        hints = extra["replica_hints"] if "replica_hints" in extra \
            else _config.store_replica_hints()
        lease = extra["lease_cache"] if "lease_cache" in extra else _config.store_lease_cache()
        feed = extra["placement_feed"] if "placement_feed" in extra \
            else _config.store_placement_feed()
        tuning = _config.te_tuning_from_env()  # MC_TE_*, MC_FORCE_TCP, ... as the tools
        return self._setup(host, meta, gs, lb, proto, rdma_devices or "", master,
                           extra.get("host_label"), int(extra.get("rpc_timeout_ms", 0)),
                           int(extra.get("transfer_timeout_ms", 0)), hints, lease, feed,
                           tuning or None)

    def _setup_from_dict(self, cfg):
        host = _config_get(cfg, "local_hostname",
                           default=_config.env_first("LOCAL_HOSTNAME") or "localhost")
        meta = _config_get(cfg, "metadata_server", default=None)
        master = _config_get(cfg, "master_server_address", "master_server_addr",
                             default=_config.env_first("MOONCAKE_MASTER", "MASTER_SERVER")
                             or _config.DEFAULT_MASTER)
        return self.setup(
            host, meta,
            _config_get(cfg, "global_segment_size", default=DEFAULT_GLOBAL_SEGMENT_SIZE),
            _config_get(cfg, "local_buffer_size", default=DEFAULT_LOCAL_BUFFER_SIZE),
            _config_get(cfg, "protocol", default=None),
            _config_get(cfg, "device_name", "rdma_devices", default=""),
            master,
            **{k: cfg[k] for k in ("host_label", "rpc_timeout_ms", "transfer_timeout_ms",
                                   "replica_hints", "lease_cache", "placement_feed")
               if cfg.get(k) is not None})

    def get_replica_desc(self, key):
        """List of ReplicaDescriptor of a committed object ([] if unknown)."""
        return [ReplicaDescriptor(*t) for t in self._get_replica_desc(key)]

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor, ...]} for each key."""
        return {k: [ReplicaDescriptor(*t) for t in v]
                for k, v in self._batch_get_replica_desc(keys).items()}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "BufferHandle", "ReplicaStatus",
           "ReplicaDescriptor", "MemoryDescriptor", "BufferDescriptor", "Descriptor",
           "parse_size", "default_kv_lease_ttl_ms"]
