"""Traffic for the observability tests: two connected RC QPs on one device
of a real softrdmad, in this process (the daemon's loopback path), moving
SENDs, RDMA WRITEs and READs and atomics, each waited for and checked."""

from __future__ import annotations

import time

from softrdma.enums import (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
                            IBV_ACCESS_REMOTE_WRITE, IBV_MTU_1024, IBV_QPT_RC, IBV_WC_SUCCESS,
                            IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND)
from softrdma.verbs import addr, cq, mr, pd, qp, wr

ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
MR_BYTES = 1 << 20


def ipv4_gid_index(ctx) -> int:
    """The GID of 127.0.0.1 (::ffff:7f00:1) on lo."""
    return next(i for i in range(16) if str(ctx.query_gid(1, i)).startswith("0000:0000:0000:0000:0000:ffff"))


def rc_attr(peer_qpn: int, gid, gid_index: int, *, timeout: int = 18, retry_cnt: int = 7, rnr_retry: int = 7,
            min_rnr_timer: int = 1, access: int = ACC) -> qp.QPAttr:
    """The attributes that take an RC QP to RTS towards ``peer_qpn`` at
    ``gid`` (this device's GID ``gid_index``), with ``access`` granted."""
    a = qp.QPAttr()
    a.qp_access_flags = access
    a.path_mtu = IBV_MTU_1024
    a.dest_qp_num = peer_qpn
    a.max_dest_rd_atomic = a.max_rd_atomic = 4
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = min_rnr_timer, timeout, retry_cnt, rnr_retry
    a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=gid, sgid_index=gid_index), is_global=1, port_num=1)
    return a


class RcPair:
    """QP ``a`` (the requester in every helper) connected to QP ``b``;
    ``peer_ctx``: ``b`` on another device (each QP then sends from its own
    device's IPv4 GID).  ``connect=False`` leaves both in RESET
    (``connect`` later)."""

    def __init__(self, ctx, *, connect: bool = True, depth: int = 64, peer_ctx=None, **attr):
        self.ctx = ctx
        self.peer_ctx = peer_ctx or ctx
        self.pd = pd.PD(ctx)
        self.pd_b = pd.PD(peer_ctx) if peer_ctx is not None else self.pd
        self.ma, self.mb = mr.MR(self.pd, MR_BYTES, ACC), mr.MR(self.pd_b, MR_BYTES, ACC)
        self.cqa, self.cqb = cq.CQ(ctx, 4 * depth), cq.CQ(self.peer_ctx, 4 * depth)
        cap = qp.QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
        self.a = qp.QP(self.pd, qp.QPInitAttr(IBV_QPT_RC, scq=self.cqa, rcq=self.cqa, cap=cap))
        self.b = qp.QP(self.pd_b, qp.QPInitAttr(IBV_QPT_RC, scq=self.cqb, rcq=self.cqb, cap=cap))
        self.depth = depth
        if connect:
            self.connect(**attr)

    def connect(self, **attr) -> None:
        gia, gib = ipv4_gid_index(self.ctx), ipv4_gid_index(self.peer_ctx)
        gid_a, gid_b = self.ctx.query_gid(1, gia), self.peer_ctx.query_gid(1, gib)
        self.a.to_rts(rc_attr(self.b.qp_num, gid_b, gia, **attr))
        self.b.to_rts(rc_attr(self.a.qp_num, gid_a, gib))

    @staticmethod
    def wait(c, n: int, timeout: float = 20.0) -> list:
        got = []
        end = time.monotonic() + timeout
        while len(got) < n:
            if time.monotonic() > end:
                raise TimeoutError(f"{len(got)} of {n} completions")
            got += c.poll(32)[1]
        return got

    def _ok(self, c, n: int) -> None:
        bad = [(w.wr_id, w.status) for w in self.wait(c, n) if w.status != IBV_WC_SUCCESS]
        assert not bad, bad

    def send(self, n: int, size: int) -> None:
        """n SENDs of ``size`` bytes a -> b, at most ``depth`` in flight."""
        left = n
        while left:
            k = min(left, self.depth)
            for i in range(k):
                self.b.post_recv(wr.RecvWR(i, 1, [wr.SGE(self.mb.buf, size, self.mb.lkey)]))
            for i in range(k):
                self.a.post_send(wr.SendWR(i, IBV_WR_SEND, 1, sg=[wr.SGE(self.ma.buf, size, self.ma.lkey)]))
            self._ok(self.cqa, k)
            self._ok(self.cqb, k)
            left -= k

    def _rdma(self, opcode: int, n: int, size: int) -> None:
        left = n
        while left:
            k = min(left, self.depth)
            for i in range(k):
                w = wr.SendWR(i, opcode, 1, sg=[wr.SGE(self.ma.buf, size, self.ma.lkey)])
                w.set_wr_rdma(self.mb.rkey, self.mb.buf)
                self.a.post_send(w)
            self._ok(self.cqa, k)
            left -= k

    def write(self, n: int, size: int) -> None:
        self._rdma(IBV_WR_RDMA_WRITE, n, size)

    def read(self, n: int, size: int) -> None:
        self._rdma(IBV_WR_RDMA_READ, n, size)

    def fetch_add(self, n: int) -> None:
        for i in range(n):
            w = wr.SendWR(i, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, sg=[wr.SGE(self.ma.buf, 8, self.ma.lkey)])
            w.set_wr_atomic(self.mb.rkey, self.mb.buf, 1)
            self.a.post_send(w)
        self._ok(self.cqa, n)

    def close(self) -> None:
        for o in dict.fromkeys((self.a, self.b, self.cqa, self.cqb, self.ma, self.mb, self.pd, self.pd_b)):
            o.close()
