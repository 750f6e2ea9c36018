"""An ordinary pyverbs program in the style of rdma-core's tests
(tests/test_qpex.py and tests/test_cqex.py with the helpers of
tests/base.py and tests/utils.py): client and server resources, each with
an extended CQ and an extended QP created for one opcode, then ping-pong
traffic posted with the ibv_wr_* API and polled with
start_poll/poll_next/end_poll, data checked byte for byte; rc_bind_mw
binds type 2 memory windows with wr_bind_mw and WRITEs through them, as
test_qp_ex_rc_bind_mw does (plus the window that works).  It imports
``pyverbs``, not softrdma; a case whose resources the device refuses with
EOPNOTSUPP is skipped, as rdma-core's tests skip it."""

import errno
import random
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.base import inc_rkey
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR, MW, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QPAttr, QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import SGE, RecvWR

GRH_SIZE = 40
IMM_DATA = 1234
UD_QKEY = 0x11111111
ITERS = 10
POLL_TIMEOUT = 10


class Skip(Exception):
    pass


class Resources:
    """rdma-core's TrafficResources: one context, PD, MR, CQEX and QPEx."""

    def __init__(self, dev_name, ib_port, gid_index, qp_type, send_op, mr_access=0):
        self.ctx = Context(name=dev_name)
        self.ib_port, self.gid_index, self.qp_type = ib_port, gid_index, qp_type
        self.msg_size = 8 if send_op in (e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
                                         e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) else 1024
        self.num_msgs = 100
        self.pd = PD(self.ctx)
        extra = GRH_SIZE if qp_type == e.IBV_QPT_UD else 0
        self.mr = MR(self.pd, self.msg_size + extra, e.IBV_ACCESS_LOCAL_WRITE | mr_access)
        self.cq = CQEX(self.ctx, CqInitAttrEx(cqe=2000, wc_flags=e.IBV_WC_STANDARD_FLAGS))
        cap = QPCap(max_send_wr=self.num_msgs, max_recv_wr=self.num_msgs, max_recv_sge=1, max_send_sge=1)
        qia = QPInitAttrEx(cap=cap, qp_type=qp_type, scq=self.cq, rcq=self.cq, pd=self.pd, send_ops_flags=send_op,
                           comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
        qp_attr = QPAttr(port_num=ib_port)
        if qp_type == e.IBV_QPT_UD:
            qp_attr.qkey = UD_QKEY
            qp_attr.pkey_index = 0
        else:
            qp_attr.qp_access_flags = (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                                       | e.IBV_ACCESS_REMOTE_ATOMIC)
        try:
            self.qp = QPEx(self.ctx, qia, qp_attr)
        except PyverbsRDMAError as ex:
            if ex.error_code == errno.EOPNOTSUPP:
                raise Skip("Extended QP is not supported on this device") from None
            raise
        self.psn = random.getrandbits(24)
        self.rkey = self.raddr = None

    def pre_run(self, rpsn, rqpn):
        self.rqpn = rqpn
        if self.qp_type == e.IBV_QPT_UD:
            return                                    # UD went to RTS at creation
        gr = GlobalRoute(dgid=self.ctx.query_gid(self.ib_port, self.gid_index), sgid_index=self.gid_index)
        attr = QPAttr(port_num=self.ib_port)
        attr.ah_attr = AHAttr(port_num=self.ib_port, is_global=1, gr=gr, dlid=0)
        attr.dest_qp_num = rqpn
        attr.path_mtu = e.IBV_MTU_1024
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.rq_psn, attr.sq_psn = rpsn, self.psn
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        self.qp.to_rts(attr)


def post_send_ex(res, sge, send_op, ah=None):
    qp = res.qp
    qp.wr_start()
    qp.wr_id = 0x123
    qp.wr_flags = e.IBV_SEND_SIGNALED
    if send_op == e.IBV_QP_EX_WITH_SEND:
        qp.wr_send()
    elif send_op == e.IBV_QP_EX_WITH_SEND_WITH_IMM:
        qp.wr_send_imm(IMM_DATA)
    elif send_op == e.IBV_QP_EX_WITH_RDMA_WRITE:
        qp.wr_rdma_write(res.rkey, res.raddr)
    elif send_op == e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM:
        qp.wr_rdma_write_imm(res.rkey, res.raddr, IMM_DATA)
    elif send_op == e.IBV_QP_EX_WITH_RDMA_READ:
        qp.wr_rdma_read(res.rkey, res.raddr)
    elif send_op == e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP:
        qp.wr_atomic_cmp_swp(res.rkey, res.raddr, res.compare, res.swap)
    elif send_op == e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD:
        qp.wr_atomic_fetch_add(res.rkey, res.raddr, 1)
    if res.qp_type == e.IBV_QPT_UD:
        qp.wr_set_ud_addr(ah, res.rqpn, UD_QKEY)
    qp.wr_set_sge(sge)
    qp.wr_complete()


def poll_cq_ex(cqex, count=1, data=None):
    poll_attr = PollCqAttr()
    end = time.monotonic() + POLL_TIMEOUT
    ret = cqex.start_poll(poll_attr)
    while ret == errno.ENOENT and time.monotonic() < end:
        ret = cqex.start_poll(poll_attr)
    if ret != 0:
        raise PyverbsRDMAError("Failed to poll CQ", ret)
    try:
        while True:
            if cqex.status != e.IBV_WC_SUCCESS:
                raise PyverbsRDMAError(f"Completion status is {cqex.status}", cqex.status)
            if data:
                assert cqex.read_wc_flags() & e.IBV_WC_WITH_IMM
                assert socket.ntohl(cqex.read_imm_data()) == data
            count -= 1
            if count == 0:
                break
            ret = cqex.poll_next()
            while ret == errno.ENOENT and time.monotonic() < end:
                ret = cqex.poll_next()
            if ret != 0:
                raise PyverbsRDMAError("Failed to poll CQ", ret)
    finally:
        cqex.end_poll()


def validate(received, expected_char, size):
    if received[:size] != expected_char * size:
        raise PyverbsError(f"Data validation failure: expected {expected_char * size!r}, received {received!r}")


def send_elements(res, char):
    offset = GRH_SIZE if res.qp_type == e.IBV_QPT_UD else 0
    res.mr.write(char * (res.msg_size + offset), res.msg_size + offset)
    return SGE(res.mr.buf + offset, res.msg_size, res.mr.lkey)


def recv_wr(res):
    length = res.msg_size + (GRH_SIZE if res.qp_type == e.IBV_QPT_UD else 0)
    return RecvWR(sg=[SGE(res.mr.buf, length, res.mr.lkey)], num_sge=1)


def global_ah(res):
    gr = GlobalRoute(dgid=res.ctx.query_gid(res.ib_port, res.gid_index), sgid_index=res.gid_index)
    return AH(res.pd, attr=AHAttr(port_num=res.ib_port, is_global=1, gr=gr, dlid=0))


def traffic(client, server, send_op):
    """utils.traffic(new_send=True, is_cq_ex=True): SEND ping-pong."""
    ud = client.qp_type == e.IBV_QPT_UD
    ah_client, ah_server = (global_ah(client), global_ah(server)) if ud else (None, None)
    imm = IMM_DATA if send_op in (e.IBV_QP_EX_WITH_SEND_WITH_IMM, e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) else None
    read_offset = GRH_SIZE if ud else 0
    client.qp.post_recv(recv_wr(client))
    server.qp.post_recv(recv_wr(server))
    for _ in range(ITERS):
        post_send_ex(client, send_elements(client, b"c"), send_op, ah_client)
        poll_cq_ex(client.cq)
        poll_cq_ex(server.cq, data=imm)
        server.qp.post_recv(recv_wr(server))
        validate(server.mr.read(server.msg_size, read_offset), b"c", server.msg_size)
        post_send_ex(server, send_elements(server, b"s"), send_op, ah_server)
        poll_cq_ex(server.cq)
        poll_cq_ex(client.cq, data=imm)
        client.qp.post_recv(recv_wr(client))
        validate(client.mr.read(client.msg_size, read_offset), b"s", client.msg_size)


def rdma_traffic(client, server, send_op):
    """utils.rdma_traffic(new_send=True): WRITE lands remotely, READ locally."""
    read = send_op == e.IBV_QP_EX_WITH_RDMA_READ
    for _ in range(ITERS):
        if read:
            server.mr.write(b"s" * server.msg_size, server.msg_size)
        post_send_ex(client, send_elements(client, b"c"), send_op)
        poll_cq_ex(client.cq)
        validate((client if read else server).mr.read(client.msg_size, 0), b"s" if read else b"c",
                 client.msg_size)
        if read:
            client.mr.write(b"c" * client.msg_size, client.msg_size)
        post_send_ex(server, send_elements(server, b"s"), send_op)
        poll_cq_ex(server.cq)
        validate((server if read else client).mr.read(server.msg_size, 0), b"c" if read else b"s",
                 server.msg_size)


def atomic_traffic(client, server, send_op):
    """The remote 64-bit word counts up; each atomic returns its old value."""
    server.mr.write((0).to_bytes(8, "little"), 8)
    for i in range(ITERS):
        client.compare, client.swap = i, i + 1
        post_send_ex(client, SGE(client.mr.buf, 8, client.mr.lkey), send_op)
        poll_cq_ex(client.cq)
        old = int.from_bytes(client.mr.read(8, 0), "little")
        now = int.from_bytes(server.mr.read(8, 0), "little")
        if (old, now) != (i, i + 1):
            raise PyverbsError(f"atomic {i}: returned {old}, remote now {now}")


def bind_mw(res, mw, rkey, bind_info):
    """One signaled wr_bind_mw, completed."""
    qp = res.qp
    qp.wr_start()
    qp.wr_id = 0x123
    qp.wr_flags = e.IBV_SEND_SIGNALED
    qp.wr_bind_mw(mw, rkey, bind_info)
    qp.wr_complete()
    poll_cq_ex(res.cq)


def bind_mw_traffic(client, server, send_op):
    """Each side binds a type 2 window with remote write over its whole MR
    and the other side's WRITEs go through the window's new rkey
    (rdma_traffic); then, as rdma-core's test_qp_ex_rc_bind_mw, the server
    binds a window without remote write and the client's WRITE through it
    fails with a remote access error."""
    for res, peer in ((client, server), (server, client)):
        mw = MW(res.pd, mw_type=e.IBV_MW_TYPE_2)
        new_key = inc_rkey(mw.rkey)
        bind_mw(res, mw, new_key, MWBindInfo(res.mr, res.mr.buf, res.mr.length, e.IBV_ACCESS_REMOTE_WRITE))
        peer.rkey = new_key
    rdma_traffic(client, server, e.IBV_QP_EX_WITH_RDMA_WRITE)
    mw = MW(server.pd, mw_type=e.IBV_MW_TYPE_2)
    new_key = inc_rkey(mw.rkey)
    bind_mw(server, mw, new_key, MWBindInfo(server.mr, server.mr.buf, server.mr.length, e.IBV_ACCESS_LOCAL_WRITE))
    client.rkey = new_key
    try:
        post_send_ex(client, send_elements(client, b"x"), e.IBV_QP_EX_WITH_RDMA_WRITE)
        poll_cq_ex(client.cq)
    except PyverbsRDMAError as ex:
        if ex.error_code != e.IBV_WC_REM_ACCESS_ERR:
            raise
    else:
        raise PyverbsError("a WRITE through a window without remote write succeeded")
    validate(server.mr.read(server.msg_size, 0), b"s", server.msg_size)     # what it held: no "x" landed


CASES = [
    ("rc_send", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_SEND, 0, traffic),
    ("rc_send_imm", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_SEND_WITH_IMM, 0, traffic),
    ("rc_write", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_RDMA_WRITE, e.IBV_ACCESS_REMOTE_WRITE, rdma_traffic),
    ("rc_write_imm", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, e.IBV_ACCESS_REMOTE_WRITE, traffic),
    ("rc_read", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_RDMA_READ, e.IBV_ACCESS_REMOTE_READ, rdma_traffic),
    ("rc_cmp_swp", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, e.IBV_ACCESS_REMOTE_ATOMIC, atomic_traffic),
    ("rc_fetch_add", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, e.IBV_ACCESS_REMOTE_ATOMIC,
     atomic_traffic),
    ("ud_send", e.IBV_QPT_UD, e.IBV_QP_EX_WITH_SEND, 0, traffic),
    ("ud_send_imm", e.IBV_QPT_UD, e.IBV_QP_EX_WITH_SEND_WITH_IMM, 0, traffic),
    ("rc_bind_mw", e.IBV_QPT_RC, e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_BIND_MW,
     e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_MW_BIND, bind_mw_traffic),
]


def main():
    dev = get_device_list()[0].name.decode()
    with Context(name=dev) as ctx:
        gid_index = next(i for i in range(ctx.query_port(1).gid_tbl_len)
                         if ctx.query_gid(1, i).gid.startswith("0000:0000:0000:0000:0000:ffff"))
    passed, skipped = [], []
    for name, qp_type, send_op, access, flow in CASES:
        try:
            client = Resources(dev, 1, gid_index, qp_type, send_op, access)
            server = Resources(dev, 1, gid_index, qp_type, send_op, access)
        except Skip:
            skipped.append(name)
            continue
        client.pre_run(server.psn, server.qp.qp_num)
        server.pre_run(client.psn, client.qp.qp_num)
        client.rkey, client.raddr = server.mr.rkey, server.mr.buf
        server.rkey, server.raddr = client.mr.rkey, client.mr.buf
        flow(client, server, send_op)
        for res in (client, server):
            res.ctx.close()
        passed.append(name)
    print("OK", " ".join(passed), "skipped:", " ".join(skipped))


if __name__ == "__main__":
    sys.exit(main())
