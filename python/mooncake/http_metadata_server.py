"""HTTP metadata server for the transfer engine (``http://HOST:PORT/metadata``).

Upstream Mooncake ships this as a Python (aiohttp) server; here the server is the C program
``mooncake_http_metadata_server`` (tools/mooncake_http_metadata_server.c, same REST protocol:
``GET|PUT|DELETE /metadata?key=K``; also ``GET /health`` and optional persistence), shipped in
the package and driven from here:

* ``main()`` - the ``mooncake_http_metadata_server`` console script and
  ``python -m mooncake.http_metadata_server``. Takes upstream's flags ``--port`` (8080),
  ``--host`` (0.0.0.0) and ``--log-level DEBUG|INFO|WARNING|ERROR|CRITICAL``, plus the C
  program's own (``--persist_path``, ``--log_level``, ``--config_path``); ``--log-level`` is
  translated, everything else is passed through, and the process becomes the C program
  (``os.execv``: signals and exit status are the program's).
* ``KVBootstrapServer(port, host)`` - upstream's class for starting a server from Python:
  ``run()`` starts the program as a child process and returns once it listens (``OSError`` if
  it cannot, e.g. the port is taken; ``port=0`` picks a free port, then in ``.port``),
  ``poll()`` gives ``KVPoll.Success`` while it runs and ``KVPoll.Failed`` otherwise,
  ``close()`` stops it.
"""
import enum
import logging
import os
import re
import subprocess
import sys
import threading
import time

from .cli import exec_program, program_path

PROGRAM = "mooncake_http_metadata_server"

# upstream's --log-level values -> the C program's --log_level
_LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warn", "ERROR": "error",
           "CRITICAL": "error"}

_log = logging.getLogger("mooncake.http_metadata_server")


def translate_args(args):
    """The C program's arguments for upstream-style ``args`` (a list of strings): ``--log-level
    X`` / ``--log-level=X`` becomes ``--log_level=<ours>``; the rest is kept. Raises
    ValueError for a missing or unknown level."""
    out = []
    it = iter(args)
    for a in it:
        if a == "--log-level" or a.startswith("--log-level="):
            if a == "--log-level":
                level = next(it, None)
                if level is None:
                    raise ValueError("--log-level needs a value: "
                                     + "|".join(_LEVELS))
            else:
                level = a.split("=", 1)[1]
            ours = _LEVELS.get(level.upper())
            if ours is None:
                raise ValueError(f"--log-level must be one of {'|'.join(_LEVELS)}, "
                                 f"got {level!r}")
            out.append(f"--log_level={ours}")
        else:
            out.append(a)
    return out


def main(argv=None):
    """Console script: run the metadata server with upstream's or our flags (see the module
    docstring). Returns only on failure (2 for a bad --log-level, 127 if the program cannot
    run)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        args = translate_args(args)
    except ValueError as e:
        print(f"{PROGRAM}: {e}", file=sys.stderr)
        return 2
    if "--help" in args or "-h" in args:
        print(f"(also accepts upstream's --log-level {'|'.join(_LEVELS)}, "
              "mapped to --log_level)\n")
    return exec_program(PROGRAM, args)


class KVPoll(enum.Enum):
    """State of a KVBootstrapServer (upstream's values)."""
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


_LISTENING = re.compile(r"listening on (\S+):(\d+)")


class KVBootstrapServer:
    """An HTTP metadata server in a child process (upstream's class, see the module
    docstring)."""

    def __init__(self, port: int, host: str = "0.0.0.0", persist_path: str = ""):
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in 0..65535, got {port!r}")
        self.port = port
        self.host = host
        self.persist_path = persist_path
        self.process = None
        self.thread = None

    def run(self, timeout: float = 10.0):
        """Start the server and wait until it listens. Returns the thread that relays the
        server's log lines to logging (alive while the server runs). Raises OSError if the
        server exits or does not listen within ``timeout`` seconds."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("server already running")
        cmd = [program_path(PROGRAM), f"--port={self.port}", f"--host={self.host}",
               "--log_level=info"]
        if self.persist_path:
            cmd.append(f"--persist_path={self.persist_path}")
        self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True)
        ready = threading.Event()
        seen = []

        def relay():
            for line in self.process.stderr:
                line = line.rstrip("\n")
                if not ready.is_set():
                    seen.append(line)
                    m = _LISTENING.search(line)
                    if m:
                        self.port = int(m.group(2))
                        ready.set()
                _log.debug("%s", line)
            ready.set()  # the program exited

        self.thread = threading.Thread(target=relay, name="mooncake-metadata-server-log",
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if time.monotonic() > deadline:
                break
        if self.process.poll() is not None or not _LISTENING.search("\n".join(seen)):
            self.close()
            detail = "; ".join(seen[-3:]) or "no output"
            raise OSError(f"HTTP metadata server on {self.host}:{self.port} did not start: "
                          f"{detail}")
        _log.info("HTTP Metadata Server started on %s:%d", self.host, self.port)
        return self.thread

    def poll(self) -> KVPoll:
        """KVPoll.Success while the server runs, KVPoll.Failed otherwise."""
        if self.process is None or self.process.poll() is not None:
            return KVPoll.Failed
        return KVPoll.Success

    def close(self):
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and wait for it."""
        p = self.process
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=2)
        if p is not None and p.stderr is not None:
            p.stderr.close()


if __name__ == "__main__":
    sys.exit(main())
