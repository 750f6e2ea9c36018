"""The four ends of the shared queues: who writes what, and when.

* ``WorkQueueProducer`` (library: post_send / post_recv / post_srq_recv) and
  ``WorkQueueConsumer`` (daemon): WQE slots, producer/consumer indices, and
  the doorbell rule -- ring only if the consumer said it sleeps.  The
  consumer index the daemon publishes counts finished WQEs, not read ones,
  so the library's "queue full" is max_*_wr outstanding, as in hardware.
* ``CompletionQueueProducer`` (daemon) and ``CompletionQueueConsumer``
  (library: poll_cq, and the extended CQ's start_poll/next_poll/end_poll):
  CQE slots validated by the owner bit; the consumer publishes its index
  so the producer can tell an overrun (the CQE is dropped and the caller
  raises IBV_EVENT_CQ_ERR, as hardware does); ``push_cqes`` writes a
  batch given as CQE field tuples and publishes the producer index once.
  ``req_notify`` arms the ring; the producer reports when a push should
  signal the completion channel (and disarms, one event per arm).
"""

from __future__ import annotations

import os

from . import abi
from .shm import (
    HEADER_BYTES, NOTIFY_NEXT, NOTIFY_NONE, NOTIFY_SOLICITED, RING_CONSUMER_SLEEPING, W_CONSUMER, W_NOTIFY, W_PRODUCER,
    Ring,
)

_DOORBELL = (1).to_bytes(8, "little")
_CQE_QP_NUM = abi.CQE_FIELDS.index("qp_num")


class WorkQueueProducer:
    """``capacity``: the most WQEs outstanding (posted and not yet completed
    or consumed by a message), i.e. max_send_wr / max_recv_wr; the ring may
    have more slots (a power of two)."""

    def __init__(self, ring: Ring, doorbell_fd: int | None = None, capacity: int | None = None):
        self.ring = ring
        self.doorbell_fd = doorbell_fd
        self.head = ring.producer
        self.capacity = ring.nslots if capacity is None else max(1, min(capacity, ring.nslots))

    def next_slot(self, k: int = 0):
        """The slot the next WQE goes to, or None if the queue is full.
        ``k`` > 0: the slot k places after it, for a batch of WQEs written
        first and published by one ``commit(n)`` (ibv_wr_start..complete)."""
        r = self.ring
        if (self.head + k - r.consumer) & 0xFFFFFFFF >= self.capacity:
            return None
        return r.slot(self.head + k)

    def commit(self, n: int = 1) -> None:
        """Publish ``n`` written slots and ring the doorbell if needed."""
        self.head = (self.head + n) & 0xFFFFFFFF
        r = self.ring
        r.producer = self.head
        if self.doorbell_fd is not None and r.flags & RING_CONSUMER_SLEEPING:
            os.write(self.doorbell_fd, _DOORBELL)


class WorkQueueConsumer:
    def __init__(self, ring: Ring):
        self.ring = ring
        self.tail = ring.consumer
        self.published = self.tail      # the consumer index last written (only this end writes it)

    def pending(self) -> int:
        return (self.ring.producer - self.tail) & 0xFFFFFFFF

    def take(self):
        """The oldest unconsumed slot, or None.  Call ``release`` after use."""
        r = self.ring
        if r.producer == self.tail:
            return None
        return r.slot(self.tail)

    def release(self, n: int = 1) -> None:
        """The slot was read: the next ``take`` looks at the one after it."""
        self.tail = (self.tail + n) & 0xFFFFFFFF

    def publish(self, outstanding: int) -> None:
        """Tell the producer which slots are free: all but the ``outstanding``
        WQEs read and not finished yet (an SQ WQE until it completes, an RQ
        WQE until a message takes it), as a hardware queue frees a slot only
        when it is done with it -- so a full queue fails at post time."""
        c = (self.tail - outstanding) & 0xFFFFFFFF
        if c != self.published:         # (no load of the shared word: its cache line is the producer's too)
            self.published = c
            self.ring.consumer = c

    def sleep(self) -> bool:
        """Announce that the doorbell is needed; False if work slipped in
        meanwhile (then do not sleep)."""
        r = self.ring
        r.flags = r.flags | RING_CONSUMER_SLEEPING
        if r.producer != self.tail:
            r.flags = r.flags & ~RING_CONSUMER_SLEEPING
            return False
        return True

    def wake(self) -> None:
        r = self.ring
        r.flags = r.flags & ~RING_CONSUMER_SLEEPING


class CompletionQueueProducer:
    def __init__(self, ring: Ring):
        self.ring = ring
        self.head = ring.producer
        self.overrun = False

    def push(self, wc: abi.WC, solicited: bool = False) -> tuple[bool, bool]:
        """Write one CQE.  Returns (stored, notify): ``stored`` False means
        the CQ was full (overrun); ``notify`` True means the completion
        channel must be signalled (the ring was armed and this CQE matches)."""
        r = self.ring
        if (self.head - r.consumer) & 0xFFFFFFFF >= r.nslots:
            self.overrun = True
            return False, False
        abi.write_cqe(r.slot(self.head), wc, r.phase(self.head), solicited)
        self.head = (self.head + 1) & 0xFFFFFFFF
        r.producer = self.head
        state, _ = r.notify
        if state == NOTIFY_NEXT or (state == NOTIFY_SOLICITED and (solicited or wc.status != 0)):
            r.disarm()
            return True, True
        return True, False


    def push_cqes(self, cqes: list) -> tuple[int, bool]:
        """Write a batch of CQEs given as tuples of the ``abi.CQE`` fields
        (wr_id, byte_len, imm_data, qp_num, src_qp, vendor_err, pkey_index,
        slid, status, opcode, wc_flags, sl, dlid_path_bits, solicited), in
        order, publishing the producer index once: what ``push`` does for
        each, without a ``WC`` per completion.  Returns (stored, notify):
        the CQEs beyond a full CQ are dropped (overrun), as by ``push``."""
        r = self.ring
        words = r.words
        head = self.head
        room = r.nslots - ((head - words[W_CONSUMER]) & 0xFFFFFFFF)
        if room < len(cqes):
            self.overrun = True
            cqes = cqes[:room] if room > 0 else ()
        if not cqes:
            return 0, False
        buf, size, mask, shift, pack = r.buf, r.slot_size, r.mask, r.shift, abi.CQE.pack_into
        owner = abi.CQE_OWNER
        solicited = failed = 0
        for f in cqes:
            off = HEADER_BYTES + (head & mask) * size
            pack(buf, off, *f)
            buf[off + owner] = ((head >> shift) & 1) ^ 1          # the owner byte last
            head = (head + 1) & 0xFFFFFFFF
            solicited |= f[13]
            failed |= f[8]
        self.head = head
        words[W_PRODUCER] = head
        state = words[W_NOTIFY]
        if state == NOTIFY_NEXT or (state == NOTIFY_SOLICITED and (solicited or failed)):
            r.disarm()
            return len(cqes), True
        return len(cqes), False


class ExtCompletionQueueProducer(CompletionQueueProducer):
    """The producer of a CQ whose CQEs carry the extended words
    (``abi.write_cqe_ex``): ``stamp()`` is read as each CQE is written --
    the completion's timestamp (``uapi.clock``), or None for no clock."""

    def __init__(self, ring: Ring, stamp=None):
        super().__init__(ring)
        self.stamp = stamp

    def push(self, wc: abi.WC, solicited: bool = False) -> tuple[bool, bool]:
        r = self.ring
        if (self.head - r.consumer) & 0xFFFFFFFF >= r.nslots:
            self.overrun = True
            return False, False
        stamp = self.stamp
        abi.write_cqe_ex(r.slot(self.head), wc, r.phase(self.head), solicited, stamp() if stamp else 0)
        self.head = (self.head + 1) & 0xFFFFFFFF
        r.producer = self.head
        state, _ = r.notify
        if state == NOTIFY_NEXT or (state == NOTIFY_SOLICITED and (solicited or wc.status != 0)):
            r.disarm()
            return True, True
        return True, False


    def push_cqes(self, cqes: list) -> tuple[int, bool]:
        """``CompletionQueueProducer.push_cqes`` with the extended words:
        one ``push`` each."""
        stored, notify = 0, False
        for f in cqes:
            ok, n = self.push(abi.WC(f[0], f[8], f[9], f[3], f[1], f[2], f[4], f[10], f[6], f[5], f[7], f[11],
                                     f[12]), bool(f[13]))
            if not ok:
                break
            stored += 1
            notify |= n
        return stored, notify


class CompletionQueueConsumer:
    def __init__(self, ring: Ring):
        self.ring = ring
        self.tail = ring.consumer

    def poll(self, n: int = 1) -> list[abi.WC]:
        """Up to ``n`` completions, oldest first; no system call."""
        r = self.ring
        out = []
        tail = self.tail
        while len(out) < n:
            slot = r.slot(tail)
            if slot[abi.CQE_OWNER] != r.phase(tail):
                break
            out.append(abi.read_cqe(slot))
            tail = (tail + 1) & 0xFFFFFFFF
        if out:
            self.tail = tail
            r.consumer = tail
        return out

    def peek(self, i: int):
        """The slot of the ``i``-th unconsumed CQE (0: the oldest) if the
        producer has written it, else None.  Nothing is consumed: the
        extended CQ walks a batch (ibv_start_poll/ibv_next_poll) and
        releases it with ``consume`` (ibv_end_poll)."""
        r = self.ring
        idx = (self.tail + i) & 0xFFFFFFFF
        slot = r.slot(idx)
        return slot if slot[abi.CQE_OWNER] == r.phase(idx) else None

    def consume(self, n: int) -> None:
        """Release the ``n`` oldest CQEs, read through ``peek``."""
        if n:
            self.tail = (self.tail + n) & 0xFFFFFFFF
            self.ring.consumer = self.tail

    def req_notify(self, solicited_only: bool = False) -> None:
        self.ring.arm(solicited_only)

    def clean(self, qp_num: int) -> int:
        """Remove the unpolled CQEs of QP ``qp_num`` (mlx5_cq_clean, which
        mlx5's provider runs when a QP moves to RESET or is destroyed: a
        reset QP's flush completions must not reach the next user of the
        CQ).  Returns how many went.

        The CQEs the producer has written are those from the consumer index
        on whose owner byte matches their index's phase; the producer writes
        only past them (and never into slots the consumer has not released),
        so they are the consumer's to rearrange while the daemon goes on
        pushing.  As mlx5, sweep them newest first, copying each survivor
        ``freed`` slots towards the producer (its owner byte stays the
        destination's, which is valid for that index), then release the
        ``freed`` oldest slots.  SRQ receive WQEs need no freeing here: the
        daemon returned them to the SRQ when it completed them."""
        r = self.ring
        tail = self.tail
        written = 0
        while written < r.nslots:
            idx = (tail + written) & 0xFFFFFFFF
            if r.slot(idx)[abi.CQE_OWNER] != r.phase(idx):
                break
            written += 1
        freed = 0
        for i in range(written - 1, -1, -1):
            slot = r.slot((tail + i) & 0xFFFFFFFF)
            if abi.CQE.unpack_from(slot, 0)[_CQE_QP_NUM] == qp_num:
                freed += 1
            elif freed:
                r.slot((tail + i + freed) & 0xFFFFFFFF)[:abi.CQE_OWNER] = slot[:abi.CQE_OWNER]
        if freed:
            self.consume(freed)
        return freed

    @property
    def armed(self) -> bool:
        return self.ring.notify[0] != NOTIFY_NONE
