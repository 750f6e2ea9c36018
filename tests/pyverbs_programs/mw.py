"""An ordinary pyverbs program using memory windows the way rdma-core's
tests/test_mr.py MWTest does: type 1 bound with QP.bind_mw and invalidated
by a zero-length rebind, type 2 bound with a SendWR(IBV_WR_BIND_MW) and
invalidated by IBV_WR_LOCAL_INV; RDMA WRITEs through each window succeed
while it is bound and fail with a remote access error after.  It imports
``pyverbs``, not softrdma."""

import sys

import pyverbs.enums as e
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE, SendWR

import rc_loopback                       # (beside this program)

SIZE = 4096
ctx, gid_index, gid = rc_loopback.open_first_device()
pd = PD(ctx)
QP_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
server_mr = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND)
client_mr = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)


def pair():
    return rc_loopback.pair(ctx, pd, gid_index, gid, QP_ACCESS)


def write(qp, cq, rkey):
    w = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(client_mr.buf, 64, client_mr.lkey)])
    w.set_wr_rdma(rkey=rkey, addr=server_mr.buf)
    qp.post_send(w)
    return rc_loopback.status(cq)


def check(got, want, what):
    if got != want:
        sys.exit(f"{what}: status {got}, expected {want}")


info = MWBindInfo(server_mr, server_mr.buf, SIZE, e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_LOCAL_WRITE)
# type 1
(client, server), (ccq, scq) = pair()
mw1 = MW(pd, e.IBV_MW_TYPE_1)
server.bind_mw(mw1, MWBind(info, e.IBV_SEND_SIGNALED))
check(rc_loopback.status(scq), e.IBV_WC_SUCCESS, "type 1 bind")
client_mr.write(b"W" * 64, 64)
check(write(client, ccq, mw1.rkey), e.IBV_WC_SUCCESS, "write through the type 1 window")
assert server_mr.read(64, 0) == b"W" * 64
server.bind_mw(mw1, MWBind(MWBindInfo(server_mr, server_mr.buf, 0, 0), e.IBV_SEND_SIGNALED))
check(rc_loopback.status(scq), e.IBV_WC_SUCCESS, "zero-length rebind")
check(write(client, ccq, mw1.rkey), e.IBV_WC_REM_ACCESS_ERR, "write after the rebind")
# type 2
(client, server), (ccq, scq) = pair()
mw2 = MW(pd, e.IBV_MW_TYPE_2)
bind = SendWR(opcode=e.IBV_WR_BIND_MW)
bind.set_bind_wr(mw2, info)
server.post_send(bind)
check(rc_loopback.status(scq), e.IBV_WC_SUCCESS, "type 2 bind")
check(write(client, ccq, bind.rkey), e.IBV_WC_SUCCESS, "write through the type 2 window")
inv = SendWR(opcode=e.IBV_WR_LOCAL_INV)
inv.imm_data = bind.rkey
server.post_send(inv)
check(rc_loopback.status(scq), e.IBV_WC_SUCCESS, "local invalidate")
(client, server), (ccq, scq) = pair()
check(write(client, ccq, bind.rkey), e.IBV_WC_REM_ACCESS_ERR, "write after the invalidation")
try:
    MW(pd, 3)
    sys.exit("a memory window of type 3 was created")
except PyverbsRDMAError:
    pass
mw1.close()
mw2.close()
print("OK mw")
