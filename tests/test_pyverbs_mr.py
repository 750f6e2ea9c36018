"""An unmodified pyverbs program using MR rereg and device memory, through ``softrdma run``."""

from __future__ import annotations

import os
import subprocess
import sys

from daemon_helpers import daemon_in_shm

HERE = os.path.dirname(os.path.abspath(__file__))


def test_pyverbs_mr_rereg_and_device_memory_program():
    with daemon_in_shm("pvmr") as d:
        env = {**d.env}
        prog = os.path.join(HERE, "pyverbs_programs", "mr_rereg_dm.py")
        out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--", sys.executable, prog],
                             env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("OK mr rereg dm")
