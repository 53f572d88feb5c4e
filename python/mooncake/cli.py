"""Console scripts of the package: each one execs a C program installed inside the package.

``pip install ./python`` installs these commands (``[project.scripts]`` in pyproject.toml),
with upstream Mooncake's names and flags:

=================================  ==============================  ==============================
command                            entry point                     program (``mooncake/bin/``)
=================================  ==============================  ==============================
``mooncake_master``                ``mooncake.cli:main``           ``mooncake_master``
``mooncake_client``                ``mooncake.cli_client:main``    ``mooncake_client``
``transfer_engine_bench``          ``mooncake.cli_bench:main``     ``transfer_engine_bench``
``mooncake_http_metadata_server``  ``mooncake.http_metadata_server:main``
                                                                   ``mooncake_http_metadata_server``
=================================  ==============================  ==============================

setup.py copies the programs from the CMake build into ``mooncake/bin/``. The process is
replaced (``os.execv``): arguments, signals, standard streams and the exit status are the
program's own, so ``mooncake_master`` under a supervisor behaves like the C binary.
"""
import os
import stat
import sys

#: Programs shipped in mooncake/bin/.
PROGRAMS = ("mooncake_master", "mooncake_client", "transfer_engine_bench",
            "mooncake_http_metadata_server")


def program_path(name):
    """Absolute path of the installed program ``name`` (one of PROGRAMS)."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown program {name!r}; one of {', '.join(PROGRAMS)}")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)


def exec_program(name, args=None):
    """Replace this process with the program ``name`` run with ``args`` (default: this
    command's arguments, ``sys.argv[1:]``). Returns only on failure, with exit status 127
    after a message on stderr (the shell's status for a command it cannot run)."""
    path = program_path(name)
    args = sys.argv[1:] if args is None else list(args)
    if not os.path.isfile(path):
        print(f"{name}: {path} is missing: the package was installed without its programs; "
              f"reinstall it (pip install ./python, see python/README.md)", file=sys.stderr)
        return 127
    if not os.access(path, os.X_OK):  # an archive that lost the executable bits
        try:
            mode = os.stat(path).st_mode
            os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(path, [path] + args)
    except OSError as e:
        print(f"{name}: cannot run {path}: {e.strerror}", file=sys.stderr)
        return 127
    return 127  # not reached


def main():
    """``mooncake_master``: the master service (tools/mooncake_master.c)."""
    return exec_program("mooncake_master")


if __name__ == "__main__":
    sys.exit(main())
