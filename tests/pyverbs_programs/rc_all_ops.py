"""An ordinary pyverbs program, written for real hardware (rdma-core's
tests/base.py style): two RC QPs on one device, SEND, RDMA WRITE, RDMA
READ, atomics, checked byte for byte.  It imports ``pyverbs``, not softrdma."""

import os
import sys

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZE = 65536
dev = get_device_list()[0].name.decode()
ctx = Context(name=dev)
port_attr = ctx.query_port(1)
assert port_attr.state == e.IBV_PORT_ACTIVE
gid_index = next(i for i in range(16) if ctx.query_gid(port_num=1, index=i).gid.startswith("0000:0000:0000:0000:0000:ffff"))
gid = ctx.query_gid(port_num=1, index=gid_index)
pd = PD(ctx)
access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)
mrs = [MR(pd, 4 * SIZE, access) for _ in range(2)]
cqs = [CQ(ctx, 100, None, None, 0) for _ in range(2)]
cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for cq in cqs]
for qp, peer in ((qps[0], qps[1]), (qps[1], qps[0])):
    attr = QPAttr()
    attr.qp_access_flags = access
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = peer.qp_num
    attr.rq_psn = attr.sq_psn = 0
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout, attr.retry_cnt, attr.rnr_retry = 14, 7, 7
    gr = GlobalRoute(dgid=gid, sgid_index=gid_index)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr, dlid=0)
    qp.to_rts(attr)


def poll(cq, n=1):
    wcs = []
    while len(wcs) < n:
        nc, got = cq.poll()
        wcs += got
    for wc in wcs:
        if wc.status != e.IBV_WC_SUCCESS:
            sys.exit(f"completion error {wc.status}")
    return wcs


data = os.urandom(SIZE)
mrs[0].write(data, SIZE)
qps[1].post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mrs[1].buf, SIZE, mrs[1].lkey)]))
qps[0].post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mrs[0].buf, SIZE, mrs[0].lkey)]))
poll(cqs[0])
assert poll(cqs[1])[0].byte_len == SIZE and mrs[1].read(SIZE, 0) == data
w = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mrs[0].buf, SIZE, mrs[0].lkey)])
w.set_wr_rdma(rkey=mrs[1].rkey, addr=mrs[1].buf + SIZE)
qps[0].post_send(w)
poll(cqs[0])
assert mrs[1].read(SIZE, SIZE) == data
r = SendWR(wr_id=4, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(mrs[0].buf + 2 * SIZE, SIZE, mrs[0].lkey)])
r.set_wr_rdma(rkey=mrs[1].rkey, addr=mrs[1].buf + SIZE)
qps[0].post_send(r)
poll(cqs[0])
assert mrs[0].read(SIZE, 2 * SIZE) == data
mrs[1].write((5).to_bytes(8, "little"), 8, 3 * SIZE)
a = SendWR(wr_id=5, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[SGE(mrs[0].buf + 3 * SIZE, 8, mrs[0].lkey)])
a.set_wr_atomic(rkey=mrs[1].rkey, addr=mrs[1].buf + 3 * SIZE, compare_add=10)
qps[0].post_send(a)
poll(cqs[0])
c = SendWR(wr_id=6, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1,
           sg=[SGE(mrs[0].buf + 3 * SIZE + 8, 8, mrs[0].lkey)])
c.set_wr_atomic(rkey=mrs[1].rkey, addr=mrs[1].buf + 3 * SIZE, compare_add=15, swap=99)
qps[0].post_send(c)
poll(cqs[0])
assert int.from_bytes(mrs[0].read(8, 3 * SIZE), "little") == 5
assert int.from_bytes(mrs[0].read(8, 3 * SIZE + 8), "little") == 15
assert int.from_bytes(mrs[1].read(8, 3 * SIZE), "little") == 99
if os.path.isdir("/sys/class/infiniband"):
    print("sysfs:", sorted(os.listdir("/sys/class/infiniband")),
          open(f"/sys/class/infiniband/{dev}/ports/1/pkeys/0").read().strip())
print("OK", dev)
