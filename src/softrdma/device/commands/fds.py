"""The fds a request brings, as a command keeps them: a ring (the memfd
mapped) or a doorbell (our own duplicate of an eventfd).

The dispatcher (``Daemon._client_readable``) owns and closes every fd a
request brought; a command keeps only what these give it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors

from ...errors import VerbsError
from ...uapi import abi
from ...uapi.shm import Ring
from ..core import DevSRQ


def ring(fd: int, what: str, *, slot_size: int | None = None, min_slot: int = 1) -> Ring:
    """The ring in the memfd ``fd`` (mapped: the fd itself stays the
    dispatcher's); EINVAL if it is no sealed memfd holding a ring with
    the slots the queue needs."""
    try:
        r = Ring.map_fd(fd)
    except ValueError as e:
        raise VerbsError(errno.EINVAL, f"bad {what} ring: {e}") from None
    if (slot_size is not None and r.slot_size != slot_size) or r.slot_size < min_slot:
        got = r.slot_size
        r.close()
        raise VerbsError(errno.EINVAL, f"bad {what} ring: slots of {got} bytes, "
                                       f"{slot_size or min_slot} needed")
    return r


def eventfd(fd: int, what: str) -> int:
    """Our own non-blocking duplicate of the eventfd ``fd`` (the caller
    owns the duplicate); EINVAL for any other kind of fd -- the loop
    reads and writes doorbells and must never meet a file, a pipe end
    or a socket there."""
    try:
        kind = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        kind = None if os.path.isdir("/proc/self/fd") else "anon_inode:[eventfd]"   # no /proc: trust it
    if kind != "anon_inode:[eventfd]":
        raise VerbsError(errno.EINVAL, f"the {what} doorbell must be an eventfd")
    own = os.dup(fd)
    os.set_blocking(own, False)
    return own


def srq_queue(daemon, c, srq, fds, max_sge: int) -> DevSRQ:
    """An SRQ's receive ring and doorbell from the request's two fds (any
    kind of SRQ: basic, tag matching, XRC), the doorbell watched by the
    loop; nothing kept if either is refused."""
    with contextlib.ExitStack() as undo:
        r = ring(fds[0], "SRQ", min_slot=abi.recv_slot_size(max_sge))
        undo.callback(r.close)
        doorbell = eventfd(fds[1], "SRQ")
        undo.callback(os.close, doorbell)
        dsrq = DevSRQ(0, srq, r, doorbell, c)
        daemon.sel.register(doorbell, selectors.EVENT_READ, ("doorbell", dsrq))
        undo.pop_all()
    return dsrq
