"""Unmodified pyverbs programs through ``softrdma run``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def shm_daemon():
    with daemon_in_shm("pv") as d:
        yield d


def test_pyverbs_path_holds_a_pyverbs_package():
    out = subprocess.run([sys.executable, "-m", "softrdma", "pyverbs-path"], capture_output=True, text=True)
    path = out.stdout.strip()
    assert out.returncode == 0 and os.path.isfile(os.path.join(path, "pyverbs", "__init__.py"))


def test_unmodified_pyverbs_program_runs_through_softrdma_run(shm_daemon):
    prog = os.path.join(HERE, "pyverbs_programs", "rc_all_ops.py")
    env = {**shm_daemon.env}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--", sys.executable, prog], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("OK rxe0")
    if os.geteuid() == 0:           # root: the program saw softrdma's devices in /sys/class/infiniband
        assert "sysfs: ['rxe0'] 0xffff" in out.stdout
    elif os.environ.get("CI") == "true":
        pytest.fail("CI runs as root: the /sys/class overlay must be tested")


def test_tool_names_are_on_path_inside_softrdma_run(shm_daemon):
    out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--", "sh", "-c",
                          "for t in ibv_devinfo rdma ibstat; do command -v $t; done"], env=shm_daemon.env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0
    assert [os.path.basename(p) for p in out.stdout.split()] == ["ibv_devinfo", "rdma", "ibstat"]
    assert all(p.startswith(shm_daemon.run_dir) for p in out.stdout.split())


def test_without_pyverbs_path_the_real_pyverbs_is_not_ours():
    out = subprocess.run([sys.executable, "-c", "import pyverbs"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode != 0 or "softrdma" not in out.stderr     # we never shadow pyverbs unasked


def test_softrdma_run_uses_its_own_interpreter_not_python3_on_path(shm_daemon, tmp_path):
    """A venv that was never activated: PATH's python3 is another one (here one
    that cannot run anything); ``python3`` inside ``softrdma run`` is still
    the interpreter softrdma is installed in."""
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho 'not the right python' >&2\nexit 97\n")
    fake.chmod(0o755)
    prog = os.path.join(HERE, "pyverbs_programs", "rc_all_ops.py")
    env = {**shm_daemon.env, "PATH": f"{tmp_path}:/usr/sbin:/usr/bin:/sbin:/bin"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--", "python3", prog], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("OK rxe0")
    out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--", "sh", "-c",
                          "python -c 'import sys; print(sys.executable)'"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and os.path.samefile(out.stdout.strip(), sys.executable), out
