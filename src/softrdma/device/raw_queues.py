"""Raw packet QPs, receive WQs and RSS indirection tables as the daemon
holds them (the send side and the receive scatter; steering is
``device.raw``'s).

* ``RawQP``: an IBV_QPT_RAW_PACKET QP.  Its send WQEs are whole Ethernet
  frames gathered from the SGEs (or inline data) and handed to the
  device's ``RawPort``; its receive queue takes frames the port steers to
  it.  With an RSS configuration (``RssConf``: an indirection table, a
  Toeplitz key, the fields hashed) it has no queues of its own: frames go
  to the table's WQs.  The state machine is ib_modify_qp_is_ok()'s for
  RAW_PACKET: RESET->INIT needs IBV_QP_PORT, INIT->INIT may carry it,
  RTR->RTS and RTS->RTS may name IBV_QP_RATE_LIMIT (EOPNOTSUPP: no packet
  pacing, as mlx5 without it), the others take
  IBV_QP_STATE alone; a frame is received in RTR
  and RTS, sent in RTS; in ERR every WQE completes with WR_FLUSH_ERR.
  It answers to the attributes the daemon's other code reads of a QP
  (``.qp``, ``pd``, ``send_cq``, ``recv_cq``, ``srq``, ``state``, ...).
* ``RawWQ``: ibv_create_wq's receive WQ (IBV_WQT_RQ): a ring, a CQ, and
  the states RESET, RDY (receives) and ERR (flushes).
* ``IndTable``: ibv_create_rwq_ind_table: 2^log entries naming WQs.

An RSS QP has no state to wait for (as mlx5's, a TIR over RQs): once a
flow steers to it, a frame goes to the WQ its hash picks, if that WQ is
RDY.  A frame longer than the receive WQE completes it with
IBV_WC_LOC_LEN_ERR and the queue carries on (a NIC's RQ would go to ERR;
here rules that may copy every frame of a busy netdev -- a sniffer on lo
-- must not stop the queue for one jumbo frame).

Receive WQEs stay in their ring until a frame takes one (no copy of the
queue in the daemon): a full queue is a full ring, as on hardware.  The
rings of a raw QP or WQ never wake the daemon's polling: the send queue
always asks for its doorbell (each post is one eventfd write, and the
doorbell drains the queue at once), the receive queue only in ERR (so
posts there are flushed)."""

from __future__ import annotations

import errno
import os

from ..enums import (IBV_ACCESS_LOCAL_WRITE, IBV_QP_CUR_STATE, IBV_QP_PORT, IBV_QP_RATE_LIMIT, IBV_QP_STATE,
                     IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RAW_PACKET,
                     IBV_SEND_SIGNALED, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_RECV,
                     IBV_WC_SEND, IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR, IBV_WQ_ATTR_CURR_STATE, IBV_WQ_ATTR_FLAGS,
                     IBV_WQ_ATTR_STATE, IBV_WQS_ERR, IBV_WQS_RDY, IBV_WQS_RESET, IBV_WR_SEND)
from ..errors import VerbsError
from ..uapi.abi import WC
from ..uapi.queues import WorkQueueConsumer
from ..wire.toeplitz import rss_hash
from .wqe import decode_recv_wqe, decode_send_wqe

_RESET, _INIT, _RTR, _RTS, _ERR = (int(s) for s in (IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                                     IBV_QPS_ERR))
_SUCCESS, _FLUSH = int(IBV_WC_SUCCESS), int(IBV_WC_WR_FLUSH_ERR)
_WC_SEND, _WC_RECV = int(IBV_WC_SEND), int(IBV_WC_RECV)
_LOCAL_WRITE = int(IBV_ACCESS_LOCAL_WRITE)
_SIGNALED = int(IBV_SEND_SIGNALED)
# ib_modify_qp_is_ok() for IB_QPT_RAW_PACKET: (cur, next) -> (required, optional)
_RATE = int(IBV_QP_RATE_LIMIT)
_TRANSITIONS = {
    (_RESET, _RESET): (0, 0), (_RESET, _INIT): (int(IBV_QP_PORT), 0),
    (_INIT, _INIT): (0, int(IBV_QP_PORT)), (_INIT, _RTR): (0, 0), (_RTR, _RTS): (0, _RATE), (_RTS, _RTS): (0, _RATE),
}
# an Ethernet header, and the most a frame may carry past the MTU (header and one VLAN tag)
ETH_HLEN = 14
FRAME_OVERHEAD = ETH_HLEN + 4


class RecvTarget:
    """What a frame lands in: a receive ring, its PD's memory and a CQ
    (a raw QP's own receive queue, or a WQ)."""

    def __init__(self, number: int, pd, cq, ring, memory):
        self.number = number           # the completion's qp_num
        self.pd = pd
        self.recv_cq = cq
        self.rq = WorkQueueConsumer(ring) if ring is not None else None
        self.rq_ring = ring
        self.memory = memory
        self.rx_frames = 0
        self.rx_dropped = 0            # no receive WQE posted (as a NIC's rx_out_of_buffer)

    def scatter(self, frame) -> bool:
        """Put ``frame`` into the oldest receive WQE and complete it; False
        (dropped, counted) if none is posted."""
        rq = self.rq
        slot = rq.take()
        if slot is None:
            self.rx_dropped += 1
            return False
        try:
            wqe = decode_recv_wqe(slot)
        except ValueError:
            wqe = None
            wr_id = int.from_bytes(slot[0:8], "little")
        rq.release()
        rq.publish(0)
        if wqe is None:
            self.recv_error(wr_id, IBV_WC_LOC_QP_OP_ERR)
            return False
        n = len(frame)
        if n > wqe.length:
            self.recv_error(wqe.wr_id, IBV_WC_LOC_LEN_ERR, n)
            return False
        off = 0
        for addr, length, lkey in wqe.sg_list:
            take = min(length, n - off)
            if take <= 0:
                break
            view = self.memory.local_view(self.pd, lkey, addr, take, _LOCAL_WRITE)
            if view is None:
                self.recv_error(wqe.wr_id, IBV_WC_LOC_PROT_ERR, n)
                return False
            view[:] = frame[off:off + take]
            off += take
        self.rx_frames += 1
        self.recv_cq.push(WC(wqe.wr_id, _SUCCESS, _WC_RECV, self.number, byte_len=n))
        return True

    def flush_rq(self) -> None:
        """Complete every posted receive WQE with WR_FLUSH_ERR."""
        rq = self.rq
        if rq is None:
            return
        while (slot := rq.take()) is not None:
            wr_id = int.from_bytes(slot[0:8], "little")
            rq.release()
            rq.publish(0)
            self.recv_cq.push(WC(wr_id, _FLUSH, _WC_RECV, self.number))

    def discard_rq(self) -> None:
        """RESET: the posted receive WQEs are gone, without completions."""
        rq = self.rq
        if rq is not None:
            while rq.take() is not None:
                rq.release()
            rq.publish(0)

    def recv_error(self, wr_id: int, status: int, n: int = 0) -> None:
        self.recv_cq.push(WC(wr_id, int(status), _WC_RECV, self.number, byte_len=n))


class RssConf:
    """ibv_rx_hash_conf and the indirection table of an RSS QP."""

    def __init__(self, table: "IndTable", key: bytes, fields_mask: int):
        self.table = table
        self.key = key
        self.fields_mask = fields_mask

    def pick(self, fields) -> "RawWQ":
        entries = self.table.entries
        return entries[rss_hash(self.key, fields, self.fields_mask) & (len(entries) - 1)]


class _Attr:
    """The few ibv_qp_attr fields other code reads of any QP (restrack)."""

    def __init__(self):
        self.port_num = 1
        self.path_mig_state = 0
        self.path_mtu = 0


class RawQP(RecvTarget):
    qp_type = int(IBV_QPT_RAW_PACKET)
    srq = None
    dest_qpn = req_psn = resp_psn = 0
    deadline = timer_at = None

    def __init__(self, qp_num: int, *, pd, memory, send_cq, recv_cq, sq_ring, rq_ring, doorbell: int, owner,
                 cap, sq_sig_all: bool, port, rss: RssConf | None = None):
        super().__init__(qp_num, pd, recv_cq, rq_ring, memory)
        self.qp_num = qp_num
        self.handle = 0
        self.send_cq = send_cq
        self.sq = WorkQueueConsumer(sq_ring) if sq_ring is not None else None
        self.sq_ring = sq_ring
        self.doorbell = doorbell
        self.owner = owner
        self.cap = cap
        self.sq_sig_all = sq_sig_all
        self.port = port               # the device's RawPort
        self.rss = rss
        self.state = _RESET
        self.attr = _Attr()
        self.flows: list = []
        self.tx_frames = 0
        if self.sq is not None:
            self.sq.sleep()            # every post rings the doorbell (see the module's docstring)

    @property
    def qp(self) -> "RawQP":
        """The daemon's other code reads a QP's transport object as ``dqp.qp``."""
        return self

    # ------------------------------------------------------------ state
    def modify(self, attr: dict, mask: int) -> None:
        """ibv_modify_qp with ib_modify_qp_is_ok()'s rules for RAW_PACKET."""
        cur = self.state
        if mask & IBV_QP_CUR_STATE and attr.get("cur_qp_state", cur) != cur:
            raise VerbsError(errno.EINVAL, "cur_qp_state is not the QP's state")
        nxt = attr.get("qp_state", cur) if mask & IBV_QP_STATE else cur
        if nxt in (_RESET, _ERR) and mask & IBV_QP_STATE:
            req, opt = 0, 0
        else:
            rule = _TRANSITIONS.get((cur, nxt))
            if rule is None:
                raise VerbsError(errno.EINVAL, f"raw packet QP: no transition from state {cur} to {nxt}")
            req, opt = rule
        allowed = int(IBV_QP_STATE | IBV_QP_CUR_STATE) | req | opt
        if mask & ~allowed or (mask & req) != req:
            raise VerbsError(errno.EINVAL, f"raw packet QP: attribute mask 0x{mask:x} invalid for {cur}->{nxt}")
        if mask & _RATE:
            # packet pacing, which this device has not (packet_pacing_caps 0: mlx5's EOPNOTSUPP; the
            # library sends the bit alone, uapi.qp_attr.UNSUPPORTED_MASK)
            raise VerbsError(errno.EOPNOTSUPP, "rate_limit: the device has no packet pacing")
        if mask & IBV_QP_PORT:
            if attr.get("port_num") != 1:
                raise VerbsError(errno.EINVAL, f"port_num {attr.get('port_num')} is not a port of the device")
            self.attr.port_num = 1
        self.state = nxt
        if nxt == _ERR and cur != _ERR:
            self.to_error()
        elif nxt == _RESET and cur != _RESET:
            self.discard_rq()
            if self.sq is not None:
                while self.sq.take() is not None:
                    self.sq.release()
                self.sq.publish(0)
            if self.rq is not None:
                self.rq.wake()

    def to_error(self) -> None:
        self.state = _ERR
        self.flush_rq()
        self.drain_sq()
        if self.rq is not None:
            self.rq.sleep()            # posts in ERR ring the doorbell, and are flushed

    def query(self) -> dict:
        a = {k: 0 for k in ("path_mtu", "qkey", "rq_psn", "sq_psn", "dest_qp_num", "qp_access_flags",
                            "pkey_index", "sq_draining", "max_rd_atomic", "max_dest_rd_atomic",
                            "min_rnr_timer", "timeout", "retry_cnt", "rnr_retry", "en_sqd_async_notify")}
        a.update(qp_state=self.state, cur_qp_state=self.state, port_num=self.attr.port_num)
        a["ah_attr"] = {"dgid": "00" * 16, "sgid_index": 0, "flow_label": 0, "hop_limit": 0, "traffic_class": 0,
                        "sl": 0, "is_global": 0, "port_num": 0, "dlid": 0}
        cap = self.cap
        a["cap"] = {k: getattr(cap, k) for k in ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge",
                                                 "max_inline_data")}
        return a

    # ------------------------------------------------------------ send
    def doorbell_rung(self) -> None:
        try:
            os.read(self.doorbell, 8)
        except OSError:
            pass
        self.drain_sq()
        if self.state == _ERR:
            self.flush_rq()

    def drain_sq(self) -> None:
        """Send every posted frame (RTS), or flush it (ERR); a WQE the QP
        cannot send completes in error and takes the QP to ERR."""
        sq = self.sq
        if sq is None or self.state not in (_RTS, _ERR):
            return
        budget = sq.ring.nslots
        while budget and (slot := sq.take()) is not None:
            budget -= 1
            try:
                wqe = decode_send_wqe(slot)
            except ValueError:
                wqe = None
            wr_id = wqe.wr_id if wqe is not None else int.from_bytes(slot[0:8], "little")
            flags = wqe.send_flags if wqe is not None else _SIGNALED
            sq.release()
            sq.publish(0)
            if self.state == _ERR:
                self.send_cq.push(WC(wr_id, _FLUSH, _WC_SEND, self.qp_num))
                continue
            status, n = self._send_one(wqe)
            if status != _SUCCESS:
                self.send_cq.push(WC(wr_id, status, _WC_SEND, self.qp_num))
                self.to_error()
                return
            if self.sq_sig_all or flags & _SIGNALED:
                self.send_cq.push(WC(wr_id, _SUCCESS, _WC_SEND, self.qp_num, byte_len=n))

    def _send_one(self, wqe) -> tuple[int, int]:
        if wqe is None or wqe.opcode != IBV_WR_SEND:
            return int(IBV_WC_LOC_QP_OP_ERR), 0
        if wqe.inline_data is not None:
            frame = wqe.inline_data
        else:
            parts = []
            for addr, length, lkey in wqe.sg_list:
                view = self.memory.local_view(self.pd, lkey, addr, length, 0)
                if view is None:
                    return int(IBV_WC_LOC_PROT_ERR), 0
                parts.append(view)
            frame = b"".join(parts)
        n = len(frame)
        if n < ETH_HLEN or n > self.port.mtu + FRAME_OVERHEAD:
            return int(IBV_WC_LOC_LEN_ERR), 0
        self.port.transmit(frame)
        self.tx_frames += 1
        return _SUCCESS, n

    # ------------------------------------------------------------ receive
    def receive(self, frame, fields) -> None:
        """A frame steered to this QP."""
        rss = self.rss
        if rss is not None:
            wq = rss.pick(fields)
            if wq.state == IBV_WQS_RDY and not wq.dead:
                wq.scatter(frame)
            return
        if self.state in (_RTR, _RTS):
            if not self.scatter(frame):
                return
        # RESET, INIT, ERR: a QP not ready to receive drops the frame

    def close(self) -> None:
        if self.doorbell >= 0:
            os.close(self.doorbell)
            self.doorbell = -1
        for r in (self.sq_ring, self.rq_ring):
            if r is not None:
                r.close()


class RawWQ(RecvTarget):
    """A receive work queue (IBV_WQT_RQ)."""

    def __init__(self, wq_num: int, *, pd, cq, ring, doorbell: int, memory, max_wr: int, max_sge: int):
        super().__init__(wq_num, pd, cq, ring, memory)
        self.wq_num = wq_num
        self.doorbell = doorbell
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.state = int(IBV_WQS_RESET)
        self.dead = False
        self.tables: list = []          # the indirection tables naming it

    def modify(self, mask: int, state: int, curr_state: int) -> None:
        """ibv_modify_wq: IBV_WQ_ATTR_STATE (RESET, RDY, ERR) with an
        optional IBV_WQ_ATTR_CURR_STATE that must be the WQ's."""
        if mask & ~int(IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS):
            raise VerbsError(errno.EINVAL, f"modify_wq: unknown attr_mask bits 0x{mask:x}")
        if mask & IBV_WQ_ATTR_CURR_STATE and curr_state != self.state:
            raise VerbsError(errno.EINVAL, "modify_wq: curr_wq_state is not the WQ's state")
        if not mask & IBV_WQ_ATTR_STATE:
            return
        if state not in (IBV_WQS_RESET, IBV_WQS_RDY, IBV_WQS_ERR):
            raise VerbsError(errno.EINVAL, f"modify_wq: no WQ state {state}")
        cur, self.state = self.state, int(state)
        if state == IBV_WQS_ERR and cur != IBV_WQS_ERR:
            self.flush_rq()
            self.rq.sleep()            # posts in ERR ring the doorbell, and are flushed
        elif state != IBV_WQS_ERR:
            self.rq.wake()
            if state == IBV_WQS_RESET:
                self.discard_rq()

    def doorbell_rung(self) -> None:
        try:
            os.read(self.doorbell, 8)
        except OSError:
            pass
        if self.state == IBV_WQS_ERR:
            self.flush_rq()

    def close(self) -> None:
        self.dead = True
        if self.doorbell >= 0:
            os.close(self.doorbell)
            self.doorbell = -1
        self.rq_ring.close()


class IndTable:
    """An RSS indirection table: its entries, 2^log_size WQs (the list
    given, repeated to fill the table when shorter)."""

    def __init__(self, num: int, log_size: int, wqs: list):
        self.num = num
        self.log_size = log_size
        n = 1 << log_size
        self.wqs = wqs
        self.entries = [wqs[i % len(wqs)] for i in range(n)]
        self.qps: list = []            # the RSS QPs using it


__all__ = ["RawQP", "RawWQ", "IndTable", "RssConf", "RecvTarget"]
