"""Waiting for readiness, and free ports: the one place tests get them.

A test never sleeps a fixed time hoping a server is up: it waits for the
condition that says so (a port listening, a file present, a line printed),
polling with a deadline.  The deadlines are generous (60 s by default)
because they only bound a failure: on a busy machine a healthy run may be
slow, and the poll returns as soon as the condition holds.  A wait that
watches a process fails at once, with what it printed, when that process
exits first.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")

DEADLINE_S = 60.0


def _exited(proc: subprocess.Popen | None) -> str | None:
    """A message when ``proc`` has exited (its output if it can be read
    without blocking), else None."""
    if proc is None or proc.poll() is None:
        return None
    out = ""
    try:
        o, e = proc.communicate(timeout=5)
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (o, e) if x)
    except (ValueError, OSError, subprocess.TimeoutExpired):
        pass
    return f"process {proc.args!r} exited with {proc.returncode}: {out[-4000:]}"


def wait_for(cond: Callable[[], T], timeout: float = DEADLINE_S, what: str = "condition",
             proc: subprocess.Popen | None = None, interval: float = 0.02) -> T:
    """Poll ``cond()`` until it returns something true and return that.
    Fails (AssertionError naming ``what``) after ``timeout`` seconds, or as
    soon as ``proc`` (a process the condition depends on) has exited."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        dead = _exited(proc)
        if dead:
            got = cond()            # it may have done its work and exited meanwhile
            if got:
                return got
            raise AssertionError(f"waiting for {what}: {dead}")
        if time.monotonic() > end:
            raise AssertionError(f"waiting for {what}: not after {timeout:.0f} s")
        time.sleep(interval)


def listening(port: int, pid: int | str = "self", proto: str = "tcp") -> bool:
    """A socket bound to ``port`` is listening (TCP) or bound (UDP) in the
    network namespace of process ``pid`` (/proc/PID/net is that
    namespace's view; "self" is the test's own namespace)."""
    state = "0A" if proto == "tcp" else "07"          # TCP_LISTEN; UDP sockets show TCP_CLOSE
    for name in (proto, proto + "6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:                                # the process is gone (or not yet there)
            return False
        for row in rows:
            f = row.split()
            if f[3] == state and int(f[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def wait_listening(port: int, proc: subprocess.Popen | None = None, pid: int | None = None,
                   timeout: float = DEADLINE_S, proto: str = "tcp") -> None:
    """Wait until ``port`` listens.  ``proc``: the server (fail fast if it
    exits; its namespace is the one looked at, so a server started under
    ``ip netns exec`` is seen in its namespace).  ``pid``: look in that
    process's namespace instead."""
    where = pid if pid is not None else (proc.pid if proc is not None else "self")
    wait_for(lambda: listening(port, where, proto), timeout, f"{proto} port {port} to listen", proc=proc)


def wait_line(stream, pattern: str | re.Pattern, timeout: float = DEADLINE_S,
              proc: subprocess.Popen | None = None) -> tuple[re.Match, list]:
    """Read ``stream`` (a process's stdout, text or bytes) line by line
    until a line matches ``pattern`` (re.search).  Returns the match and
    every line read (the matching one last), so the caller keeps them.
    Fails after ``timeout`` or when the stream ends first (the process
    exited).  Reading happens on a helper thread so that the deadline holds
    even when the process prints nothing."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    lines: list = []
    q: queue.Queue = queue.Queue()

    def reader():
        try:
            while True:
                line = stream.readline()
                q.put(line)
                if not line:
                    return
                text = line.decode(errors="replace") if isinstance(line, bytes) else line
                if rx.search(text):
                    return
        except (ValueError, OSError) as e:                # closed under us
            q.put(e)

    threading.Thread(target=reader, daemon=True).start()
    end = time.monotonic() + timeout
    while True:
        try:
            line = q.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"waiting for a line matching {rx.pattern!r}: not after {timeout:.0f} s; "
                                 f"read {lines!r}") from None
        if isinstance(line, Exception) or not line:
            rc = None
            if proc is not None:
                try:
                    rc = proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            raise AssertionError(f"waiting for a line matching {rx.pattern!r}: the output ended "
                                 f"(exit status {rc}); read {lines!r}")
        lines.append(line)
        m = rx.search(line.decode(errors="replace") if isinstance(line, bytes) else line)
        if m:
            return m, lines


def free_port(proto: str = "tcp", host: str = "") -> int:
    """A port nobody is bound to right now (the kernel's choice for port 0),
    for a server a test starts: never a tool's fixed default, which two
    concurrent test runs on one machine would share.  In a network
    namespace a test made itself nothing else listens, so a port free here
    is free there too."""
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_file(path: str, proc: subprocess.Popen | None = None, timeout: float = DEADLINE_S) -> None:
    """Wait until ``path`` exists (a pid file, a socket, a capture)."""
    wait_for(lambda: os.path.exists(path), timeout, f"{path} to exist", proc=proc)


def stop(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    """End a process a test started: SIGTERM, and SIGKILL if it is still
    there after ``timeout`` seconds; reaped either way."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
