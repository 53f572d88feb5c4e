"""``mooncake.engine``: the Transfer Engine with upstream Mooncake's Python API.

Every method returns what upstream returns: 0 or a negative status code for operations, batch
ids for async submissions (0 when the submission failed), 0 for failed allocations / unknown
segments. Local addresses given to transfers and to write_bytes_to_buffer/read_bytes_from_buffer
must be inside memory registered through the same engine (register_memory,
batch_register_memory or allocate_managed_buffer); anything else gets a negative code instead
of a crash.
"""

import enum
import json
import os

from . import _config
from ._engine import TransferEngine as _TransferEngineBase

# Compile-time features of upstream builds; Mooncake-C moves host memory only.
SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False
SUPPORT_MUSA = False


class TransferOpcode(enum.IntEnum):
    """Upstream spells the members Read and Write (READ and WRITE are aliases)."""
    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


# upstream's enum also exports its values into the module
Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification (name, msg) sent with transfer_sync / batch_transfer_sync: the target
    engine receives it once the transfer completed and returns it from get_notifies().
    name and msg are str (or bytes); at most NOTIFY_NAME_MAX and NOTIFY_MSG_MAX bytes."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __eq__(self, other):
        if not isinstance(other, TransferNotify):
            return NotImplemented
        return self.name == other.name and self.msg == other.msg

    __hash__ = None

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


# caps of include/mooncake/te.h (MC_TE_NOTIFY_*)
NOTIFY_NAME_MAX = 4096
NOTIFY_MSG_MAX = 65536
NOTIFY_QUEUE_MAX = 4096


# ---- local topology (get_local_topology) ---------------------------------------------------
#
# Read from sysfs only; a file that is missing or unreadable leaves its field out (or at
# upstream's default, -1 / ""), never raises. Two shapes, as upstream:
#   classic (upstream's default engine): {"cpu:<node>": [[RDMA devices on that node],
#            [the other RDMA devices]], ...}, one key per NUMA node ("cuda:<n>" keys for GPUs:
#            none here);
#   native  (upstream with MC_USE_TENT / MC_USE_TEV1): {"nics": [{name, pci_bus_id,
#            type (0 RDMA, 1 TCP), numa_node, speed_mbps?}], "mems": [{name "cpu:<node>",
#            pci_bus_id "", type 0 (host), numa_node, cpus?, device_list: {rank0: [nic
#            indexes on that node], rank1: [the others], rank2: []}}]}.
# Network interfaces (every one in /sys/class/net but lo) appear only in the native shape; the
# classic one lists RDMA devices only.

def _read_text(path):
    try:
        with open(path, "r", encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _read_int(path):
    text = _read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _is_pci_address(name):
    # dddd:bb:dd.f
    parts = name.split(":")
    return len(parts) == 3 and "." in parts[2]


def _device_info(sysfs, class_dir, name):
    """(numa_node, pci_bus_id) of /sys/class/<class>/<name>: the nearest ancestor of its device
    (below the sysfs root) that has a numa_node file / a PCI address; (-1, "") when unknown."""
    numa, pci = -1, ""
    try:
        root = os.path.realpath(sysfs)
        path = os.path.realpath(os.path.join(class_dir, name))
    except (OSError, ValueError):
        return numa, pci
    found_numa = False
    while path.startswith(root + os.sep):
        base = os.path.basename(path)
        if not pci and _is_pci_address(base):
            pci = base
        if not found_numa:
            v = _read_int(os.path.join(path, "numa_node"))
            if v is not None:
                numa, found_numa = v, True
        if found_numa and pci:
            break
        path = os.path.dirname(path)
    return numa, pci


def _read_topology(sysfs="/sys", device_name=None):
    """What this host has, from sysfs: NUMA nodes, network interfaces, RDMA devices."""
    wanted = None
    if device_name:
        wanted = {d.strip() for d in device_name.split(",") if d.strip()} or None
    nodes = []
    node_dir = os.path.join(sysfs, "devices", "system", "node")
    for entry in _listdir(node_dir):
        if not entry.startswith("node") or not entry[4:].isdigit():
            continue
        node = {"id": int(entry[4:])}
        cpus = _read_text(os.path.join(node_dir, entry, "cpulist"))
        if cpus:
            node["cpus"] = cpus
        nodes.append(node)
    nodes.sort(key=lambda n: n["id"])
    rdma = []
    ib_dir = os.path.join(sysfs, "class", "infiniband")
    for name in _listdir(ib_dir):
        if wanted is not None and name not in wanted:
            continue
        numa, pci = _device_info(sysfs, ib_dir, name)
        rdma.append({"name": name, "pci_bus_id": pci, "type": 0, "numa_node": numa})
    nics = []
    net_dir = os.path.join(sysfs, "class", "net")
    for name in _listdir(net_dir):
        if name == "lo":
            continue
        numa, pci = _device_info(sysfs, net_dir, name)
        nic = {"name": name, "pci_bus_id": pci, "type": 1, "numa_node": numa}
        speed = _read_int(os.path.join(net_dir, name, "speed"))
        if speed is not None and speed > 0:
            nic["speed_mbps"] = speed
        nics.append(nic)
    return {"nodes": nodes, "rdma": rdma, "nics": nics}


def _topology_classic(topo):
    out = {}
    for node in topo["nodes"]:
        preferred = [d["name"] for d in topo["rdma"] if d["numa_node"] == node["id"]]
        avail = [d["name"] for d in topo["rdma"] if d["numa_node"] != node["id"]]
        out[f"cpu:{node['id']}"] = [preferred, avail]
    return out


def _topology_native(topo):
    nics = topo["rdma"] + topo["nics"]
    mems = []
    for node in topo["nodes"]:
        mem = {"name": f"cpu:{node['id']}", "pci_bus_id": "", "type": 0,
               "numa_node": node["id"]}
        if "cpus" in node:
            mem["cpus"] = node["cpus"]
        mem["device_list"] = {
            "rank0": [i for i, n in enumerate(nics) if n["numa_node"] == node["id"]],
            "rank1": [i for i, n in enumerate(nics) if n["numa_node"] != node["id"]],
            "rank2": [],
        }
        mems.append(mem)
    return {"nics": nics, "mems": mems}


def local_topology(device_name=None, native=None, sysfs="/sys"):
    """The JSON text get_local_topology returns (see the comment above for both shapes).
    native=None follows upstream: the native shape when MC_USE_TENT or MC_USE_TEV1 is set."""
    if native is None:
        native = bool(os.environ.get("MC_USE_TENT") or os.environ.get("MC_USE_TEV1"))
    topo = _read_topology(sysfs, device_name)
    return json.dumps(_topology_native(topo) if native else _topology_classic(topo))


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

    TransferOpcode = TransferOpcode

    def get_engine(self):
        """Upstream returns the inner engine for store reuse; here the engine itself."""
        return self

    def get_engine_ptr(self):
        """Upstream returns the address of its C++ TransferEngine; this engine is not that
        object, so no pointer is handed out."""
        raise NotImplementedError("get_engine_ptr: Mooncake-C's engine is not upstream's C++ "
                                  "TransferEngine; share the engine with get_engine()")

    def get_notifies(self):
        """Notifications received since the last call (TransferNotify, oldest first); the
        queue holds at most NOTIFY_QUEUE_MAX, later ones are refused to their senders until it
        is drained (notify_stats() counts them)."""
        return [TransferNotify(name, msg) for name, msg in self._drain_notifies()]

    def get_local_topology(self, device_name=None, native=None):
        """This host's topology as JSON text, in upstream's shape: by default the classic NIC
        priority matrix {"cpu:<node>": [[RDMA devices near], [other RDMA devices]]}; with
        native=True (or MC_USE_TENT / MC_USE_TEV1 set, as upstream) {"nics": [...],
        "mems": [...]}, which also lists the network interfaces. device_name: comma-separated
        RDMA device names to keep. Needs no initialize()."""
        return local_topology(device_name, native)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "Read", "Write",
           "SUPPORT_CUDA", "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_INTRA_NVLINK",
           "SUPPORT_MUSA",
           "NOTIFY_NAME_MAX", "NOTIFY_MSG_MAX", "NOTIFY_QUEUE_MAX"]
