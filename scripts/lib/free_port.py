"""Free TCP ports for tests and scripts (one place: tests/python/conftest.py re-exports
free_port, scripts/lib/cluster.sh runs this file)."""


def free_port():
    """A loopback TCP port free now, below the kernel's ephemeral range
    (net.ipv4.ip_local_port_range), so no process's outgoing connection can take it: a server
    restarted on its old port (a master after kill -9) finds it free again. Bound without
    SO_REUSEADDR on every address, so a port any socket still holds is skipped."""
    import random
    import socket
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(10000, low) if low > 10000 else 0
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port below the ephemeral range")


if __name__ == "__main__":
    print(free_port())
