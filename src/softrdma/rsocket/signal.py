"""The file descriptor an rsocket shows to select/poll/epoll/asyncio.

An rsocket's readiness is its protocol's (data or credits), not any one
kernel object's, so ``fileno()`` is one end of a socket pair whose
readability and writability the library sets: readable while a byte
waits in it, writable while its send buffer has room (the library fills
it to say "not writable").  ``Progress`` is the one thread per process
that, as rsocket.c's service threads do, watches the completion and CM
channels of every rsocket whose fileno was asked for and updates its
signal when an event arrives; it sleeps in epoll_wait while nothing
happens (a CQ is armed only while its rsocket waits for something).
"""

from __future__ import annotations

import os
import select
import socket
import threading
import weakref


class Signal:
    """The socket pair: ``fd`` for the application, the other end ours."""

    def __init__(self):
        self.app, self.lib = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for s in (self.app, self.lib):
            s.setblocking(False)
        self.app.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        self.lib.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.readable = False
        self.writable = True
        self.fd = self.app.fileno()

    def set(self, readable: bool, writable: bool) -> None:
        if readable != self.readable:
            if readable:
                self.lib.send(b"r")
            else:
                try:
                    while self.app.recv(4096):
                        pass
                except BlockingIOError:
                    pass
            self.readable = readable
        if writable != self.writable:
            if writable:
                try:
                    while self.lib.recv(65536):
                        pass
                except BlockingIOError:
                    pass
            else:
                try:
                    while True:
                        self.app.send(bytes(4096))
                except BlockingIOError:
                    pass
            self.writable = writable

    def close(self) -> None:
        self.app.close()
        self.lib.close()


class Progress:
    """The process's progress thread."""

    _instance: "Progress | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "Progress":
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = Progress()
            return cls._instance

    def __init__(self):
        self.ep = select.epoll()
        self.fds: dict[int, weakref.ref] = {}
        self.mutex = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="rsocket-progress", daemon=True)
        self.thread.start()

    def watch(self, rs, fds: list[int]) -> None:
        """Watch ``fds`` for ``rs`` (replacing what was watched for it)."""
        with self.mutex:
            ref = weakref.ref(rs)
            for fd, r in list(self.fds.items()):
                if r() is rs and fd not in fds:
                    self._drop(fd)
            for fd in fds:
                if fd not in self.fds:
                    try:
                        self.ep.register(fd, select.EPOLLIN)
                    except OSError:
                        continue
                self.fds[fd] = ref

    def forget(self, rs) -> None:
        with self.mutex:
            for fd, r in list(self.fds.items()):
                if r() is rs or r() is None:
                    self._drop(fd)

    def _drop(self, fd: int) -> None:
        self.fds.pop(fd, None)
        try:
            self.ep.unregister(fd)
        except (OSError, ValueError):
            pass

    def _run(self) -> None:
        while True:
            try:
                events = self.ep.poll(1.0)
            except InterruptedError:
                continue
            for fd, _ in events:
                with self.mutex:
                    ref = self.fds.get(fd)
                rs = ref() if ref is not None else None
                if rs is None:
                    with self.mutex:
                        self._drop(fd)
                    continue
                try:
                    rs._poke()
                except Exception:            # a socket closed under us: stop watching it
                    self.forget(rs)


def closed_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
        return False
    except OSError:
        return True
