"""transfer_engine_topology_dump: prints this host's topology as the transfer engine sees it
(TransferEngine.get_local_topology: NUMA nodes, NICs, RDMA devices) as JSON, like upstream's
console script of the same name."""
import argparse
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="transfer_engine_topology_dump",
                                 description="Print this host's topology (NUMA nodes, NICs, "
                                             "RDMA devices) as the transfer engine sees it.")
    ap.add_argument("--native", action="store_true",
                    help="the {nics, mems} shape instead of upstream's default cpu:N shape")
    ap.add_argument("--device_name", default=None, help="RDMA device filter (comma list)")
    args = ap.parse_args(argv)
    from .engine import TransferEngine
    text = TransferEngine().get_local_topology(args.device_name, native=args.native)
    json.dump(json.loads(text), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
