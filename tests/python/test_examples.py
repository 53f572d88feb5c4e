"""The examples in python/examples run to completion against a private master."""
import os
import subprocess
import sys

import pytest

from conftest import bin_path

EXAMPLES = os.path.join(os.environ.get("MC_SOURCE_DIR",
                                       os.path.join(os.path.dirname(__file__), "..", "..")),
                        "python", "examples")


@pytest.mark.parametrize("name,expect", [
    ("put_get.py", "Hello, Mooncake Store!"),
    ("zero_copy_numpy.py", "get_buffer view equal: True | zero copy: True"),
    ("prefill_decode.py", "checksum match: True"),
])
def test_example(name, expect):
    bin_dir = os.path.dirname(bin_path("mooncake_master"))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), "--bin-dir", bin_dir],
                       capture_output=True, text=True, timeout=120, env=env, cwd=EXAMPLES)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-2000:]
    assert expect in r.stdout
