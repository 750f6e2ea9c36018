"""The README's main job, end to end: `softrdma demo` on the embedded
default device (started in a private run directory, as on first use)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from shm_helpers import shm_dir


def test_demo_runs_every_part(tmp_path):
    run = shm_dir(f"softrdma-demo-{os.getpid()}")
    env = {**os.environ, "SOFTRDMA_RUN": run, "SOFTRDMA_PORT": "0"}     # (never 4791: other daemons may hold it)
    env.pop("SOFTRDMA_AUTOSTART", None)
    try:
        r = subprocess.run([sys.executable, "-m", "softrdma", "demo", "-n", "4", "-s", "8192", "--pp-iters", "50"],
                           env=env, capture_output=True, text=True, timeout=300)
        out = r.stdout
        assert r.returncode == 0, out + r.stderr
        assert "result: both processes exchanged every message" in out
        assert "connected, 5 pings, disconnected" in out
        assert out.count("ping data: rdma-ping-") == 5
        assert "CM messages sent (cm_tx_msgs): req 1, rep 1, rtu 1, dreq 1, drep 1" in out
        assert "started one with rxe0 on lo" in r.stderr           # the embedded default, said once
    finally:
        pid_file = os.path.join(run, "softrdmad.pid")
        if os.path.exists(pid_file):
            pid = int(open(pid_file).read())
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
        shutil.rmtree(run, ignore_errors=True)
