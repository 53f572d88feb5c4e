"""``transfer_engine_bench`` console script: execs the Transfer Engine benchmark
(tools/transfer_engine_bench.c) shipped in the package; see mooncake.cli."""
import sys

from .cli import exec_program


def main():
    """``transfer_engine_bench``: upstream's TE bandwidth benchmark (target / initiator)."""
    return exec_program("transfer_engine_bench")


if __name__ == "__main__":
    sys.exit(main())
