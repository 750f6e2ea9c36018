"""``softrdmad --cpu LIST``: the daemon's CPU placement, and the spin budget
its loop gets only when it has CPUs to itself.

A CPU list the daemon cannot use is one line at once (taskset's syntax;
offline CPUs and CPUs outside the starter's own set refused by name); a
daemon started with ``--cpu`` runs there (the kernel's Cpus_allowed_list
of the process); the loop's yield rule is driven with a fake clock."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from shm_helpers import shm_mkdtemp
from softrdma.device import daemon as daemon_mod
from softrdma.device.placement import (CpuListError, check_cpus, format_cpu_list, online_cpus, parse_cpu_list,
                                       should_yield, spin_budget_s)


@pytest.fixture
def run_dir():
    run = shm_mkdtemp("softrdma-cpu-")
    try:
        yield run
    finally:
        try:
            os.kill(int(open(os.path.join(run, "softrdmad.pid")).read()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        shutil.rmtree(run, ignore_errors=True)


def _env(run: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SOFTRDMA_PORT"}
    return {**env, "SOFTRDMA_RUN": run, "SOFTRDMA_AUTOSTART": "0"}


def _daemon(args, run, prefix=()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "softrdma", "daemon", "--port", "0", *args],
                          env=_env(run), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------ the list
@pytest.mark.parametrize("text, cpus", [
    ("0", {0}), ("1,3", {1, 3}), ("2-4", {2, 3, 4}), ("0-7:2", {0, 2, 4, 6}), ("0,2-3,8-12:4", {0, 2, 3, 8, 12}),
    ("5-5", {5}),
])
def test_cpu_list_parses_as_taskset(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", " ", "x", "1-0", "-1", "1:2", "0-3:0", "0,,1", "0x1", "+1", "1-", "1.5"])
def test_cpu_list_refuses_what_taskset_refuses(text):
    with pytest.raises(CpuListError):
        parse_cpu_list(text)


def test_cpu_list_format_is_the_kernels():
    assert format_cpu_list({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7"
    assert format_cpu_list({3}) == "3"


def test_offline_and_disallowed_cpus_are_named():
    with pytest.raises(CpuListError, match=r"^CPUs 2-3 are not online \(online: 0-1\)$"):
        check_cpus(frozenset({1, 2, 3}), online=frozenset({0, 1}), allowed=frozenset({0, 1}))
    with pytest.raises(CpuListError, match=r"^CPU 1 is not allowed to this process \(allowed: 0\)$"):
        check_cpus(frozenset({1}), online=frozenset({0, 1}), allowed=frozenset({0}))
    check_cpus(frozenset({1}), online=frozenset({0, 1}), allowed=frozenset({0, 1}))


# ------------------------------------------------------------------ the CLI
@pytest.mark.parametrize("value", ["x", "1-0", "", "0,,1", "0-1:0", "99999"])
def test_bad_cpu_list_is_one_line_at_once(run_dir, value):
    r = _daemon(["-f", "--cpu", value], run_dir)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("softrdma daemon: error: argument --cpu: "), r.stderr
    assert "Traceback" not in r.stderr
    assert not os.path.exists(os.path.join(run_dir, "softrdmad.pid"))


def test_offline_cpu_is_named_in_one_line(run_dir):
    online = online_cpus()
    beyond = max(online) + 1
    r = _daemon(["-f", "--cpu", f"0,{beyond}"], run_dir)
    assert (r.returncode, r.stderr) == (
        2, f"softrdma daemon: error: argument --cpu: CPU {beyond} is not online (online: {format_cpu_list(online)})\n")


def test_cpu_outside_the_starters_set_is_one_line(run_dir):
    online = sorted(online_cpus())
    if len(online) < 2:
        pytest.skip("needs two CPUs")
    r = _daemon(["-f", "--cpu", str(online[-1])], run_dir, prefix=("taskset", "-c", str(online[0])))
    assert (r.returncode, r.stderr) == (
        2, f"softrdma daemon: error: argument --cpu: CPU {online[-1]} is not allowed to this process "
           f"(allowed: {online[0]})\n")


def test_spin_without_cpu_is_refused(run_dir):
    r = _daemon(["--spin-us", "20"], run_dir)
    assert (r.returncode, r.stderr) == (
        1, "softrdma daemon: --spin-us needs --cpu: on a shared core spinning delays the applications\n")


def _cpus_allowed(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def _log_line(run: str) -> str:
    deadline = time.monotonic() + 30
    path = os.path.join(run, "softrdmad.log")
    while time.monotonic() < deadline:
        for line in open(path):
            if " serving " in line:
                return line
        time.sleep(0.05)
    raise AssertionError(open(path).read())


@pytest.mark.parametrize("spin", [None, "0", "120"])
def test_daemon_runs_on_its_cpu_with_its_spin_budget(run_dir, spin):
    online = sorted(online_cpus())
    last = online[-1]
    args = ["--cpu", str(last)] + (["--spin-us", spin] if spin is not None else [])
    r = _daemon(args, run_dir)                      # background: returns once it serves
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    pid = int(open(os.path.join(run_dir, "softrdmad.pid")).read())
    assert _cpus_allowed(pid) == str(last)
    # a core to itself only if another CPU is left for the applications
    want = 0 if len(online) == 1 else {None: 50, "0": 0, "120": 120}[spin]
    line = _log_line(run_dir)
    assert f"on CPUs {last}, spin {want} us, data path " in line
    # the log says which per-packet loops run: compiled wherever they were built (as by CI's install)
    assert "data path compiled (CRC-32: " in line or os.environ.get("CI") != "true"
    st = subprocess.run([sys.executable, "-m", "softrdma", "daemon", "status"], env=_env(run_dir),
                        capture_output=True, text=True, timeout=60)
    rest = format_cpu_list(set(online) - {last})
    assert st.stdout.splitlines()[-1] == (f"cpus: {last}" + (f" (latency: run the applications with taskset -c "
                                                              f"{rest})" if rest else "")), st.stdout
    stop = subprocess.run([sys.executable, "-m", "softrdma", "daemon", "stop"], env=_env(run_dir),
                          capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr


def test_daemon_on_every_cpu_gets_no_spin_budget(run_dir):
    online = online_cpus()
    r = _daemon(["--cpu", format_cpu_list(online), "--spin-us", "80"], run_dir)
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    pid = int(open(os.path.join(run_dir, "softrdmad.pid")).read())
    assert _cpus_allowed(pid) == format_cpu_list(online)
    assert f"on CPUs {format_cpu_list(online)}, spin 0 us, data path " in _log_line(run_dir)
    os.kill(pid, signal.SIGTERM)


def test_unpinned_daemon_keeps_the_starters_cpus(run_dir):
    r = _daemon([], run_dir)
    assert r.returncode == 0, r.stderr
    pid = int(open(os.path.join(run_dir, "softrdmad.pid")).read())
    assert _cpus_allowed(pid) == format_cpu_list(os.sched_getaffinity(0))
    assert ", spin 0 us, data path " in _log_line(run_dir)
    st = subprocess.run([sys.executable, "-m", "softrdma", "daemon", "status"], env=_env(run_dir),
                        capture_output=True, text=True, timeout=60)
    assert not any(line.startswith("cpus:") for line in st.stdout.splitlines()), st.stdout    # not pinned
    os.kill(pid, signal.SIGTERM)


# ------------------------------------------------------------------ the rule
def test_spin_budget_only_with_cpus_of_its_own():
    two = frozenset({0, 1})
    assert spin_budget_s(None, 50, online=two) == 0.0
    assert spin_budget_s(frozenset({1}), 50, online=two) == 50e-6
    assert spin_budget_s(frozenset({1}), 0, online=two) == 0.0
    assert spin_budget_s(two, 50, online=two) == 0.0            # "pinned" to all: shares them
    assert spin_budget_s(frozenset({0}), 50, online=frozenset({0})) == 0.0


def test_should_yield():
    assert should_yield(10.0, 10.0, 0.0)
    assert not should_yield(10.00001, 10.0, 50e-6)
    assert should_yield(10.000051, 10.0, 50e-6)


class _Clock:
    def __init__(self, t: float):
        self.t = t

    def monotonic(self) -> float:
        return self.t


@pytest.mark.parametrize("budget, after_us, yields", [
    (0.0, 0, True), (0.0, 30, True),                 # unpinned: every empty pass yields
    (50e-6, 0, False), (50e-6, 30, False),           # pinned: keeps the core within the budget
    (50e-6, 51, True), (50e-6, 500, True),           # ... and yields once it is spent
])
def test_daemon_loop_yields_by_the_budget(tmp_path, monkeypatch, budget, after_us, yields):
    d = daemon_mod.Daemon(str(tmp_path / "run"), [], spin_budget_s=budget)
    try:
        clock = _Clock(1000.0)
        monkeypatch.setattr(daemon_mod, "time", clock)
        d.last_busy = d.ticked_at = d.counters_at = clock.t
        clock.t += after_us / 1e6
        n = []
        monkeypatch.setattr(daemon_mod.os, "sched_yield", lambda: n.append(1))
        d.step()                                    # nothing to read: an empty pass
        assert not d.sleeping                       # within SPIN_S: still polling
        assert len(n) == (1 if yields else 0)
    finally:
        monkeypatch.undo()
        d.shutdown()


def test_affinity_the_kernel_refuses_is_one_line(tmp_path, monkeypatch, capsys):
    """A cpuset that changed between the check and the pin: the kernel's
    EINVAL, one line, no daemon."""
    import errno as _errno
    from softrdma.device import main as main_mod, placement

    def refuse(pid, cpus):
        raise OSError(_errno.EINVAL, os.strerror(_errno.EINVAL))
    monkeypatch.setattr(placement.os, "sched_setaffinity", refuse)
    run = str(tmp_path / "run")
    assert main_mod.main(["-f", "--run-dir", run, "--port", "0", "--cpu", "0"]) == 1
    assert capsys.readouterr().err == "softrdmad: --cpu: cannot run on CPUs 0: Invalid argument\n"
    assert not os.path.exists(os.path.join(run, "softrdmad.pid"))
