"""``mooncake_client`` console script: execs the storage server program
(tools/mooncake_client.c) shipped in the package; see mooncake.cli."""
import sys

from .cli import exec_program


def main():
    """``mooncake_client``: a storage server contributing DRAM to the store pool."""
    return exec_program("mooncake_client")


if __name__ == "__main__":
    sys.exit(main())
