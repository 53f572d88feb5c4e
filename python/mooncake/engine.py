"""``mooncake.engine``: the Transfer Engine with upstream Mooncake's Python API.

Every method returns what upstream returns: 0 or a negative status code for operations, batch
ids for async submissions, 0 for failed allocations / unknown segments. Local addresses given to
transfers and to write_bytes_to_buffer/read_bytes_from_buffer must be inside memory registered
through the same engine (register_memory, batch_register_memory or allocate_managed_buffer);
anything else gets a negative code instead of a crash.
"""

import enum
import json

from . import _config
from ._engine import TransferEngine as _TransferEngineBase

# Compile-time features of upstream builds; Mooncake-C moves host memory only.
SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False


class TransferOpcode(enum.IntEnum):
    READ = 0
    WRITE = 1


class TransferNotify:
    """Upstream's notification message. Mooncake-C does not deliver notifications: transfers
    given one return NOT_SUPPORTED and get_notifies() is always empty."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


class TransferEngine(_TransferEngineBase):
    """Transfer Engine. Create, then initialize(local_hostname, metadata_server, protocol,
    device_name)."""

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Start the engine. Returns 0 or a negative status.

        local_hostname: "host" or "host:port" (no port: a free one is chosen; see
        get_rpc_port()/get_local_hostname()). metadata_server: "P2PHANDSHAKE",
        "http://host:port/metadata", "etcd://host:port" or bare "host:port" (etcd); empty uses
        $MC_METADATA_SERVER. protocol: "tcp", "shm", "auto", "ucx" ("rdma" maps to "auto").
        device_name is accepted for compatibility and ignored.
        """
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, "")

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type):
        if local_hostname is not None and not isinstance(local_hostname, str):
            raise TypeError("local_hostname must be str, not " + type(local_hostname).__name__)
        if device_name is not None and not isinstance(device_name, str):
            raise TypeError("device_name must be str, not " + type(device_name).__name__)
        host = local_hostname or _config.env_first("LOCAL_HOSTNAME") or "127.0.0.1"
        meta = _config.normalize_metadata(metadata_server, metadata_type)
        proto = _config.normalize_protocol(protocol)
        # tuning from MC_TE_* and friends; upstream's MC_TRANSFER_TIMEOUT (seconds) wins over
        # MC_TE_TIMEOUT_MS when both are set
        tuning = _config.te_tuning_from_env()
        timeout_ms = _config.transfer_timeout_ms()
        if timeout_ms:
            tuning["transfer_timeout_ms"] = timeout_ms
        return self._create(host, meta, proto, **tuning)

    def get_engine(self):
        """Upstream returns the inner engine for store reuse; here the engine itself."""
        return self

    def get_notifies(self):
        """Notifications are not supported by Mooncake-C: always []."""
        return []

    def get_local_topology(self, device_name=None):
        """Mooncake-C has no RDMA topology: a JSON object with the host memory location."""
        return json.dumps({"cpu:0": {"type": "host"}})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "SUPPORT_CUDA", "SUPPORT_EFA",
           "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_INTRA_NVLINK"]
