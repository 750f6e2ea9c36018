"""Every console script pyproject.toml declares works from a real
(non-editable) install: the wheel is built once for this module from a copy
of the project, installed with ``pip install --no-deps --target``, and each
script runs from that install's bin directory -- ``--help`` for every one
(the table is read with tomllib, so a new script is covered at once), and
``softrdmad -f`` serving, seen by ``softrdmad status`` and ended by
``softrdmad stop``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as _f:
    SCRIPTS = tomllib.load(_f)["project"]["scripts"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin dir, env) of a non-editable install of this checkout."""
    base = tmp_path_factory.mktemp("install")
    src = base / "project"
    src.mkdir()
    # a copy: building in the checkout would leave build/ behind
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "src"), src / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    target = base / "target"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {**os.environ, "PYTHONPATH": str(target), "SOFTRDMA_AUTOSTART": "0",
           "SOFTRDMA_RUN": str(base / "run")}
    where = subprocess.run([sys.executable, "-c", "import softrdma; print(softrdma.__file__)"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr     # the install, not the checkout
    return target / "bin", env


def test_scripts_are_declared():
    assert {"softrdma", "softrdmad"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help(installed, script):
    bin_dir, env = installed
    r = subprocess.run([str(bin_dir / script), "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"usage: {script}"), r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_softrdmad_serves_and_stops(installed, tmp_path):
    bin_dir, env = installed
    run = str(tmp_path / "run")
    log = open(tmp_path / "softrdmad.log", "w")
    proc = subprocess.Popen([str(bin_dir / "softrdmad"), "-f", "--run-dir", run, "--port", "0",
                             "--device", "rxe0:lo"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        pid_file = os.path.join(run, "softrdmad.pid")
        end = time.monotonic() + 60
        while not os.path.exists(pid_file):
            assert proc.poll() is None, open(log.name).read()
            assert time.monotonic() < end, open(log.name).read()
            time.sleep(0.02)
        st = subprocess.run([str(bin_dir / "softrdmad"), "status", "--run-dir", run], env=env,
                            capture_output=True, text=True, timeout=60)
        assert st.returncode == 0, st.stdout + st.stderr
        assert st.stdout.splitlines() == [f"softrdmad: running, pid {proc.pid}, run dir {run}",
                                          "devices: rxe0 (netdev lo)"]
        dev = subprocess.run([str(bin_dir / "softrdma"), "ibv_devices"], env={**env, "SOFTRDMA_RUN": run},
                             capture_output=True, text=True, timeout=60)
        assert dev.returncode == 0 and "rxe0" in dev.stdout, dev.stdout + dev.stderr
        sp = subprocess.run([str(bin_dir / "softrdmad"), "stop", "--run-dir", run], env=env,
                            capture_output=True, text=True, timeout=60)
        assert sp.returncode == 0, sp.stdout + sp.stderr
        assert proc.wait(30) == 0
        assert not os.path.exists(pid_file) and not os.path.exists(os.path.join(run, "softrdmad.sock"))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        log.close()
