"""``mooncake.store``: the Mooncake store client with upstream Mooncake's Python API.

Conventions (as upstream): ints are 0 on success or a negative status code; get_into returns
bytes read or a negative code; get_into_ranges returns [buffer][key][fragment] of those; get returns b"" on a miss; is_exist returns 1 / 0 / negative;
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
from ._numa import bind_to_numa_node  # noqa: F401  (upstream's module-level function)
from ._config import default_kv_lease_ttl_ms, parse_size
from . import _store
from ._store import BufferHandle, ReplicateConfig
from ._store import DistributedStore as _StoreBase
from .tensor import ParallelAxis, ReadTarget, TensorParallelism, TensorStoreMixin
from ._store_more import StoreMoreMixin
from .engram import EngramStore, EngramStoreConfig  # noqa: F401
from .buffer_pool import BufferLease, BufferPool, RegisteredBufferLease, RegisteredBufferPool  # noqa: F401

log = logging.getLogger("mooncake")

DEFAULT_GLOBAL_SEGMENT_SIZE = 16 * 1024 * 1024
DEFAULT_LOCAL_BUFFER_SIZE = 16 * 1024 * 1024

_SENTINEL = object()

INVALID_PARAMS = -600  # upstream ErrorCode::INVALID_PARAMS (mc_status_t MC_ERR_INVALID_PARAMS)


class ObjectDataType(enum.IntEnum):
    """What an object holds (upstream's ObjectDataType); ReplicateConfig.data_type."""
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class SoftPinAction(enum.IntEnum):
    """Soft pin requested by a put (ReplicateConfig.soft_pin_action)."""
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(enum.IntEnum):
    """Kinds of master tasks (create_copy_task / create_move_task)."""
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    PENDING = 0
    PROCESSING = 1
    FAILED = 2
    SUCCESS = 3


_store._set_enums(SoftPinAction, ObjectDataType)


class QueryTaskResponse:
    """What query_task returns for a task the master knows (read-only fields, as upstream's):
    id and assigned_client as (int, int) UUIDs, type a TaskType, status a TaskStatus, the
    creation and last-update times in ms since the epoch, and the message its client left
    ("" on success; why it failed otherwise, e.g. a timeout)."""

    __slots__ = ("_id", "_type", "_status", "_created", "_updated", "_client", "_message")

    def __init__(self):
        self._id = (0, 0)
        self._type = TaskType.REPLICA_COPY
        self._status = TaskStatus.PENDING
        self._created = 0
        self._updated = 0
        self._client = (0, 0)
        self._message = ""

    @classmethod
    def _make(cls, task_id, ttype, status, created, updated, client, message):
        r = cls()
        r._id = tuple(task_id)
        r._type = TaskType(ttype)
        r._status = TaskStatus(status)
        r._created = created
        r._updated = updated
        r._client = client
        r._message = message
        return r

    id = property(lambda self: self._id)
    type = property(lambda self: self._type)
    status = property(lambda self: self._status)
    created_at_ms_epoch = property(lambda self: self._created)
    last_updated_at_ms_epoch = property(lambda self: self._updated)
    assigned_client = property(lambda self: self._client)
    message = property(lambda self: self._message)

    def __repr__(self):
        return (f"QueryTaskResponse(id={self._id}, type={int(self._type)}, "
                f"status={int(self._status)}, created_at={self._created}, "
                f"last_updated_at={self._updated}, assigned_client={self._client}, "
                f"message=\"{self._message}\")")


def get_alloc_func_addr():
    """Address of upstream's hugepage_memory_alloc(size_t) -> void*: NVMe-oF (SPDK) memory,
    which a build without NVMe-oF - upstream's default and ours - never has, so the function
    returns NULL for every size."""
    return _store._nof_alloc_addr()


def get_free_func_addr():
    """Address of hugepage_memory_free(void*): a no-op without NVMe-oF, as upstream's."""
    return _store._nof_free_addr()

# Upstream exports the members of these enums into the module too (pybind11 export_values), in
# this order, so TaskStatus.PROCESSING / FAILED win over ReplicaStatus's.
_EXPORTED = {}
for _e in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    _EXPORTED.update(_e.__members__)
globals().update(_EXPORTED)
del _e


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


class DiskDescriptor:
    """Where a disk replica lives (upstream's class; read-only here). Mooncake-C's disk tier
    is the storage servers' own disks: object_size is the object's size, file_path is ""
    (the file is private to its storage server, which serves reads), and, ours,
    transport_endpoint is that server's offload endpoint."""

    __slots__ = ("_size", "_endpoint")

    def __init__(self, object_size, transport_endpoint):
        self._size = object_size
        self._endpoint = transport_endpoint

    file_path = property(lambda self: "")
    object_size = property(lambda self: self._size)
    transport_endpoint = property(lambda self: self._endpoint)

    def __repr__(self):
        return (f"DiskDescriptor(object_size={self._size}, "
                f"transport_endpoint={self._endpoint!r})")


_REPLICA_LOCAL_DISK = 2  # MC_REPLICA_LOCAL_DISK


class ReplicaDescriptor:
    """One replica of an object: in a memory segment, or on a storage server's local disk
    (is_local_disk_replica(); get_disk_descriptor() describes it)."""

    __slots__ = ("status", "_mem", "_disk")

    def __init__(self, segment, endpoint, addr, size, status, replica_type=0):
        self.status = ReplicaStatus.COMPLETE if status == 1 else ReplicaStatus.PROCESSING
        if replica_type == _REPLICA_LOCAL_DISK:
            self._mem, self._disk = None, DiskDescriptor(size, endpoint)
        else:
            self._mem = MemoryDescriptor(BufferDescriptor(size, addr, endpoint, segment))
            self._disk = None

    def is_memory_replica(self):
        return self._mem is not None

    def is_disk_replica(self):
        return False  # upstream's shared-filesystem DISK tier is not served

    def is_local_disk_replica(self):
        return self._disk is not None

    def get_memory_descriptor(self):
        if self._mem is None:
            raise RuntimeError("not a memory replica")
        return self._mem

    def get_disk_descriptor(self):
        if self._disk is None:
            raise RuntimeError("not a disk replica")
        return self._disk

    def __repr__(self):
        d = self._mem.buffer_descriptor if self._mem is not None else self._disk
        return f"ReplicaDescriptor(status={self.status.name}, {d!r})"


def _config_get(cfg, *names, default=_SENTINEL):
    for n in names:
        if n in cfg and cfg[n] is not None and cfg[n] != "":
            return cfg[n]
    if default is _SENTINEL:
        raise ValueError(f"Missing required config field: {names[0]}")
    return default


class MooncakeHostMemAllocator:
    """Upstream's allocator of shared host memory (memfd mappings) for dummy clients:
    alloc(size) -> address (0 on failure), free(ptr) -> 0 or -1. The memory is process-wide:
    any dummy client of this process can register_buffer it."""

    def alloc(self, size):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise TypeError(f"alloc(): size must be a non-negative int, got {size!r}")
        return _store._shm_alloc(size, _config.store_hugepage_size()) if size else 0

    def free(self, ptr):
        if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0:
            raise TypeError(f"free(): ptr must be a non-negative int, got {ptr!r}")
        return _store._shm_free(ptr)


class MooncakeDistributedStore(StoreMoreMixin, TensorStoreMixin, _StoreBase):
    """Client of a Mooncake store: contributes memory to the pool and puts/gets objects."""

    def setup(self, local_hostname=None, metadata_server=None,
              global_segment_size=DEFAULT_GLOBAL_SEGMENT_SIZE,
              local_buffer_size=DEFAULT_LOCAL_BUFFER_SIZE, protocol=None, rdma_devices="",
              master_server_addr=None, engine=None, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
              client_http_port=9300, **extra):
        """Connect to the master and mount this client's segment. Returns 0 or a negative code.

        Upstream's whole signature, positional or keyword. enable_ssd_offload=True makes this
        client a storage server of the local-disk (SSD) tier: its disk store lives in
        ssd_offload_path (or, when that is "", $MOONCAKE_OFFLOAD_FILE_STORAGE_PATH; neither
        returns INVALID_PARAMS), tuned by the $MOONCAKE_OFFLOAD_* environment; a master
        without --enable_offload makes setup return UNABLE_OFFLOAD (-1300). tenant_id (also a dict key; None, "" or "default" mean
        $MOONCAKE_TENANT_ID when set): the tenant this client acts for; keys are per tenant,
        the same key in two tenants is two objects. An invalid name (over 64 bytes, a leading
        '_', a control character) returns INVALID_PARAMS; with a tenant-bound token
        (MC_AUTH_TOKEN_FILE) the token's tenant is used, and naming another one returns
        PERMISSION_DENIED (-3011).

        Either the 7 upstream positional arguments (local_hostname, metadata_server,
        global_segment_size, local_buffer_size, protocol, rdma_devices, master_server_addr) or
        one dict with those keys (also accepted: device_name, master_server_address, and our
        host_label, rpc_timeout_ms, transfer_timeout_ms). Sizes may be ints or strings like
        "512MB". A hostname without port gets a free port (12300-14300). With no arguments at
        all the JSON file named by $MOONCAKE_CONFIG_PATH is used, else the environment.
        master_server_addr is "host:port", or "etcd://h1:2379;h2:2379" for HA masters: the
        leader is read from etcd under the cluster $MC_STORE_CLUSTER_ID (default
        "mooncake_cluster", as upstream) and followed through failovers.

        Store knobs, as keywords or (when not given) from the environment: replica_hints
        ($MC_STORE_REPLICA_HINTS; entries of the replica hint table, 0 = none), lease_cache
        ($MC_STORE_LEASE_CACHE; 0 = every get asks the master), placement_feed
        ($MC_STORE_PLACEMENT_FEED; a key prefix, "" = every key) and not_ready_wait_ms
        ($MC_STORE_NOT_READY_WAIT_MS; how long a get waits for a key that is not readable yet,
        its put in flight or its segment awaiting a re-mount after a master restart or
        takeover, before returning REPLICA_IS_NOT_READY (-703); default 1500, 0 = no wait). The client's transfer engine
        takes its tuning from the same variables as TransferEngine ($MC_TE_*, $MC_FORCE_TCP,
        ...). Invalid values of those raise ValueError; a size that cannot be parsed ("50%")
        makes setup return INVALID_PARAMS (-600), as upstream's setup does.

        Upstream's client metrics and HTTP server: enable_client_http_server=True serves
        /health, /metrics and /metrics/summary on client_http_port (9300; 0 = a free port,
        client_http_port() tells which; a port already taken leaves the server off with a
        warning, as upstream); client_metric ($MC_STORE_CLIENT_METRIC; False = no metrics)
        turns the metrics off. A port outside 0..65535 makes setup return INVALID_PARAMS.

        A client set up with local_buffer_size=0 refuses the byte calls (put*, upsert*, get*,
        which go through the local buffer upstream); zero-copy calls work.
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
                                "replica_hints", "lease_cache", "placement_feed",
                                "client_metric", "not_ready_wait_ms"}
        if unknown:
            raise TypeError(f"setup() got unexpected keyword arguments: {sorted(unknown)}")
        if not isinstance(ssd_offload_path, str):
            raise TypeError(f"ssd_offload_path must be str, not {type(ssd_offload_path).__name__}")
        ssd_path = None
        if enable_ssd_offload:  # the argument wins over the environment, as upstream
            ssd_path = ssd_offload_path or os.environ.get("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "")
            if not ssd_path:
                log.error("setup: enable_ssd_offload=True needs ssd_offload_path or "
                          "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH")
                return INVALID_PARAMS
        tenant = _config.store_tenant_id(tenant_id)
        if not isinstance(tenant, str):
            raise TypeError(f"tenant_id must be str, not {type(tenant).__name__}")
        extra["enable_client_http_server"] = enable_client_http_server
        extra["client_http_port"] = client_http_port
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
        # A size upstream cannot parse ("50%", "12 apples", -1) makes setup return
        # INVALID_PARAMS like upstream's, not raise; a wrong type (a list) is still a TypeError.
        try:
            gs = parse_size(global_segment_size, "global_segment_size")
            lb = parse_size(local_buffer_size, "local_buffer_size")
        except ValueError as e:
            log.error("setup: %s", e)
            return INVALID_PARAMS
        hints = extra["replica_hints"] if "replica_hints" in extra \
            else _config.store_replica_hints()
        lease = extra["lease_cache"] if "lease_cache" in extra else _config.store_lease_cache()
        feed = extra["placement_feed"] if "placement_feed" in extra \
            else _config.store_placement_feed()
        metric = extra["client_metric"] if "client_metric" in extra \
            else _config.store_client_metric()
        wait = extra["not_ready_wait_ms"] if "not_ready_wait_ms" in extra \
            else _config.store_not_ready_wait_ms()
        http = _config.client_http_args(extra.get("enable_client_http_server", False),
                                        extra.get("client_http_port",
                                                  _config.DEFAULT_CLIENT_HTTP_PORT))
        if http is None:
            log.error("setup: enable_client_http_server=%r / client_http_port=%r: not a bool "
                      "and a port 0..65535", extra.get("enable_client_http_server"),
                      extra.get("client_http_port"))
            return INVALID_PARAMS
        tuning = _config.te_tuning_from_env()  # MC_TE_*, MC_FORCE_TCP, ... as the tools
        try:  # the segments on huge pages, required (upstream's MC_STORE_USE_HUGEPAGE)
            huge = _config.store_hugepage_size()
        except ValueError as e:
            log.error("setup: %s", e)
            return INVALID_PARAMS
        if huge:
            tuning["hugepage_size"] = huge
        rc = self._setup(host, meta, gs, lb, proto, rdma_devices or "", master,
                         extra.get("host_label"), int(extra.get("rpc_timeout_ms", 0)),
                         int(extra.get("transfer_timeout_ms", 0)), hints, lease, feed,
                         tuning or None, client_metric=bool(metric), client_http=http[0],
                         client_http_port=http[1], tenant_id=tenant,
                         ssd_offload_path=ssd_path, not_ready_wait_ms=wait)
        self._local_buffer_size = lb if rc == 0 else None  # what BufferPool sizes itself by
        return rc

    def _setup_from_dict(self, cfg):
        # upstream converts every value of the dict with str() and parses it: a size it cannot
        # read is INVALID_PARAMS, whatever its type
        for k in ("global_segment_size", "local_buffer_size"):
            v = cfg.get(k)
            if v is not None and v != "" and (isinstance(v, bool)
                                               or not isinstance(v, (int, float, str))):
                log.error("setup: %s: cannot parse size %r", k, v)
                return INVALID_PARAMS
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
                                   "replica_hints", "lease_cache", "placement_feed",
                                   "client_metric", "enable_client_http_server",
                                   "client_http_port", "enable_ssd_offload",
                                   "ssd_offload_path", "tenant_id", "not_ready_wait_ms")
               if cfg.get(k) is not None})

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address, timeout_ms=0,
                    max_connections=0):
        """Upstream's standalone mode: attach to a mooncake_client real client on this host
        (server_address "host:port", its --port; the socket is @mooncake_client_<port>.sock)
        as a dummy client. Returns 0, or -1 (logged) when no real client answers, as upstream.

        The dummy shares memory with the real client: a local buffer of local_buffer_size
        bytes, and what alloc_from_mem_pool / MooncakeHostMemAllocator return, once given to
        register_buffer. put_from / get_into on that memory move bytes without a copy through
        the socket; byte puts and gets ship the value in the message (at most 64 MiB a call).
        mem_pool_size is unused, as upstream. Ours: timeout_ms (deadline of every call,
        default 30000) and max_connections (data connections, default 4). MC_AUTH_TOKEN_FILE
        (as for setup()) names the cluster token file the dummy proves to the real client
        (docs/security.md). Like upstream, it first drops any client this object had set up."""
        for name, v in (("mem_pool_size", mem_pool_size),
                        ("local_buffer_size", local_buffer_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise TypeError(f"setup_dummy(): {name} must be a non-negative int, got {v!r}")
        if not isinstance(server_address, str):
            raise TypeError("setup_dummy(): server_address must be str, not "
                            f"{type(server_address).__name__}")
        token_file = _config.te_tuning_from_env().get("auth_token_file")
        st = self._setup_dummy(server_address, local_buffer_size, mem_pool_size,
                               int(timeout_ms), int(max_connections), token_file,
                               _config.store_hugepage_size())
        self._local_buffer_size = local_buffer_size if st == 0 else None
        return 0 if st == 0 else -1

    def alloc_from_mem_pool(self, size):
        """Shared memory of size bytes (address; 0 on failure) that a dummy client can
        register_buffer; release it with MooncakeHostMemAllocator().free(ptr) after
        unregister_buffer. Works on any client (the memory is ordinary mapped memory)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise TypeError(f"alloc_from_mem_pool(): size must be a non-negative int, got {size!r}")
        return _store._shm_alloc(size, _config.store_hugepage_size()) if size else 0

    def dummy_server_stats(self):
        """Ours: on a dummy, its real client's {"dummies", "regions", "region_bytes"}; else a
        negative status."""
        return self._dummy_server_stats()

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Byte ranges of objects into registered buffers: -> results[b][k][f].

        For buffer b, key all_keys[b][k] and fragment f, copy all_sizes[b][k][f] bytes from
        offset all_src_offsets[b][k][f] of the object to all_dst_offsets[b][k][f] in
        buffer_ptrs[b]. Each result is the bytes copied or a negative code, as upstream:
        INVALID_PARAMS for every fragment when the top-level lists differ in length, for every
        fragment of a buffer that is not inside a registered buffer or whose key and offset
        lists differ in length, for every fragment of a key whose three lists differ in length,
        and for one fragment that runs past the object or past the end of the registered
        buffer; a key that cannot be read (OBJECT_NOT_FOUND, ...) gives its code to each of its
        fragments. The result has one row per key and one entry per destination offset (1 where
        a list is missing). Each key is read once, whole and checksum-verified, and its
        fragments are copied out of that read (_read_ranges).
        """
        nb = len(buffer_ptrs)

        def rows(b):
            keys = all_keys[b] if b < len(all_keys) else [None]
            dsts = all_dst_offsets[b] if b < len(all_dst_offsets) else []
            return [[INVALID_PARAMS] * (len(dsts[k]) if k < len(dsts) else 1)
                    for k in range(len(keys))]

        results = [rows(b) for b in range(nb)]
        if not (nb == len(all_keys) == len(all_dst_offsets) == len(all_src_offsets)
                == len(all_sizes)):
            log.error("get_into_ranges: %d buffers but %d key lists, %d dst, %d src, %d size "
                      "lists", nb, len(all_keys), len(all_dst_offsets), len(all_src_offsets),
                      len(all_sizes))
            return results
        key_index = {}
        frag_key, frag_buf, frag_dst, frag_src, frag_size, where = [], [], [], [], [], []
        for b in range(nb):
            ptr = buffer_ptrs[b]
            keys, dsts, srcs, sizes = (all_keys[b], all_dst_offsets[b], all_src_offsets[b],
                                       all_sizes[b])
            if not ptr or self._buffer_room(ptr) == 0:
                if any(len(d) for d in dsts):
                    log.error("get_into_ranges: buffer %d (0x%x) is not inside a registered "
                              "buffer", b, ptr)
                continue
            if not len(keys) == len(dsts) == len(srcs) == len(sizes):
                log.error("get_into_ranges: buffer %d has %d keys but %d dst, %d src, %d size "
                          "lists", b, len(keys), len(dsts), len(srcs), len(sizes))
                continue
            for k, key in enumerate(keys):
                if not len(dsts[k]) == len(srcs[k]) == len(sizes[k]):
                    log.error("get_into_ranges: key %r in buffer %d has %d dst, %d src and %d "
                              "size entries", key, b, len(dsts[k]), len(srcs[k]),
                              len(sizes[k]))
                    continue
                ki = key_index.setdefault(key, len(key_index))
                for f in range(len(dsts[k])):
                    frag_key.append(ki)
                    frag_buf.append(ptr)
                    frag_dst.append(dsts[k][f])
                    frag_src.append(srcs[k][f])
                    frag_size.append(sizes[k][f])
                    where.append((b, k, f))
        if where:
            got = self._read_ranges(list(key_index), frag_key, frag_buf, frag_dst, frag_src,
                                    frag_size)
            for (b, k, f), r in zip(where, got):
                results[b][k][f] = r
        return results

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


__all__ = ["MooncakeDistributedStore", "bind_to_numa_node", "MooncakeHostMemAllocator",
           "ReplicateConfig", "BufferHandle", "ReplicaStatus",
           "ObjectDataType", "SoftPinAction", "TaskType", "TaskStatus", "QueryTaskResponse",
           "BufferPool", "BufferLease", "RegisteredBufferPool", "RegisteredBufferLease",
           "get_alloc_func_addr", "get_free_func_addr",
           "ReplicaDescriptor", "MemoryDescriptor", "DiskDescriptor", "BufferDescriptor",
           "Descriptor",
           "EngramStore", "EngramStoreConfig",
           "parse_size", "default_kv_lease_ttl_ms"]
