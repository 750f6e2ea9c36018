"""Session-wide rules: the suite ends every process it started.

Every process a test starts carries a marker in its environment
(SOFTRDMA_TEST_SESSION, unique to this pytest run) and is a descendant of
pytest unless it daemonized.  At the end of the session whatever is still
alive among those -- a daemon a test gave up on, a server whose client
failed -- is killed, and the run FAILS naming each one (with the test that
started it, from the PYTEST_CURRENT_TEST its environment inherited).  So are
network namespaces and host interfaces this run made (tests name them
srdma-<letters><pytest's pid % 100000>) and did not delete.  Only processes of this
session are ever touched: another test run on the same machine (its own
marker, its own process tree) is left alone.

The default run directory (SOFTRDMA_RUN) is one of this session's own, so
that a tool a test starts without naming one never autostarts, or talks to,
the user's daemon or another run's.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))          # the helper modules, for every test file

import shm_helpers  # noqa: E402  (found through the line above)

MARK = "SOFTRDMA_TEST_SESSION"


def pytest_collection_modifyitems(config, items):
    """The interop tests (they need a VM with kernel rxe) run only when -m
    names them, so that any other -m ("not slow") still leaves them out."""
    if "interop" in (config.option.markexpr or ""):
        return
    keep = [i for i in items if i.get_closest_marker("interop") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("interop") is not None])
        items[:] = keep


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # comm may hold spaces and parentheses: the fields after the last ')'
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z":                       # already dead, only not reaped
                continue
            kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def _descendants(root: int) -> set[int]:
    kids, out, todo = _children_map(), set(), [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def session_processes(token: str) -> set[int]:
    """Live processes this session started: pytest's descendants, and any
    process (a daemonized softrdmad, say) whose environment carries this
    session's marker."""
    me = os.getpid()
    found = _descendants(me)
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me and int(name) not in found:
            if _environ(int(name)).get(MARK) == token and _alive(int(name)):
                found.add(int(name))
    return found


def _netns() -> set[str]:
    try:
        return {n.split()[0] for n in os.listdir("/run/netns")}
    except OSError:
        return set()


def _links() -> set[str]:
    """The host namespace's network interfaces."""
    try:
        return set(os.listdir("/sys/class/net"))
    except OSError:
        return set()


def end_processes(pids: set[int]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        live = [p for p in pids if _alive(p)]
        for p in live:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        end = time.monotonic() + grace
        while any(_alive(p) for p in live) and time.monotonic() < end:
            for p in live:                             # reap our own children so they do not stay zombies
                try:
                    os.waitpid(p, os.WNOHANG)
                except OSError:
                    pass
            time.sleep(0.05)


@pytest.fixture(scope="session", autouse=True)
def _session_cleanup():
    """Marks this session's processes; at the end kills what is left of
    them, deletes leftover namespaces, and fails the run naming them."""
    token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    saved = {k: os.environ.get(k) for k in (MARK, "SOFTRDMA_RUN", shm_helpers.ENV)}
    os.environ[MARK] = token
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    run = tempfile.mkdtemp(prefix=f"softrdma-session-{os.getpid()}-", dir=base)
    os.environ["SOFTRDMA_RUN"] = run
    test_shm = tempfile.mkdtemp(prefix=f"softrdma-tests-{os.getpid()}-", dir=base)
    os.chmod(test_shm, 0o1777)                  # as /dev/shm: tests run daemons as other users too
    os.environ[shm_helpers.ENV] = test_shm      # the tests' run dirs (shm_helpers)
    tag = os.getpid() % 100000               # tests name their namespaces srdma-<letters><tag> (netns_helpers)
    ns_before, links_before = _netns(), _links()
    yield
    left = []
    # a process told to stop a moment ago may still be on its way out: that is no leftover
    end = time.monotonic() + 5
    while (pids := session_processes(token)) and time.monotonic() < end:
        time.sleep(0.1)
    for p in sorted(pids):
        started_by = _environ(p).get("PYTEST_CURRENT_TEST", "?")
        left.append(f"pid {p}: {_cmdline(p)[:300]}  (started in {started_by})")
    end_processes(pids)
    ours = {n for n in _netns() - ns_before if re.fullmatch(rf"srdma-[a-z]+{tag}", n)}
    for n in sorted(ours):
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
        left.append(f"network namespace {n}")
    for n in sorted(n for n in _links() - links_before if re.fullmatch(rf"srdma-[a-z]+{tag}p?", n)):
        subprocess.run(["ip", "link", "del", n], capture_output=True)
        left.append(f"network interface {n}")
    left += [f"run directory {n} (on /dev/shm)" for n in sorted(os.listdir(test_shm))]
    subprocess.run(["rm", "-rf", run, test_shm], capture_output=True)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if left:
        pytest.fail("the test session left these behind (now ended):\n  " + "\n  ".join(left), pytrace=False)


def _shm_dir() -> pathlib.Path:
    return pathlib.Path(shm_helpers.shm_mkdtemp(f"softrdma-test-{os.getpid()}-"))


@pytest.fixture
def shm_path():
    """A fresh directory on /dev/shm for a daemon's run dir, removed
    afterwards: its sysfs tree is thousands of small files, and on a
    journalled disk (tmp_path) a daemon takes seconds to start."""
    d = _shm_dir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def shm_path_module():
    """shm_path for a module-scoped daemon."""
    d = _shm_dir()
    yield d
    shutil.rmtree(d, ignore_errors=True)
