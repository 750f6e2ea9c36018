"""rdma-core's own test suite (Debian's python3-pyverbs, rdma-core 44),
unmodified, on softrdma: what CI holds softrdma to.

The suite is fetched exactly as ``softrdma rdma-core-tests`` without
``--suite`` does it (``apt-get download python3-pyverbs``, ``dpkg -x`` into a
temporary directory, gunzip), and run by the installed command with
``--json`` against a daemon of this test's own (own run directory, own UDP
port).  The test fails on any failure or error, on a run that did not finish,
and on fewer passes than PASS_FLOOR.

It needs root (the suite finds devices in /sys/class/infiniband, which
``softrdma run`` shows only as root) and apt with a package archive that has
python3-pyverbs (the README's test command runs ``apt-get update`` first),
and a writable /proc/sys/vm/nr_hugepages (``--hugepages`` reserves huge
pages for the suite's huge-page tests and gives them back after).
Without them it skips, except in CI (CI=true) as root, where it must run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm

# The fewest passing tests of rdma-core 44's suite softrdma may show (of 273;
# the other 111 are the mlx5/EFA/CUDA/GPU dma-buf/VFIO tests, which skip on
# any non-vendor device, kernel rxe included).
# It is the count softrdma reached when this floor was last raised: raise it
# whenever a change makes more tests pass, never lower it.
PASS_FLOOR = 162

TIMEOUT_S = 1200            # the whole suite takes ~25 s on an idle machine
HUGEPAGES = 32              # reserved for the run (--hugepages): the suite's three huge-page tests


def _cannot_run() -> str:
    if os.geteuid() != 0:
        return "needs root: the suite finds its devices in /sys/class/infiniband"
    missing = [t for t in ("apt-get", "dpkg") if not shutil.which(t)]
    if missing:
        return f"needs apt ({' and '.join(missing)} not found) to fetch python3-pyverbs"
    if not os.access("/proc/sys/vm/nr_hugepages", os.W_OK):
        return "needs a writable /proc/sys/vm/nr_hugepages to reserve huge pages for the run"
    return ""


def _softrdma() -> list[str]:
    """The installed command: the entry point next to this interpreter."""
    exe = os.path.join(os.path.dirname(sys.executable), "softrdma")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "softrdma"]


@pytest.mark.slow
def test_rdma_core_44_suite_from_debian_package(tmp_path):
    why = _cannot_run()
    if why:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:
            pytest.fail(f"CI runs as root with apt: the rdma-core suite must run ({why})")
        pytest.skip(why)
    result = tmp_path / "results.json"
    with daemon_in_shm("rdma-core-suite") as d:         # its own run dir, an ephemeral UDP port
        env = dict(d.env)
        env.pop("PYTHONPATH", None)         # pyverbs must come from softrdma run, as for a user
        env["SOFTRDMA_AUTOSTART"] = "0"     # the daemon is this one, never one the run starts
        proc = subprocess.Popen([*_softrdma(), "rdma-core-tests", "--json", str(result),
                                 "--timeout", str(TIMEOUT_S), "--hugepages", str(HUGEPAGES)],
                                cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=TIMEOUT_S + 120)
        finally:
            if proc.poll() is None:         # it outlived its own --timeout: end it and all it started
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert proc.returncode != 2, (f"the suite could not be fetched (is the package archive reachable? "
                                  f"`apt-get update` first):\n{out}")
    data = json.loads(result.read_text())
    counts = data["counts"]
    assert data["completed"], f"the suite did not run to its end: {data['problem']}\n{out}"
    assert counts["failed"] == 0 and counts["error"] == 0 and counts["unexpected success"] == 0, out
    assert counts["passed"] >= PASS_FLOOR, f"{counts['passed']} passed, fewer than the floor {PASS_FLOOR}\n{out}"
    assert proc.returncode == 0, out


def test_what_keeps_the_suite_from_running(monkeypatch):
    """The skip rule itself: root and apt-get/dpkg, nothing else."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert _cannot_run().startswith("needs root")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "dpkg" else "/usr/bin/" + name)
    assert _cannot_run() == "needs apt (dpkg not found) to fetch python3-pyverbs"
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if p == "/proc/sys/vm/nr_hugepages" else real_access(p, m))
    assert _cannot_run().startswith("needs a writable /proc/sys/vm/nr_hugepages")
    monkeypatch.setattr(os, "access", real_access)
    assert _cannot_run() == ""
