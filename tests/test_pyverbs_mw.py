"""An unmodified pyverbs program using memory windows, through ``softrdma run``."""

from __future__ import annotations

import os
import subprocess
import sys

from daemon_helpers import daemon_in_shm

HERE = os.path.dirname(os.path.abspath(__file__))


def test_pyverbs_memory_windows_program():
    with daemon_in_shm("pvmw") as d:
        env = {**d.env}              # (PYTHONPATH kept: `softrdma run` puts the shim in front of it)
        prog = os.path.join(HERE, "pyverbs_programs", "mw.py")
        out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--", sys.executable, prog],
                             env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("OK mw")
