"""Shared-memory rings and the WQE/CQE ABI, in one process and across a fork."""

from __future__ import annotations

import os
import select

import pytest

from softrdma.device import wqe
from softrdma.uapi import abi
from softrdma.uapi.queues import (
    CompletionQueueConsumer, CompletionQueueProducer, WorkQueueConsumer, WorkQueueProducer,
)
from softrdma.uapi.shm import Ring, SharedRegion
from softrdma.enums import (
    IBV_SEND_SIGNALED, IBV_WC_RECV, IBV_WC_SUCCESS, IBV_WC_WITH_IMM, IBV_WC_WR_FLUSH_ERR,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
)
from softrdma.uapi.abi import WC


def test_region_is_shared_through_its_fd():
    a = SharedRegion(8192)
    b = SharedRegion.attach(os.dup(a.fd), 8192)
    a.view[100:105] = b"hello"
    assert bytes(b.view[100:105]) == b"hello"
    assert a.address != 0
    a.close()
    b.close()


def test_attach_refuses_a_short_fd():
    a = SharedRegion(4096)
    with pytest.raises(ValueError):
        SharedRegion.attach(os.dup(a.fd), 8192)
    a.close()


def test_ring_rounds_to_power_of_two_and_attach_validates():
    r = Ring.create(100, 64)
    assert r.nslots == 128
    other = Ring.attach(os.dup(r.fd))
    assert (other.nslots, other.slot_size) == (128, 64)
    bad = SharedRegion(4096)
    with pytest.raises(ValueError):
        Ring.attach(os.dup(bad.fd))


def test_regions_are_sealed_against_shrinking():
    """The library's memfds (MR buffers, rings) cannot be cut under the
    daemon's mapping: a shrink would make its next access SIGBUS."""
    import fcntl
    for region in (SharedRegion(8192), Ring.create(8, 64).region):
        assert fcntl.fcntl(region.fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
        with pytest.raises(PermissionError):
            os.ftruncate(region.fd, 0)
        os.ftruncate(region.fd, region.size * 2)                   # growing is harmless
        region.close()


def test_map_refuses_memory_its_owner_could_shrink():
    unsealed = os.memfd_create("x", os.MFD_CLOEXEC)
    sealable = os.memfd_create("y", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    r, w = os.pipe()
    good = Ring.create(4, 64)
    for fd in (unsealed, sealable):
        os.ftruncate(fd, 8192)
        os.pwrite(fd, bytes(good.region.view[:16]), 0)           # a valid ring header
        with pytest.raises(ValueError, match="sealed"):
            SharedRegion.map_fd(fd, 4096)
        with pytest.raises(ValueError, match="sealed"):
            Ring.map_fd(fd)
    for fd in (r, w):
        with pytest.raises(ValueError, match="not a memfd"):
            SharedRegion.map_fd(fd, 4096)
    with pytest.raises(ValueError, match="4096 needed"):
        SharedRegion.map_fd(SharedRegion(1024).fd, 4096)
    for fd in (unsealed, sealable, r, w):
        os.close(fd)
    good.close()


def test_map_fd_leaves_the_fd_to_its_owner():
    a = SharedRegion(4096)
    b = SharedRegion.map_fd(a.fd, 4096)
    assert b.fd == -1
    a.view[:5] = b"hello"
    assert bytes(b.view[:5]) == b"hello"
    b.close()
    os.fstat(a.fd)                                               # still open: map_fd did not take it
    ring = Ring.create(4, 64)
    other = Ring.map_fd(ring.fd)
    other.close()
    os.fstat(ring.fd)
    ring.close()
    a.close()


def test_send_wqe_round_trip_sges_and_inline():
    slot = memoryview(bytearray(abi.send_slot_size(4, 64)))
    abi.encode_send_wqe(slot, 7, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, [(0x1000, 64, 0x101), (0x2000, 8, 0x202)],
                        remote_addr=0xABC0, rkey=0x303, imm_data=0xDEADBEEF)
    w = wqe.decode_send_wqe(slot)
    assert (w.wr_id, w.opcode, w.sg_list, w.remote_addr, w.rkey, w.length) == (
        7, IBV_WR_RDMA_WRITE, [(0x1000, 64, 0x101), (0x2000, 8, 0x202)], 0xABC0, 0x303, 72)
    abi.encode_send_wqe(slot, 8, IBV_WR_SEND, 0, inline=b"x" * 40)
    w = wqe.decode_send_wqe(slot)
    assert w.inline_data == b"x" * 40 and w.length == 40
    abi.encode_send_wqe(slot, 9, IBV_WR_ATOMIC_CMP_AND_SWP, 0, [(0x1000, 8, 1)], compare_add=5, swap=6)
    w = wqe.decode_send_wqe(slot)
    assert (w.compare_add, w.swap, w.is_rd_atomic) == (5, 6, True)


def test_decode_rejects_counts_that_overrun_the_slot():
    slot = memoryview(bytearray(128))
    abi.SEND_WQE_HDR.pack_into(slot, 0, 1, IBV_WR_SEND, 200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        wqe.decode_send_wqe(slot)
    abi.SEND_WQE_HDR.pack_into(slot, 0, 1, IBV_WR_SEND, 0, abi.IBV_SEND_INLINE, 0, 0, 0, 4000, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        wqe.decode_send_wqe(slot)
    abi.RECV_WQE_HDR.pack_into(slot, 0, 1, 99, 0)
    with pytest.raises(ValueError):
        wqe.decode_recv_wqe(slot)


def test_work_queue_full_empty_and_doorbell_suppression():
    ring = Ring.create(4, abi.recv_slot_size(2))
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    prod = WorkQueueProducer(ring, efd)
    cons = WorkQueueConsumer(Ring.attach(os.dup(ring.fd)))
    for i in range(4):
        abi.encode_recv_wqe(prod.next_slot(), i, [(0x1000 * i, 64, 9)])
        prod.commit()
    assert prod.next_slot() is None                       # full
    assert select.select([efd], [], [], 0)[0] == []       # consumer awake: no doorbell
    got = []
    while (slot := cons.take()) is not None:
        got.append(wqe.decode_recv_wqe(slot).wr_id)
        cons.release()
    assert got == [0, 1, 2, 3]
    assert prod.next_slot() is None                       # read is not done: the slots are still held
    cons.publish(1)                                       # three finished, one still outstanding
    assert prod.next_slot() is not None
    cons.publish(0)
    assert cons.sleep()                                   # now it sleeps: the next post rings
    abi.encode_recv_wqe(prod.next_slot(), 4, [])
    prod.commit()
    assert select.select([efd], [], [], 0)[0] == [efd]
    assert int.from_bytes(os.read(efd, 8), "little") == 1
    assert not cons.sleep()                               # work is there: do not sleep


def test_cq_owner_bit_flips_per_wrap_and_poll_sees_only_new_entries():
    ring = Ring.create(4, abi.CQE_BYTES)
    prod = CompletionQueueProducer(ring)
    cons = CompletionQueueConsumer(Ring.attach(os.dup(ring.fd)))
    assert cons.poll(8) == []
    seen = []
    for wrap in range(5):                                 # 5 passes over 4 slots
        for i in range(3):
            wc = WC(wrap * 10 + i, IBV_WC_SUCCESS, IBV_WC_RECV, 0x11, byte_len=i, imm_data=0x1234,
                    wc_flags=IBV_WC_WITH_IMM, src_qp=0x22)
            assert prod.push(wc) == (True, False)
        got = cons.poll(8)
        seen += [w.wr_id for w in got]
        assert [(w.byte_len, w.imm_data, w.src_qp, w.wc_flags) for w in got] == [
            (i, 0x1234, 0x22, IBV_WC_WITH_IMM) for i in range(3)]
    assert seen == [w * 10 + i for w in range(5) for i in range(3)]


def test_cq_overrun_is_reported_and_nothing_is_overwritten():
    ring = Ring.create(2, abi.CQE_BYTES)
    prod = CompletionQueueProducer(ring)
    cons = CompletionQueueConsumer(ring)
    assert prod.push(WC(1, 0, 0, 1))[0] and prod.push(WC(2, 0, 0, 1))[0]
    assert prod.push(WC(3, 0, 0, 1)) == (False, False) and prod.overrun
    assert [w.wr_id for w in cons.poll(4)] == [1, 2]


def test_req_notify_next_and_solicited_fire_once_per_arm():
    ring = Ring.create(8, abi.CQE_BYTES)
    prod = CompletionQueueProducer(ring)
    cons = CompletionQueueConsumer(ring)
    assert prod.push(WC(1, 0, 0, 1)) == (True, False)     # not armed
    cons.req_notify()
    assert prod.push(WC(2, 0, 0, 1)) == (True, True)
    assert prod.push(WC(3, 0, 0, 1)) == (True, False)     # one event per arm
    cons.req_notify(solicited_only=True)
    assert prod.push(WC(4, 0, 0, 1)) == (True, False)
    assert prod.push(WC(5, 0, 0, 1), solicited=True) == (True, True)
    cons.req_notify(solicited_only=True)                   # errors always notify
    assert prod.push(WC(6, IBV_WC_WR_FLUSH_ERR, 0, 1)) == (True, True)


def test_cq_across_processes():
    ring = Ring.create(16, abi.CQE_BYTES)
    n = 1000
    pid = os.fork()
    if pid == 0:                                          # child: the daemon side
        try:
            child = CompletionQueueProducer(Ring.attach(os.dup(ring.fd)))
            i = 0
            while i < n:
                if child.push(WC(i, 0, 0, 1, byte_len=i * 3))[0]:
                    i += 1
            os._exit(0)
        except BaseException:
            os._exit(1)
    cons = CompletionQueueConsumer(ring)
    got = []
    while len(got) < n:
        got += [(w.wr_id, w.byte_len) for w in cons.poll(16)]
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert got == [(i, i * 3) for i in range(n)]


def test_ring_indices_are_never_seen_half_written_across_processes():
    # struct.pack_into zero-fills a field before writing it: an index stored
    # that way can be read as 0 by the other process.  Whole-word stores can't.
    ring = Ring.create(8, 64)
    ring.producer = 1
    pid = os.fork()
    if pid == 0:
        try:
            r = Ring.attach(os.dup(ring.fd))
            v = 1
            for _ in range(300_000):
                v = (v * 0x9E37 + 0x0101_0101) % 0xFFFF_FFFE + 1   # 1 .. 2^32-2: never 0
                r.producer = v
            os._exit(0)
        except BaseException:
            os._exit(1)
    zeros = 0
    reads = 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        for _ in range(2000):
            zeros += ring.producer == 0
            reads += 1
        if done:
            break
    assert status == 0
    assert reads > 0 and zeros == 0
