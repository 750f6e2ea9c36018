"""RMPP transfers (IBA 13.6), the two ends, sans-IO: what the kernel's
mad_rmpp.c does for a MAD agent, with its arithmetic.  The header codec is
``softrdma.wire.rmpp``; ``agent.MadAgent`` runs these for its users.

* ``RmppSender`` cuts a response into segments of ``256 - hdr_len`` data
  bytes, each carrying the first ``hdr_len`` bytes of the MAD (for the SA,
  56: common header, RMPP header, SA header).  The first segment's payload
  length is ``seg_count * 220 - pad``, the last's ``220 - pad``, the
  middle ones' 0 (220 = 256 - the 36 bytes up to the end of the RMPP
  header).  It starts with a window of one segment, sends up to the
  receiver's NewWindowLast, resends from the last ACKed segment on a
  timeout and gives up after ``retries`` of them -- or at the first
  timeout if nothing was ever ACKed (a reader without RMPP).
* ``RmppReceiver`` takes segments in order, ACKs the first one and then
  every ``window`` (and the last), re-ACKs duplicates, and hands back the
  reassembled MAD: ``hdr_len`` header bytes then the data, whose length is
  ``hdr_len + seg_count * data_size - pad`` (pad = 220 - the last
  segment's payload length), which is what umad hands the reader.

Time is passed in (``now``, seconds): no clock here.
"""

from __future__ import annotations

from ..wire.rmpp import (MAD_SIZE, RMPP_FLAG_ACTIVE, RMPP_FLAG_FIRST, RMPP_FLAG_LAST, RMPP_STATUS_BAD_SEG,
                         RMPP_STATUS_BADT, RMPP_STATUS_S2B, RMPP_STATUS_TMR, RMPP_STATUS_UNSPEC,
                         RMPP_STATUS_UNV, RMPP_STATUS_W2S, RMPP_TYPE_ABORT, RMPP_TYPE_ACK, RMPP_TYPE_DATA,
                         RMPP_TYPE_STOP, RMPP_VERSION, SEG_RMPP_SIZE, control_mad, parse_rmpp, set_rmpp)

DEFAULT_WINDOW = 64              # the kernel's receive window: max_active >> 3, 512 >> 3


class RmppSender:
    """One outgoing transfer: ``header`` is the response's first ``hdr_len``
    bytes, ``data`` what follows them (the records)."""

    def __init__(self, header, data: bytes, hdr_len: int = 56, timeout: float = 0.2,
                 retries: int = 3, now: float = 0.0) -> None:
        self.hdr_len = hdr_len
        self.seg_size = MAD_SIZE - hdr_len
        self.data = bytes(data)
        self.count = max(1, -(-len(self.data) // self.seg_size))
        self.pad = (self.seg_size - len(self.data) % self.seg_size) % self.seg_size if self.data \
            else self.seg_size
        self.header = bytes(header[:hdr_len])
        self.timeout, self.retries = timeout, retries
        self.window_last = 1
        self.last_ack = 0
        self.sent = 0             # highest segment sent
        self.tries = 0
        self.deadline = now + timeout
        self.done = False
        self.acked = False        # the receiver does RMPP: it ACKed something
        self.aborted = 0          # the RMPPStatus of an abort (ours or the receiver's)

    def segment(self, n: int) -> bytes:
        mad = bytearray(MAD_SIZE)
        mad[:self.hdr_len] = self.header
        chunk = self.data[(n - 1) * self.seg_size:n * self.seg_size]
        mad[self.hdr_len:self.hdr_len + len(chunk)] = chunk
        flags, paylen = RMPP_FLAG_ACTIVE, 0
        if n == 1:
            flags |= RMPP_FLAG_FIRST
            paylen = self.count * SEG_RMPP_SIZE - self.pad
        if n == self.count:
            flags |= RMPP_FLAG_LAST
            paylen = SEG_RMPP_SIZE - self.pad
        set_rmpp(mad, RMPP_TYPE_DATA, flags, n, paylen)
        return bytes(mad)

    def first_length(self, record_bytes: int, view: int = MAD_SIZE) -> int:
        """The length to report with segment 1 for a reader without RMPP
        (umad2sim): the header and the whole records within the first
        ``view`` bytes of that segment."""
        if record_bytes <= 0:
            return self.hdr_len
        data = min(len(self.data), self.seg_size, view - self.hdr_len)
        return self.hdr_len + data // record_bytes * record_bytes

    def _send_window(self, start: int) -> list[bytes]:
        end = min(self.window_last, self.count)
        out = [self.segment(n) for n in range(start, end + 1)]
        self.sent = max(self.sent, end)
        return out

    def start(self, now: float) -> list[bytes]:
        self.deadline = now + self.timeout
        return self._send_window(1)

    def on_control(self, mad, now: float) -> list[bytes]:
        """An ACK (more segments, maybe), a STOP or an ABORT from the receiver."""
        if self.done:
            return []
        h = parse_rmpp(mad)
        if h.type in (RMPP_TYPE_STOP, RMPP_TYPE_ABORT):
            self.done, self.aborted = True, h.status or RMPP_STATUS_UNSPEC
            return []
        if h.type != RMPP_TYPE_ACK:
            return []
        if h.seg > self.count or h.seg > self.sent:
            return self._abort(mad, RMPP_STATUS_S2B)
        if h.seg < self.last_ack:
            return []                                   # an old ACK
        if h.paylen < h.seg:
            return self._abort(mad, RMPP_STATUS_W2S)
        progressed = h.seg > self.last_ack or h.paylen > self.window_last
        self.acked = True
        self.last_ack = h.seg
        self.window_last = max(self.window_last, h.paylen)
        if self.last_ack >= self.count:
            self.done = True
            return []
        if progressed:
            self.tries = 0
            self.deadline = now + self.timeout
        if self.sent < min(self.window_last, self.count):
            return self._send_window(self.sent + 1)
        return []

    def _abort(self, ack, status: int) -> list[bytes]:
        # the ACK flipped back: an ABORT from the sender carries the response method
        self.done, self.aborted = True, status
        return [control_mad(ack, RMPP_TYPE_ABORT, status=status, hdr_len=self.hdr_len)]

    def on_timer(self, now: float) -> list[bytes]:
        """Past the deadline without progress: the unACKed window again, or give up.

        Before the first ACK nothing is resent: a reader that does not ACK
        segment 1 does not do RMPP (umad2sim) and took segment 1 as the whole
        answer; resending it would reach whichever client has its slot by
        then.  A requester that lost segment 1 times out, as with an SA
        that did not answer."""
        if self.done or now < self.deadline:
            return []
        if not self.acked:
            self.done, self.aborted = True, RMPP_STATUS_TMR
            return []
        self.tries += 1
        if self.tries > self.retries:
            self.done, self.aborted = True, RMPP_STATUS_TMR
            return []
        self.deadline = now + self.timeout
        self.sent = self.last_ack
        return self._send_window(self.last_ack + 1)


class RmppReceiver:
    """One incoming transfer; feed it every DATA segment with ``on_data``."""

    def __init__(self, hdr_len: int = 56, window: int = DEFAULT_WINDOW) -> None:
        self.hdr_len = hdr_len
        self.seg_size = MAD_SIZE - hdr_len
        self.window = window
        self.header = b""
        self.chunks: list[bytes] = []
        self.newwin = 1
        self.result: bytes | None = None
        self.aborted = 0

    @property
    def last(self) -> int:
        return len(self.chunks)

    def on_data(self, mad) -> bytes | None:
        """The ACK (or ABORT) to send back, if any; ``result`` is set at the end."""
        h = parse_rmpp(mad)
        if self.result is not None:
            return control_mad(mad, RMPP_TYPE_ACK, self.last, self.newwin, hdr_len=self.hdr_len) \
                if h.seg == self.last else None
        if h.version != RMPP_VERSION:
            return self._abort(mad, RMPP_STATUS_UNV)
        if h.type != RMPP_TYPE_DATA:
            return self._abort(mad, RMPP_STATUS_BADT)
        if h.seg == 0 or (h.seg == 1) != bool(h.flags & RMPP_FLAG_FIRST):
            return self._abort(mad, RMPP_STATUS_BAD_SEG)
        if h.seg <= self.last:
            # a duplicate: the sender missed our ACK
            return control_mad(mad, RMPP_TYPE_ACK, self.last, self.newwin, hdr_len=self.hdr_len)
        if h.seg != self.last + 1:
            return None                                 # out of order: wait for the resend
        if h.seg == 1:
            self.header = bytes(mad[:self.hdr_len])
        self.chunks.append(bytes(mad[self.hdr_len:MAD_SIZE]))
        if h.flags & RMPP_FLAG_LAST:
            pad = SEG_RMPP_SIZE - h.paylen
            if not 0 <= pad <= self.seg_size:
                pad = 0
            total = self.seg_size * len(self.chunks) - pad
            self.result = self.header + b"".join(self.chunks)[:total]
            return control_mad(mad, RMPP_TYPE_ACK, self.last, self.last, hdr_len=self.hdr_len)
        if h.seg == self.newwin:
            self.newwin = h.seg + self.window
            return control_mad(mad, RMPP_TYPE_ACK, self.last, self.newwin, hdr_len=self.hdr_len)
        return None

    def _abort(self, mad, status: int) -> bytes:
        self.aborted = status
        self.result = b""
        return control_mad(mad, RMPP_TYPE_ABORT, status=status, hdr_len=self.hdr_len)
