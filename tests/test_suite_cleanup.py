"""The suite's own rules: a test session that leaves a process, a network
namespace or a run directory behind fails, naming it, and ends it
(tests/conftest.py); the readiness waits (tests/wait_helpers.py) return on
the condition and fail fast when the process they wait on dies."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from wait_helpers import free_port, listening, wait_for, wait_line, wait_listening

HERE = os.path.dirname(os.path.abspath(__file__))

LEAKY = '''
import os, subprocess, sys

def test_leaves_a_child():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # leaked-child"])

def test_leaves_a_daemon():
    # forks twice and calls setsid, as softrdmad does: its parent is not pytest any more
    code = ("import os, time\\n"
            "if os.fork(): os._exit(0)\\n"
            "os.setsid()\\n"
            "if os.fork(): os._exit(0)\\n"
            "time.sleep(300)  # leaked-daemon\\n")
    subprocess.run([sys.executable, "-c", code], check=True)
'''

CLEAN = '''
import subprocess, sys

def test_ends_what_it_starts():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    p.kill()
    p.wait()
'''


def _marked(word: str) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if word.encode() in f.read():
                        out.append(int(name))
            except OSError:
                pass
    return out


def _session(tmp_path, text: str) -> subprocess.CompletedProcess:
    shutil.copy(os.path.join(HERE, "conftest.py"), tmp_path / "conftest.py")
    for helper in ("wait_helpers.py", "shm_helpers.py"):
        shutil.copy(os.path.join(HERE, helper), tmp_path / helper)
    (tmp_path / "test_inner.py").write_text(text)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                           str(tmp_path), str(tmp_path / "test_inner.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)


def test_a_session_that_leaks_processes_fails_naming_them_and_ends_them(tmp_path):
    r = _session(tmp_path, LEAKY)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "left these behind" in out
    assert "leaked-child" in out and "test_leaves_a_child" in out
    assert "leaked-daemon" in out and "test_leaves_a_daemon" in out
    # and they are gone (the daemon was reparented away from pytest and still found)
    assert not [p for p in _marked("leaked-child") + _marked("leaked-daemon")
                if open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]


def test_a_clean_session_passes(tmp_path):
    r = _session(tmp_path, CLEAN)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_leftover_namespace_fails_the_session(tmp_path):
    from netns_helpers import need_root
    need_root()
    r = _session(tmp_path, '''
import os, subprocess
def test_leaves_a_namespace():
    subprocess.run(["ip", "netns", "add", f"srdma-z{os.getpid() % 100000}"], check=True)
''')
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "network namespace srdma-z" in out, out
    name = "srdma-z" + out.split("network namespace srdma-z", 1)[1].split()[0]
    assert name not in os.listdir("/run/netns")


def test_a_leftover_run_directory_fails_the_session(tmp_path):
    """A test's run dir (shm_helpers) still there at the end fails the
    session, naming it, and is removed; one a test removed is no leftover."""
    where = tmp_path / "where"
    r = _session(tmp_path, f'''
import os, shutil
from shm_helpers import shm_dir, shm_mkdtemp

def test_leaves_a_run_dir():
    d = shm_dir("softrdma-forgotten")
    os.makedirs(os.path.join(d, "sys"))
    open({str(where)!r}, "w").write(d)

def test_removes_its_run_dir():
    shutil.rmtree(shm_mkdtemp("softrdma-tidy-"))
''')
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "run directory softrdma-forgotten" in out and "softrdma-tidy" not in out, out
    left = where.read_text()
    assert os.path.basename(os.path.dirname(left)).startswith("softrdma-tests-")    # (the session's directory)
    assert not os.path.exists(os.path.dirname(left))


def test_another_sessions_processes_are_not_touched(tmp_path):
    """A process of someone else (not our descendant, no marker of this
    inner session) that looks just like a test daemon survives."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # leaked-child"],
                             env={k: v for k, v in os.environ.items() if k != "SOFTRDMA_TEST_SESSION"})
    try:
        r = _session(tmp_path, CLEAN)
        assert r.returncode == 0, r.stdout + r.stderr
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


# -- wait_helpers ----------------------------------------------------------------------------


def test_wait_listening_sees_a_late_server_and_fails_fast_when_it_dies():
    port = free_port()
    assert not listening(port)
    code = (f"import socket, time; time.sleep(0.5); s = socket.socket(); s.bind(('127.0.0.1', {port})); "
            "s.listen(); print('up', flush=True); time.sleep(60)")
    srv = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        wait_listening(port, srv)
        assert listening(port, srv.pid)
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    finally:
        srv.kill()
        srv.wait()
    dead = subprocess.Popen([sys.executable, "-c", "import sys; print('no luck'); sys.exit(3)"],
                            stdout=subprocess.PIPE, text=True)
    t = time.monotonic()
    with pytest.raises(AssertionError, match="exited with 3: no luck"):
        wait_listening(free_port(), dead)
    assert time.monotonic() - t < 30                   # at once, not after the 60 s bound


def test_wait_line_returns_the_match_and_what_came_before():
    p = subprocess.Popen([sys.executable, "-c", "print('a'); print('b'); print('ready on 1234', flush=True); "
                          "import time; time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        m, lines = wait_line(p.stdout, r"ready on (\d+)", proc=p)
        assert m.group(1) == "1234" and lines == ["a\n", "b\n", "ready on 1234\n"]
    finally:
        p.kill()
        p.wait()
    p = subprocess.Popen([sys.executable, "-c", "print('bye')"], stdout=subprocess.PIPE, text=True)
    with pytest.raises(AssertionError, match="output ended"):
        wait_line(p.stdout, "never", proc=p)
    p.wait()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        with pytest.raises(AssertionError, match="not after 1 s"):
            wait_line(p.stdout, "never", timeout=1, proc=p)
    finally:
        p.kill()
        p.wait()


def test_wait_for_returns_the_value_and_bounds_a_failure():
    n = iter(range(100))
    assert wait_for(lambda: next(n) >= 3 and "yes", 10, "three") == "yes"
    with pytest.raises(AssertionError, match="waiting for never: not after 0 s"):
        wait_for(lambda: False, 0.1, "never")
