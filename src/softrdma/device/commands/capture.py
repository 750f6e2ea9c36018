"""Packet capture (``ibdump``): start a capture into the caller's ring,
stop it, and what freeing one undoes."""

from __future__ import annotations

import contextlib
import errno
import os

from ...errors import VerbsError
from ...uapi import request as rq
from ...uapi.capture import BOTH
from ..capture import Capture
from .fds import eventfd, ring


def cmd_capture_start(daemon, c, m, fds):
    """Capture the opened device's packets into the caller's ring (fds:
    the ring's memfd, an eventfd the daemon writes when the reader
    sleeps); ``directions``: capture.RX, TX or BOTH."""
    if len(fds) != 2:
        raise VerbsError(errno.EINVAL, "capture_start needs the ring fd and the doorbell fd")
    dev = c.device
    directions = rq.uint(m, "directions", rq.U32, BOTH)
    with contextlib.ExitStack() as undo:
        r = ring(fds[0], "capture")
        undo.callback(r.close)
        doorbell = eventfd(fds[1], "capture")
        undo.callback(os.close, doorbell)
        try:
            cap = Capture(r, doorbell, directions, dev.caps.max_mtu)
        except ValueError as e:
            raise VerbsError(errno.EINVAL, str(e)) from None
        undo.pop_all()
    cap.handle = c.add("capture", cap)
    dev.add_capture(cap)
    return {"capture": cap.handle, "entries": r.nslots}, []


def cmd_capture_stop(daemon, c, m, fds):
    """Stop a capture; its counters (packets, bytes, dropped) in the reply.
    What is in the ring stays there for the reader."""
    cap = c.get(m.get("capture"), "capture")
    stats = cap.stats()
    free_capture(daemon, c, cap)
    del c.objects[m["capture"]]
    return stats, []


def free_capture(daemon, c, cap) -> None:
    c.device.remove_capture(cap)
    cap.close()
