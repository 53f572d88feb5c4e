"""Mooncake-C Python package.

Drop-in replacements for upstream Mooncake's Python classes:

* ``mooncake.engine.TransferEngine`` - move bytes between registered memory of processes.
* ``mooncake.store.MooncakeDistributedStore`` - put/get objects in the shared DRAM pool.

Library log lines go to the ``logging`` logger named ``"mooncake"``; use
:func:`set_log_level` to change what the library produces (the logger's own level filters
what Python shows).
"""

from . import _core
from ._core import dropped_log_lines, flush_logs, get_log_level, set_log_level, status_name, \
    status_str

__version__ = "0.1.0"


def _log_level_from_env():
    """MC_LOG_LEVEL (debug, info, warn, error, off) sets the library's initial level."""
    import os
    v = os.environ.get("MC_LOG_LEVEL")
    if v:
        try:
            set_log_level(v)
        except ValueError:
            raise ValueError(f"MC_LOG_LEVEL must be debug, info, warn, error or off, got {v!r}") \
                from None


_log_level_from_env()

#: {name: code} for every status the library knows ("OBJECT_NOT_FOUND": -704, ...).
STATUS_CODES = _core.status_codes()

__all__ = ["set_log_level", "get_log_level", "flush_logs", "dropped_log_lines", "status_name",
           "status_str", "STATUS_CODES", "__version__"]
