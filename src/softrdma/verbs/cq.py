"""Completion queues and channels (pyverbs.cq): CQ, CompChannel, WC, and
``CompletionQueue``, the part CQ shares with the extended CQ (cqex.py).

``CQ.poll`` reads the shared CQ ring: no system call.  ``req_notify`` arms
the ring; the daemon then writes this CQ's handle into the channel, which
``get_cq_event`` reads (its ``fd`` works with select/poll/asyncio).

When the daemon is gone every use of the CQ fails with EIO: an empty poll
asks the connection now and then (``Connection.check_alive``, every
IDLE_POLLS empty polls), the channel sees its peer close."""

from __future__ import annotations

import errno
import socket
import struct
import sys
from os import sched_yield

from ..enums import IBV_WC_WITH_IMM
from ..uapi import abi
from ..uapi.abi import WC
from ..uapi.commands import CMD
from ..uapi.queues import CompletionQueueConsumer
from .base import VerbsObject
from .connection import IDLE_POLLS, Gone, gone_error
from .errors import PyverbsError, PyverbsRDMAError
from .pd import RES_TYPE_CQ, alloc_ring, free_ring

_HANDLE = struct.Struct("<I")
# a plain int: ``int & IntFlag`` builds an IntFlag (two enum calls) for every CQE polled
_WITH_IMM = int(IBV_WC_WITH_IMM)
_LITTLE = sys.byteorder == "little"


def bswap32(v: int) -> int:
    return int.from_bytes(v.to_bytes(4, "big"), "little") if _LITTLE else v


def users(ctx, attr: str, obj) -> list:
    """The live QPs of ``ctx`` whose init_attr's ``attr`` is ``obj`` (the
    connection tracks every QP made on it): what closing ``obj`` closes
    first, as pyverbs' CQ and SRQ close their QPs."""
    return [o for o in list(ctx.conn._tracked)
            if not o.closed and getattr(getattr(o, "init_attr", None), attr, None) is obj]


class CompChannel(VerbsObject):
    destroy_cmd = CMD.destroy_comp_channel
    ctx_close_rank = 0                  # a Context closes its channels (and their CQs) first

    def __init__(self, ctx):
        self.ctx = ctx
        reply, fds = ctx.conn.call(CMD.create_comp_channel, want_fds=1)
        self.handle = reply["channel"]
        self.sock = socket.socket(fileno=fds[0])
        self.fd = self.sock.fileno()
        self.closed = False
        self._cqs: dict[int, "CQ"] = {}
        ctx.add_ref(self)

    def get_cq_event(self, expected_cq=None, timeout: float | None = None):
        conn = self.ctx.conn
        dead = conn.dead
        # once the device is gone: the events already queued, then EIO (as
        # ib_uverbs_event_read), never a wait
        self.sock.settimeout(0.0 if dead else timeout)
        try:
            data = self.sock.recv(4)
        except socket.timeout:
            raise PyverbsRDMAError("Failed to get CQ event: timed out", errno.EAGAIN) from None
        except OSError as e:
            if dead:
                raise gone_error("get CQ event") from None
            raise PyverbsRDMAError(f"Failed to get CQ event: {e.strerror}", e.errno or errno.EIO) from None
        if len(data) != 4:                          # the daemon is gone: the channel closed
            conn.lost()
            raise gone_error("get CQ event")
        (h,) = _HANDLE.unpack(data)
        cq = self._cqs.get(h)
        if expected_cq is not None and cq is not expected_cq:
            raise PyverbsRDMAError("Received event on an unexpected CQ", errno.EINVAL)
        if cq is not None:
            cq.events_pending += 1
        return cq

    def _close_children(self) -> None:
        for cq in list(self._cqs.values()):          # pyverbs: a channel closes its CQs
            cq.close()

    def _release(self) -> None:
        self.sock.close()


class CompletionQueue(VerbsObject):
    """What CQ and the extended CQ (``cqex.CQEX``) share: the CQE ring, the
    daemon's CQ object, notification.  ``cqe`` is the capacity asked for;
    the ring is the next power of two above it."""

    destroy_cmd = CMD.destroy_cq
    ctx_close_rank = 1                  # a Context closes its CQs after the channels, before the PDs

    def __init__(self, ctx, cqe: int, cq_context=None, channel: CompChannel | None = None, comp_vector: int = 0,
                 parent_domain=None, wc_flags: int = 0):
        max_cqe = ctx._attr.get("max_cqe", 1 << 22)
        if isinstance(cqe, float):
            # pyverbs passes cqe to ibv_create_cq's C int: Cython converts a
            # float with int() (the suite's CQ(ctx, max_cqe/2) relies on it)
            cqe = int(cqe)
        if not isinstance(cqe, int) or not 0 < cqe <= max_cqe:     # before the ring exists (the daemon checks too)
            raise PyverbsRDMAError(f"Failed to create CQ: cqe {cqe!r} not in 1..max_cqe ({max_cqe})", errno.EINVAL)
        if not 0 <= comp_vector < ctx.num_comp_vectors:       # the kernel's ib_uverbs create_cq check
            raise PyverbsRDMAError(f"Failed to create CQ: comp_vector {comp_vector} not below num_comp_vectors"
                                   f" {ctx.num_comp_vectors}", errno.EINVAL)
        self.ctx = ctx
        self.cq_context = cq_context
        self.channel = channel
        # (an extended CQ on a parent domain: in its allocator's buffer, see verbs.pd)
        self.parent_domain = parent_domain
        self.ring = alloc_ring(parent_domain, cqe + 1, abi.CQE_BYTES, "softrdma-cq", RES_TYPE_CQ)
        self.cqe = self.ring.nslots - 1
        self.consumer = CompletionQueueConsumer(self.ring)
        try:
            extra = {"wc_flags": wc_flags} if wc_flags else {}   # the extended CQ's (cqex.py)
            reply, _ = ctx.conn.call(CMD.create_cq, fds=[self.ring.fd], cqe=cqe,
                                     channel=channel.handle if channel else None, **extra)
        except PyverbsRDMAError:
            free_ring(self.ring)
            raise
        self.handle = reply["cq"]
        if channel is not None:
            channel._cqs[self.handle] = self
        self.events_pending = 0
        self.closed = False
        self._idle = IDLE_POLLS
        ctx.conn.track(self)
        ctx.add_ref(self)
        if parent_domain is not None:
            parent_domain.add_ref(self)             # closed before its parent domain

    @property
    def comp_channel(self) -> CompChannel | None:
        """The completion channel the CQ was created with (None: none)."""
        return self.channel

    def device_gone(self) -> None:
        """The daemon is gone: polling and arming fail from now on."""
        self.consumer = Gone("poll CQ")

    def req_notify(self, solicited_only: bool = False) -> None:
        if self.closed:                             # pyverbs: a closed object's use is a PyverbsError
            raise PyverbsError("Failed to request notification: the CQ is closed")
        self.consumer.req_notify(bool(solicited_only))

    def ack_events(self, num_events: int) -> None:
        self.events_pending = max(0, self.events_pending - num_events)

    def _close_children(self) -> None:
        for qp in users(self.ctx, "send_cq", self) + users(self.ctx, "recv_cq", self) + users(self.ctx, "cq", self):
            qp.close()                              # pyverbs: a CQ closes the QPs (and WQs) using it
        for srq in [o for o in list(self.ctx.conn._tracked) if not o.closed and getattr(o, "xrc_cq", None) is self]:
            srq.close()                             # ... and the XRC SRQs completing into it

    def _release(self) -> None:
        if self.channel is not None:
            self.channel._cqs.pop(self.handle, None)
        free_ring(self.ring)


class CQ(CompletionQueue):
    def resize(self, cqe: int) -> None:
        """ibv_resize_cq: at least ``cqe`` entries.  A new ring (cqe + 1
        slots, a power of two) goes to the daemon, which moves the CQEs not
        yet polled into it in order and answers with the new depth; EINVAL
        below the CQEs still queued or above max_cqe (rxe_cq_chk_attr)."""
        if self.closed:
            raise PyverbsError("Failed to resize CQ: the CQ is closed")
        if isinstance(cqe, float):
            cqe = int(cqe)
        max_cqe = self.ctx._attr.get("max_cqe", 1 << 22)
        if not isinstance(cqe, int) or not 0 < cqe <= max_cqe:     # before the ring exists (the daemon checks too)
            raise PyverbsRDMAError("Failed to resize CQ", errno.EINVAL)
        ring = alloc_ring(self.parent_domain, cqe + 1, abi.CQE_BYTES, "softrdma-cq", RES_TYPE_CQ)
        try:
            self.ctx.conn.call(CMD.resize_cq, fds=[ring.fd], cq=self.handle, cqe=cqe)
        except PyverbsRDMAError as e:
            free_ring(ring)
            raise PyverbsRDMAError("Failed to resize CQ", e.error_code) from None
        old, self.ring = self.ring, ring
        self.consumer = CompletionQueueConsumer(ring)
        self.cqe = ring.nslots - 1
        free_ring(old)

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        wcs = self.consumer.poll(num_entries)
        if not wcs:
            # The NIC here is a process that needs a core too: an empty poll
            # lets it run (a no-op when nothing else waits for this core).
            sched_yield()
            self._idle -= 1
            if not self._idle:                      # now and then: is the daemon still there?
                self._idle = IDLE_POLLS
                self.ctx.conn.check_alive()
            return 0, wcs
        for wc in wcs:
            if wc.wc_flags & _WITH_IMM:
                wc.imm_data = bswap32(wc.imm_data)       # ibv_wc.imm_data is __be32
        return len(wcs), wcs
