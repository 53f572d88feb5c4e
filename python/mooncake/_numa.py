"""bind_to_numa_node(node), as upstream's mooncake.store exposes it: run the calling thread on
the CPUs of one NUMA node and prefer that node for its future memory allocations (falling back
to other nodes when it is full). Like upstream it never raises for a bad or missing node: it
logs a warning and leaves the thread as it was. Reads /sys/devices/system/node; the memory
preference is the kernel's set_mempolicy(MPOL_PREFERRED) (no libnuma needed)."""
import ctypes
import logging
import os
import platform

log = logging.getLogger("mooncake")

_NODE_DIR = "/sys/devices/system/node"
_MPOL_PREFERRED = 1
# set_mempolicy's system call number (the C library has no wrapper; libnuma's is a thin one).
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270}


def _parse_cpulist(text):
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def node_cpus(node):
    """The CPUs of NUMA node `node` (a set), or None when the node does not exist."""
    try:
        with open(f"{_NODE_DIR}/node{int(node)}/cpulist", encoding="ascii") as f:
            return _parse_cpulist(f.read())
    except (OSError, ValueError):
        return None


def _prefer_node(node):
    nr = _SYS_SET_MEMPOLICY.get(platform.machine())
    if nr is None or node >= 64:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1 << node)
    # maxnode counts bits, and the kernel reads one less than given
    return libc.syscall(nr, _MPOL_PREFERRED, ctypes.byref(mask), ctypes.c_ulong(65)) == 0


def bind_to_numa_node(node):
    """Run the calling thread on NUMA node `node`'s CPUs and prefer its memory. Returns None;
    a node that does not exist (or has no CPUs) only logs a warning, as upstream."""
    if isinstance(node, bool) or not isinstance(node, int):
        raise TypeError(f"bind_to_numa_node(): node must be int, not {type(node).__name__}")
    if not os.path.isdir(_NODE_DIR):
        log.warning("NUMA is not available on this system; binding skipped")
        return
    cpus = node_cpus(node) if node >= 0 else None
    if not cpus:
        nodes = sorted(int(d[4:]) for d in os.listdir(_NODE_DIR)
                       if d.startswith("node") and d[4:].isdigit())
        log.warning("Invalid NUMA node: %d. Valid nodes: %s", node, nodes)
        return
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        log.warning("cannot run on NUMA node %d's CPUs: %s", node, e)
    if not _prefer_node(node):
        log.warning("cannot set the preferred memory node to %d (errno %d)", node,
                    ctypes.get_errno())
