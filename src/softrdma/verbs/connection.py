"""The library's end of one control connection (one per Context).

Requests are synchronous: ``call`` sends one and waits for the reply with
the same ``seq``; async-event records that arrive meanwhile are queued for
``Context.get_async_event``.  A reply's errno becomes
``PyverbsRDMAError(msg, errno)``; a broken connection (the daemon died)
becomes ``PyverbsRDMAError(..., ENODEV)`` and an IBV_EVENT_DEVICE_FATAL in
the event queue.
"""

from __future__ import annotations

import collections
import errno
import os
import socket

from ..device.control import ControlError, recv_msg, send_msg
from ..enums import IBV_EVENT_DEVICE_FATAL
from .errors import PyverbsRDMAError


class Connection:
    def __init__(self, path: str):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self._seq = 0
        self.events: collections.deque = collections.deque()
        self.dead = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def _fatal(self) -> None:
        if not self.dead:
            self.dead = True
            self.events.append({"event": int(IBV_EVENT_DEVICE_FATAL)})

    def call(self, op: str, fds=(), **kw) -> tuple[dict, list[int]]:
        if self.dead:
            raise PyverbsRDMAError(f"{op}: the device is gone (softrdmad exited)", errno.ENODEV)
        self._seq += 1
        seq = self._seq
        try:
            send_msg(self.sock, {"op": op, "seq": seq, **kw}, fds)
            while True:
                msg, got = recv_msg(self.sock)
                if msg is None:
                    raise ConnectionResetError("daemon closed the connection")
                if "event" in msg and "seq" not in msg:
                    self.events.append(msg)
                    continue
                if msg.get("seq") != seq:
                    for fd in got:
                        os.close(fd)
                    continue
                break
        except (OSError, ControlError) as e:
            self._fatal()
            raise PyverbsRDMAError(f"{op}: lost the connection to softrdmad ({e})", errno.ENODEV) from None
        err = msg.get("errno", 0)
        if err:
            for fd in got:
                os.close(fd)
            exc = PyverbsRDMAError(f"Failed to {op.replace('_', ' ')}: {msg.get('msg', os.strerror(err))}", err)
            exc.extack = msg.get("extack")        # the netlink-style extended ack, if the daemon gave one
            raise exc
        return msg, got

    def poll_events(self) -> None:
        """Collect async events that arrived without a request."""
        if self.dead:
            return
        while True:
            try:
                self.sock.setblocking(False)
                msg, fds = recv_msg(self.sock)
            except (BlockingIOError, InterruptedError):
                break
            except (OSError, ControlError):
                self._fatal()
                break
            finally:
                if not self.dead:
                    self.sock.setblocking(True)
            for fd in fds:
                os.close(fd)
            if msg is None:
                self._fatal()
                break
            if "event" in msg:
                self.events.append(msg)

    def close(self) -> None:
        self.sock.close()
