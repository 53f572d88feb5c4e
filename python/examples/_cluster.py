"""Tiny helper for the examples: use $MOONCAKE_MASTER, or start a private mooncake_master and
one mooncake_client storage server from --bin-dir (stopped by PID at exit)."""
import atexit
import os
import subprocess


def _start(argv, prefix):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    atexit.register(lambda: (p.poll() is None and p.terminate(), p.wait()))
    for line in p.stdout:
        if line.startswith(prefix):
            return p, line.split()
    raise RuntimeError(f"{argv[0]} exited before it was ready")


def master_address(bin_dir=None):
    """Address of a master with at least one storage server."""
    if not bin_dir:
        addr = os.environ.get("MOONCAKE_MASTER") or os.environ.get("MASTER_SERVER")
        if not addr:
            raise SystemExit("set MOONCAKE_MASTER=host:port or pass --bin-dir <build>/bin")
        return addr
    _, words = _start([os.path.join(bin_dir, "mooncake_master"), "--port=0",
                       "--metrics_port=-1", "--wal_dir=", "--log_level=warn"],
                      "mooncake_master listening")
    port = [w.split("=")[1] for w in words if w.startswith("rpc_port=")][0]
    addr = f"127.0.0.1:{port}"
    _start([os.path.join(bin_dir, "mooncake_client"), f"--master_server_address={addr}",
            "--local_hostname=127.0.0.1", "--global_segment_size=256MB", "--log_level=warn"],
           "mooncake_client ready")
    return addr
