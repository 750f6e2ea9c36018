"""The daemon as a user drives it: started by hand it hosts no device until
``rdma link add`` (as ``modprobe rdma_rxe``), ``status`` and ``stop`` see
and end it, and a UDP port someone else holds is one line at once -- from
the daemon, from ``rdma link add``, and from a tool, ``softrdma run`` or
``softrdma demo`` whose autostart it stops.  The port is held by a plain
UDP socket on 127.0.0.1 at a free port; every daemon gets its own run
directory."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from netns_helpers import need_root
from shm_helpers import shm_mkdtemp

#: a failed start must be reported at once, not after a start-up timeout
PROMPT_S = 5.0


@pytest.fixture
def run_dir():
    run = shm_mkdtemp("softrdma-cli-")
    try:
        yield run
    finally:
        _kill_daemon(run)
        shutil.rmtree(run, ignore_errors=True)


def _kill_daemon(run: str) -> None:
    """Whatever daemon a test left in ``run`` (a failed test): SIGKILL, reaped by init."""
    try:
        pid = int(open(os.path.join(run, "softrdmad.pid")).read())
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


@pytest.fixture
def held_port():
    """A UDP port on 127.0.0.1 that a plain socket holds."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def _exited(pid: int) -> bool:
    """``pid`` has ended (reaped, or a zombie its new parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _env(run: str, **kw) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SOFTRDMA_PORT"}
    return {**env, "SOFTRDMA_RUN": run, "SOFTRDMA_AUTOSTART": "0", **kw}


def _softrdma(args, env, timeout=60) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "softrdma", *args], env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def _in_use_line(port: int, prog: str) -> str:
    return (f"{prog}: UDP 127.0.0.1:{port} is already in use (another softrdmad, the kernel's rxe or another "
            f"program holds it): use the run directory of the daemon that serves it (SOFTRDMA_RUN or "
            f"--run-dir), or start this one with another --port or on another netdev")


def test_hand_started_daemon_hosts_no_device_until_link_add(run_dir):
    need_root()                                     # rdma link add: CAP_NET_ADMIN
    env = _env(run_dir)
    r, _ = _softrdma(["daemon", "--port", "0"], env)        # background: returns once it serves
    assert r.returncode == 0 and r.stderr == "", r.stderr
    pid = int(open(os.path.join(run_dir, "softrdmad.pid")).read())
    st, _ = _softrdma(["daemon", "status"], env)
    assert st.returncode == 0
    assert st.stdout.splitlines() == [
        f"softrdma daemon: running, pid {pid}, run dir {run_dir}",
        "devices: none (add one: softrdma rdma link add rxe0 type rxe netdev NETDEV)"]
    dev, _ = _softrdma(["ibv_devices"], env)
    assert "rxe0" not in dev.stdout
    add, _ = _softrdma(["rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "lo"], env)
    assert (add.returncode, add.stdout, add.stderr) == (0, "", "")
    link, _ = _softrdma(["rdma", "link"], env)
    assert link.stdout.startswith("link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo"), link.stdout
    st, _ = _softrdma(["daemon", "status"], env)
    assert st.stdout.splitlines()[1] == "devices: rxe0 (netdev lo)"
    sp, _ = _softrdma(["daemon", "stop"], env)
    assert (sp.returncode, sp.stdout, sp.stderr) == (0, "", "")
    assert _exited(pid)                              # gone when stop returns
    assert not os.path.exists(os.path.join(run_dir, "softrdmad.sock"))
    sp, _ = _softrdma(["daemon", "stop"], env)
    assert (sp.returncode, sp.stderr) == (1, f"softrdma daemon: not running (run dir {run_dir})\n")
    st, _ = _softrdma(["daemon", "status"], env)
    assert (st.returncode, st.stdout) == (3, f"softrdma daemon: not running (run dir {run_dir})\n")


@pytest.mark.parametrize("mode", [["-f"], []], ids=["foreground", "background"])
def test_daemon_on_a_held_port_exits_at_once_with_one_line(run_dir, held_port, mode):
    r, took = _softrdma(["daemon", *mode, "--port", str(held_port), "--device", "rxe0:lo"], _env(run_dir))
    assert r.returncode == 1
    assert r.stderr == _in_use_line(held_port, "softrdma daemon") + "\n"
    assert took < PROMPT_S
    assert not os.path.exists(os.path.join(run_dir, "softrdmad.pid"))
    assert not os.path.exists(os.path.join(run_dir, "softrdmad.sock"))


def test_link_add_on_a_held_port_is_eaddrinuse_and_the_daemon_lives(run_dir, held_port):
    need_root()
    env = _env(run_dir)
    r, _ = _softrdma(["daemon", "--port", str(held_port)], env)      # no device: nothing to bind yet
    assert r.returncode == 0, r.stderr
    add, took = _softrdma(["rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "lo"], env)
    assert add.returncode == 1
    assert add.stderr == ("Error: " + _in_use_line(held_port, "x").removeprefix("x: ") + "\n"
                          "error: Address already in use\n")
    assert took < PROMPT_S
    st, _ = _softrdma(["daemon", "status"], env)
    assert st.returncode == 0 and st.stdout.splitlines()[1].startswith("devices: none"), st.stdout
    sp, _ = _softrdma(["daemon", "stop"], env)
    assert sp.returncode == 0, sp.stderr


def test_autostart_on_a_held_port_fails_at_once_with_the_reason(run_dir, held_port):
    env = _env(run_dir, SOFTRDMA_PORT=str(held_port))
    env.pop("SOFTRDMA_AUTOSTART")
    line = _in_use_line(held_port, "softrdma daemon")
    tool, took = _softrdma(["ibv_devinfo"], env)
    assert tool.returncode != 0
    assert tool.stderr.splitlines()[0] == line
    assert "Traceback" not in tool.stderr
    assert took < PROMPT_S
    run, took = _softrdma(["run", "--", "true"], env)
    assert (run.returncode, run.stderr) == (1, line + "\n")
    assert took < PROMPT_S
    demo, took = _softrdma(["demo", "-n", "2", "-s", "1024"], env, timeout=300)
    assert demo.returncode == 1
    assert demo.stdout.splitlines()[-1] == "softrdma demo: no device: " + line
    assert "SOFTRDMA_AUTOSTART" not in demo.stdout + demo.stderr
    assert not os.path.exists(os.path.join(run_dir, "softrdmad.pid"))


def test_demo_without_daemon_and_autostart_off_says_so(run_dir):
    demo, _ = _softrdma(["demo", "-n", "2", "-s", "1024"], _env(run_dir), timeout=300)
    assert demo.returncode == 1
    assert demo.stdout.splitlines()[-1] == (f"softrdma demo: no device: no softrdmad serves {run_dir} "
                                            "and SOFTRDMA_AUTOSTART=0")


def _nice(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[16])      # field 19: nice


@pytest.mark.parametrize("args, prefix, want", [
    ((), (), -10),                                  # the default: a NIC's work runs ahead of user processes
    (("--nice", "-3"), (), -3),
    (("--nice", "5"), (), 0),                       # never lowers the priority it was started with
    ((), ("setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"), 0),   # not allowed: serves as it is
])
def test_daemon_raises_its_priority_where_it_may(run_dir, args, prefix, want):
    need_root()
    env = _env(run_dir)
    log = open(os.path.join(run_dir, "test-daemon.log"), "w")
    p = subprocess.Popen([*prefix, sys.executable, "-m", "softrdma", "daemon", "-f", "--port", "0", *args],
                         env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        pid_file = os.path.join(run_dir, "softrdmad.pid")
        deadline = time.monotonic() + 60
        while not os.path.exists(pid_file):
            assert p.poll() is None and time.monotonic() < deadline, open(log.name).read()
            time.sleep(0.02)
        assert _nice(p.pid) == want
        assert f"(nice {want})" in open(log.name).read()
    finally:
        p.terminate()
        p.wait(30)
        log.close()


def test_daemon_nice_out_of_range_is_one_line(run_dir):
    r, _ = _softrdma(["daemon", "--nice", "-21"], _env(run_dir))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--nice" in r.stderr, r.stderr
