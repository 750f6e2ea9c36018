"""The MAD agent: one sender's requests and RMPP transfers, sans-IO.

What the kernel's MAD layer does for a registered agent
(drivers/infiniband/core/mad.c, mad_rmpp.c) and what opensm's vendor layer
(osm_vendor_ibumad) does on top of umad, for every user of MADs here: the
SM's sweeps (over its ibsim port), the diags (over theirs) and the device's
GSI (over QP1).  The I/O stays with each user; this module owns

* TIDs: ``alloc_tid`` hands out the next one (the caller's first, counting
  up, wrapping at ``tid_mask``, never 0); a response is matched to its
  request by ``tid & tid_mask`` and the management class (find_send_wr;
  ibsim and umad2sim own the upper 32 bits of a TID, so the SM and the
  diags match the lower 32, the GSI all 64);
* the send window: at most ``window`` requests on the wire (opensm's
  ``max_wire_smps``; None: no limit), the rest wait in the backlog in order;
* timeouts and retries: a request unanswered ``timeout`` seconds after it
  left is sent again, ahead of the backlog, up to ``retries`` times, then
  completed with no response (IB_WC_RESP_TIMEOUT_ERR); time is passed in
  (``now``, seconds), ``deadline`` says when ``tick`` is next due;
* RMPP as the requester: DATA segments of a response are ACKed and
  reassembled (``rmpp.RmppReceiver``); each segment restarts the
  request's timer, the whole MAD completes it;
* RMPP as the sender: ``send_rmpp`` cuts a response into segments and
  runs the transfer (``rmpp.RmppSender``): the receiver's ACKs open the
  window, STOP/ABORT end it, ``tick`` resends or gives up;
* the counters: ``sent`` (every transmission, resends too), ``retries``,
  ``timeouts`` (every expiry), ``failed`` (given up), ``unmatched``
  (responses to no outstanding request: late duplicates, not ours), RMPP
  ``rmpp_transfers``/``rmpp_aborted``.

What goes on the wire is collected in order and handed out by ``take(now)``
as ``(dest, mad)`` pairs; ``dest`` is the caller's address (whatever its
transport needs), given with each request and with each received MAD.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Callable

from ..wire.mad import (IB_MGMT_CLASS_VENDOR_RANGE2_END, IB_MGMT_CLASS_VENDOR_RANGE2_START, IB_MGMT_MAD_HDR,
                        IB_MGMT_METHOD_RESP, IB_MGMT_RMPP_HDR, MgmtClass)
from ..wire.rmpp import RMPP_TYPE_DATA, RMPP_VERSION, is_segmented, parse_rmpp
from .rmpp import RmppReceiver, RmppSender

TID_OFFSET = 8
MAD_TID = struct.Struct(">Q")
MGMT_CLASS_OFFSET = 1
METHOD_OFFSET = 3

Callback = Callable[["bytes | None"], None]


def mad_tid(mad) -> int:
    return MAD_TID.unpack_from(mad, TID_OFFSET)[0]


def is_response(mad) -> bool:
    return bool(mad[METHOD_OFFSET] & IB_MGMT_METHOD_RESP)


#: ib_is_mad_class_rmpp(): the classes whose MADs carry an RMPP header
RMPP_CLASSES = frozenset(int(c) for c in (MgmtClass.SUBN_ADM, MgmtClass.DEVICE_MGMT, MgmtClass.DEVICE_ADM,
                                          MgmtClass.BIS)) \
    | frozenset(range(IB_MGMT_CLASS_VENDOR_RANGE2_START, IB_MGMT_CLASS_VENDOR_RANGE2_END + 1))


def rmpp_type(mad) -> int:
    """The RMPPType of an active RMPP MAD of an RMPP class, else 0 (not RMPP)."""
    if mad[MGMT_CLASS_OFFSET] not in RMPP_CLASSES or len(mad) < IB_MGMT_RMPP_HDR:
        return 0
    h = parse_rmpp(mad)
    return h.type if h.version == RMPP_VERSION and h.active else 0


class MadSend:
    """One request (ib_mad_send_wr_private): what it is, where it goes, how
    long to wait, and -- once ``done`` -- its ``response`` (None: no answer),
    ``status`` (a transport error status, see ``MadAgent.fail``),
    ``rmpp_status`` (an RMPP transfer of the response aborted), ``src`` and
    ``length`` as the transport reported them with the response."""

    __slots__ = ("tid", "mgmt_class", "mad", "dest", "callback", "timeout", "retries", "tries",
                 "deadline", "use_rmpp", "rmpp", "rmpp_status", "done", "response", "status", "src",
                 "length")

    def __init__(self, tid, mad, dest, callback, timeout, retries, use_rmpp):
        self.tid, self.mad, self.dest, self.callback = tid, mad, dest, callback
        self.mgmt_class = mad[MGMT_CLASS_OFFSET]
        self.timeout, self.retries = timeout, retries
        self.tries = 0
        self.deadline: float | None = None          # None: in the backlog
        self.use_rmpp = use_rmpp
        self.rmpp: RmppReceiver | None = None
        self.rmpp_status = 0                        # the RMPPStatus of an aborted transfer
        self.done = False
        self.response: bytes | None = None
        self.status = 0
        self.src = None
        self.length = None


class MadAgent:
    """One user's MADs: ``post_send``/``deliver``/``tick``/``take`` (see the module)."""

    def __init__(self, *, window: int | None = None, timeout: float = 1.0, retries: int = 3,
                 tid_mask: int = 0xFFFFFFFF, first_tid: int = 1, rmpp_window: int | None = None) -> None:
        self.window = window
        self.timeout, self.retries = timeout, retries
        self.tid_mask = tid_mask
        self._next_tid = first_tid & tid_mask or 1
        self.rmpp_window = rmpp_window
        self.sends: dict[int, MadSend] = {}           # tid & mask -> outstanding request
        self.backlog: deque[MadSend] = deque()        # waiting for a place in the window
        self.wire: dict[int, MadSend] = {}            # on the wire, in the order they left
        self.transfers: dict[tuple, RmppSender] = {}  # (peer, tid) -> outgoing RMPP transfer
        self.out: list[tuple] = []                    # (dest, mad) to put on the wire
        self.sent = self.retried = self.timeouts = self.failed = self.unmatched = 0
        self.rmpp_transfers = self.rmpp_aborted = 0

    # -- requests ------------------------------------------------------------------------------
    @property
    def next_tid(self) -> int:
        """The TID ``alloc_tid`` hands out next."""
        return self._next_tid

    def alloc_tid(self) -> int:
        tid = self._next_tid
        self._next_tid = (tid + 1) & self.tid_mask or 1
        return tid

    def post_send(self, mad, callback: Callback | None = None, *, dest=None, timeout: float | None = None,
                  retries: int | None = None, own_tid: bool = False, rmpp: bool = False) -> MadSend:
        """Queue a request (ib_post_send_mad).  Its TID is the next one
        (written into ``mad``), or with ``own_tid`` the one the MAD has;
        ``callback(response or None)`` runs when it completes.  ``rmpp``:
        a segmented response is ACKed and reassembled (an agent registered
        with an RMPP version); without it segment 1 is the answer.  A TID
        that is already outstanding is refused (ValueError: EBUSY)."""
        if own_tid:
            tid = mad_tid(mad)
        else:
            tid = self.alloc_tid()
            MAD_TID.pack_into(mad, TID_OFFSET, tid)
        key = tid & self.tid_mask
        if key in self.sends:
            raise ValueError(f"TID {tid:#x} already outstanding (EBUSY)")
        s = MadSend(tid, bytes(mad), dest, callback, self.timeout if timeout is None else timeout,
                    self.retries if retries is None else retries, rmpp)
        self.sends[key] = s
        self.backlog.append(s)
        return s

    def cancel(self, tid: int) -> None:
        """Forget a request (ib_cancel_mad): no callback, an answer is unmatched."""
        s = self.sends.pop(tid & self.tid_mask, None)
        if s is not None:
            self._off_wire(s)
            s.done = True

    def fail(self, mad, status: int) -> bool:
        """The transport handed the request ``mad`` back undelivered with
        ``status`` (ibsim: ETIMEDOUT at once): complete it with no response."""
        s = self._match(mad)
        if s is None:
            return False
        s.status = status
        self._complete(s, None)
        return True

    def _match(self, mad) -> MadSend | None:
        if len(mad) < IB_MGMT_MAD_HDR:
            return None
        s = self.sends.get(mad_tid(mad) & self.tid_mask)
        if s is None or s.mgmt_class != mad[MGMT_CLASS_OFFSET]:
            return None
        return s

    def _off_wire(self, s: MadSend) -> None:
        if s.deadline is not None:
            del self.wire[s.tid & self.tid_mask]
            s.deadline = None
        else:
            try:
                self.backlog.remove(s)
            except ValueError:
                pass

    def _complete(self, s: MadSend, response) -> None:
        del self.sends[s.tid & self.tid_mask]
        self._off_wire(s)
        s.done, s.response = True, response
        if s.callback is not None:
            s.callback(response)

    # -- receive -------------------------------------------------------------------------------
    def deliver(self, mad, now: float, src=None, length: int | None = None) -> bool:
        """A MAD from ``src``: an RMPP ACK/STOP/ABORT for one of our
        transfers, or a response to one of our requests.  False when it is
        neither (a request for the caller, or an unmatched response, counted)."""
        if len(mad) < IB_MGMT_MAD_HDR:
            return False
        rtype = rmpp_type(mad)
        if rtype and rtype != RMPP_TYPE_DATA:
            t = self.transfers.get((src, mad_tid(mad)))
            if t is not None:
                for seg in t.on_control(mad, now):
                    self._emit(t.dest, seg)
                if t.done:
                    self._finish(t)
                return True
        if not is_response(mad):
            return False
        s = self._match(mad)
        if s is None:
            self.unmatched += 1
            return False
        s.src, s.length = src, length
        if s.use_rmpp and rtype and is_segmented(mad):
            rx = s.rmpp
            if rx is None:
                rx = s.rmpp = RmppReceiver() if self.rmpp_window is None else RmppReceiver(window=self.rmpp_window)
            ack = rx.on_data(mad)
            if ack is not None:
                self._emit(s.dest if src is None else src, ack)
            if rx.result is None:
                if s.deadline is not None:
                    s.deadline = now + s.timeout            # the transfer moves
                return True
            s.rmpp_status = rx.aborted
            self._complete(s, rx.result)
            return True
        self._complete(s, bytes(mad))
        return True

    # -- RMPP as the sender ----------------------------------------------------------------------
    def send_rmpp(self, header, data: bytes, dest, now: float, *, peer=None, hdr_len: int = 56,
                  timeout: float | None = None, retries: int | None = None,
                  done: Callable[[RmppSender], None] | None = None) -> RmppSender:
        """Start sending ``header`` (the first ``hdr_len`` bytes, TID
        included) and ``data`` to ``dest`` by RMPP; the segments of the
        first window go out with ``take``.  A transfer of more than one
        segment is tracked (ACKs, timers) until it ends, then ``done(sender)``
        runs (``sender.aborted``: how it failed).  The receiver's ACKs are
        told by the TID and ``peer`` (the ``src`` they are delivered with;
        default ``dest``); the same TID from the same peer again starts over."""
        key = (dest if peer is None else peer, mad_tid(header))
        old = self.transfers.pop(key, None)
        if old is not None:
            self._finish(old)
        t = RmppSender(header, data, hdr_len, self.timeout if timeout is None else timeout,
                       self.retries if retries is None else retries, now)
        t.dest, t.on_done = dest, done
        for seg in t.start(now):
            self._emit(dest, seg)
        if t.count > 1:
            self.transfers[key] = t
            self.rmpp_transfers += 1
        return t

    def _finish(self, t: RmppSender) -> None:
        for key, v in list(self.transfers.items()):
            if v is t:
                del self.transfers[key]
        if t.aborted:
            self.rmpp_aborted += 1
        if t.on_done is not None:
            t.on_done(t)

    # -- time and the wire -------------------------------------------------------------------------
    def _emit(self, dest, mad) -> None:
        self.out.append((dest, mad))

    def tick(self, now: float) -> None:
        """Expire what is past its deadline: resend (ahead of the backlog,
        the latest expiry first, as opensm's queue did) or give up; RMPP
        transfers resend their window or end."""
        expired = [s for s in self.wire.values() if s.deadline <= now]
        for s in expired:
            self.timeouts += 1
            del self.wire[s.tid & self.tid_mask]
            s.deadline = None
            if s.tries <= s.retries:
                self.backlog.appendleft(s)
            else:
                self.failed += 1
                self._complete(s, None)
        for t in list(self.transfers.values()):
            for seg in t.on_timer(now):
                self._emit(t.dest, seg)
            if t.done:
                self._finish(t)

    def take(self, now: float) -> list[tuple]:
        """What to put on the wire now, ``(dest, mad)`` in order: ACKs and
        segments, then requests from the backlog while the window allows."""
        out, self.out = self.out, []
        while self.backlog and (self.window is None or len(self.wire) < self.window):
            s = self.backlog.popleft()
            if s.tries:
                self.retried += 1
            s.tries += 1
            s.deadline = now + s.timeout
            self.wire[s.tid & self.tid_mask] = s
            self.sent += 1
            out.append((s.dest, s.mad))
        return out

    @property
    def deadline(self) -> float | None:
        """When ``tick`` is next due (None: nothing to time)."""
        d = min((s.deadline for s in self.wire.values()), default=None)
        for t in self.transfers.values():
            if d is None or t.deadline < d:
                d = t.deadline
        return d

    @property
    def idle(self) -> bool:
        """Nothing outstanding, no transfer running, nothing to send."""
        return not self.sends and not self.transfers and not self.out
