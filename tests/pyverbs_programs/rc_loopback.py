"""What the pyverbs programs here share, written as any pyverbs program
would: the first device, its IPv4-mapped GID, and a pair of RC QPs on one
PD connected to each other through the device (each with its own CQ).  It
imports ``pyverbs``, not softrdma."""

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr


def open_first_device():
    """(ctx, gid_index, gid): the first device and its IPv4-mapped GID."""
    ctx = Context(name=get_device_list()[0].name.decode())
    gid_index = next(i for i in range(16)
                     if ctx.query_gid(port_num=1, index=i).gid.startswith("0000:0000:0000:0000:0000:ffff"))
    return ctx, gid_index, ctx.query_gid(port_num=1, index=gid_index)


def pair(ctx, pd, gid_index, gid, access):
    """([qp0, qp1], [cq0, cq1]): two RC QPs in RTS towards each other,
    granting ``access``."""
    cqs = [CQ(ctx, 16, None, None, 0) for _ in range(2)]
    cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for cq in cqs]
    for qp, peer in ((qps[0], qps[1]), (qps[1], qps[0])):
        attr = QPAttr()
        attr.qp_access_flags = access
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.timeout, attr.retry_cnt, attr.rnr_retry = 14, 7, 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=gid_index), dlid=0)
        qp.to_rts(attr)
    return qps, cqs


def status(cq):
    """The status of the next completion on ``cq`` (spins until there is one)."""
    while True:
        n, wcs = cq.poll()
        if n:
            return wcs[0].status
