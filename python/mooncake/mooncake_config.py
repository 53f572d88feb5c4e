"""Upstream's ``mooncake.mooncake_config``: the MooncakeConfig dataclass that upstream's tools
(``mc_store_rest_server``, test scripts) load from a JSON file or the environment.

``MooncakeConfig.from_file(path)`` (JSON; local_hostname, metadata_server and
master_server_address required) and ``MooncakeConfig.load_from_env()``
(``MOONCAKE_CONFIG_PATH`` names such a file; else ``MOONCAKE_MASTER`` is required and
``MOONCAKE_LOCAL_HOSTNAME`` (localhost), ``MOONCAKE_TE_META_DATA_SERVER`` (P2PHANDSHAKE),
``MOONCAKE_GLOBAL_SEGMENT_SIZE`` (3355443200), ``MOONCAKE_LOCAL_BUFFER_SIZE`` (1 GiB),
``MOONCAKE_PROTOCOL`` (tcp), ``MOONCAKE_DEVICE``, ``MOONCAKE_OFFLOAD_ENABLED``,
``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``, ``MOONCAKE_TENANT_ID`` (default),
``MOONCAKE_ENABLE_CLIENT_HTTP_SERVER``, ``MOONCAKE_CLIENT_HTTP_PORT`` (9300) are read), with
upstream's defaults and checks: the protocol is lower-cased (an unknown one only warns), sizes
must not be negative, the three required fields must be non-empty strings (ValueError).
"""
import json
import logging
import os
from dataclasses import dataclass
from typing import Optional

logger = logging.getLogger(__name__)

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1.0 GiB

_SIZE_SUFFIXES = [("kb", 1024), ("mb", 1024 ** 2), ("gb", 1024 ** 3), ("tb", 1024 ** 4),
                  ("k", 1024), ("m", 1024 ** 2), ("g", 1024 ** 3), ("t", 1024 ** 4), ("b", 1)]

_KNOWN_PROTOCOLS = frozenset({"tcp", "rdma", "efa", "nvmeof", "nvlink", "musa", "nvlink_intra",
                              "hip", "barex", "cxl", "ascend", "ub", "ubshmem", "maca",
                              "sunrise_link", "rpc_only", "shm", "auto", "ucx"})
_REQUIRED_NON_EMPTY_FIELDS = ("local_hostname", "metadata_server", "master_server_address")


def _parse_segment_size(value) -> int:
    """Bytes of an int or "512MB" / "1.5g" / "4096" (1024-based, as upstream)."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        s = value.strip().lower()
        if not s:
            raise ValueError("Invalid segment size: empty string")
        for suffix, multiplier in _SIZE_SUFFIXES:
            if s.endswith(suffix):
                num = s[: -len(suffix)].strip()
                if not num:
                    raise ValueError(f"Invalid segment size: missing number before '{suffix}'")
                return int(float(num) * multiplier)
        return int(float(s))
    return int(value)


def _parse_bool(value) -> bool:
    """true/1/yes/on/enable and false/0/no/off/disable ("" and None: False); else ValueError."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    s = str(value).strip().lower()
    if not s:
        return False
    if s in ("true", "1", "yes", "on", "enable"):
        return True
    if s in ("false", "0", "no", "off", "disable"):
        return False
    raise ValueError(f"Invalid boolean value: {value!r}")


@dataclass
class MooncakeConfig:
    """A store client's configuration (upstream's fields and defaults)."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = 9300

    def __post_init__(self):
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError(f"Invalid protocol: {self.protocol!r}. Protocol must be a "
                             "non-empty string, e.g. 'tcp' or 'rdma'.")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in _KNOWN_PROTOCOLS:
            logger.warning("Unrecognised protocol %r; passing it through to the Mooncake "
                           "engine unchanged. Known protocols are: %s.", self.protocol,
                           ", ".join(sorted(_KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"Invalid {name}: {getattr(self, name)}. Size must be "
                                 "non-negative.")
        for name in _REQUIRED_NON_EMPTY_FIELDS:
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"Config field {name!r} must be a non-empty string, got {v!r}.")

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """Load the config from a JSON file."""
        with open(file_path) as fin:
            config = json.load(fin)
        if not isinstance(config, dict):
            raise ValueError(f"{file_path}: the config must be a JSON object")
        for field in _REQUIRED_NON_EMPTY_FIELDS:
            if field not in config:
                raise ValueError(f"Missing required config field: {field}")
        ssd_offload_path = config.get("ssd_offload_path")
        tenant_id = config.get("tenant_id")
        return MooncakeConfig(
            local_hostname=config.get("local_hostname"),
            metadata_server=config.get("metadata_server"),
            global_segment_size=_parse_segment_size(
                config.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=config.get("protocol", "tcp"),
            device_name=config.get("device_name", ""),
            master_server_address=config.get("master_server_address"),
            enable_ssd_offload=_parse_bool(config.get("enable_ssd_offload", False)),
            ssd_offload_path=str(ssd_offload_path) if ssd_offload_path is not None else "",
            tenant_id=str(tenant_id) if tenant_id is not None else "default",
            enable_client_http_server=_parse_bool(config.get("enable_client_http_server",
                                                             False)),
            client_http_port=int(config.get("client_http_port", 9300)),
        )

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """MOONCAKE_CONFIG_PATH's file, else the MOONCAKE_* variables (module doc)."""
        config_file_path = os.getenv("MOONCAKE_CONFIG_PATH")
        if config_file_path is not None:
            return MooncakeConfig.from_file(config_file_path)
        if not os.getenv("MOONCAKE_MASTER"):
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                             "'MOONCAKE_MASTER' is set.")
        return MooncakeConfig(
            local_hostname=os.getenv("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=os.getenv("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                os.getenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                os.getenv("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=os.getenv("MOONCAKE_PROTOCOL", "tcp"),
            device_name=os.getenv("MOONCAKE_DEVICE", ""),
            master_server_address=os.getenv("MOONCAKE_MASTER"),
            enable_ssd_offload=_parse_bool(os.getenv("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=os.getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=os.getenv("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(
                os.getenv("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")),
            client_http_port=int(os.getenv("MOONCAKE_CLIENT_HTTP_PORT", 9300)),
        )
