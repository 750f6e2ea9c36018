"""Every request opcode softrdma's transports send, once each, between QPs
of one device, one operation at a time (each waited for), so that a
capture of it has a known packet sequence.

    capture_ops.py [DEVICE]

RC (path MTU 1024, A's send PSN just below the 24-bit wrap): A sends to B
the OPS below in order, then B sends one SEND to A.  UC (same MTU): C sends
UC_OPS to D.  UD over the device's IPv6 GID ::1 (IPv4 if it has none): E
sends one SEND and one SEND with immediate to F.  Prints one JSON line: the QP
numbers, PSNs and the GIDs used; the test derives the packets from OPS."""

import json
import os
import sys
import time

from softrdma.enums import (
    IBV_ACCESS_FLUSH_GLOBAL, IBV_FLUSH_GLOBAL, IBV_WR_ATOMIC_WRITE, IBV_WR_FLUSH, IBV_MTU_1024, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_WC_SUCCESS, IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV,
)
from softrdma.verbs import addr, cq, device, mr, pd, qp, wr

# (name, verbs opcode, bytes); the test file keeps its own copy of the expected packets
OPS = [("SEND", IBV_WR_SEND, 2500), ("SEND_WITH_IMM", IBV_WR_SEND_WITH_IMM, 1500), ("SEND", IBV_WR_SEND, 10),
       ("SEND_WITH_IMM", IBV_WR_SEND_WITH_IMM, 10), ("RDMA_WRITE", IBV_WR_RDMA_WRITE, 3000),
       ("RDMA_WRITE_WITH_IMM", IBV_WR_RDMA_WRITE_WITH_IMM, 1500), ("RDMA_WRITE", IBV_WR_RDMA_WRITE, 500),
       ("RDMA_WRITE_WITH_IMM", IBV_WR_RDMA_WRITE_WITH_IMM, 10), ("RDMA_READ", IBV_WR_RDMA_READ, 2500),
       ("RDMA_READ", IBV_WR_RDMA_READ, 100), ("FETCH_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD, 8),
       ("CMP_SWP", IBV_WR_ATOMIC_CMP_AND_SWP, 8), ("SEND_WITH_INV", IBV_WR_SEND_WITH_INV, 1500),
       ("SEND_WITH_INV", IBV_WR_SEND_WITH_INV, 10), ("ATOMIC_WRITE", IBV_WR_ATOMIC_WRITE, 8),
       ("FLUSH", IBV_WR_FLUSH, 64)]
UC_OPS = OPS[:8]                     # UC: no READ, atomics or SEND with invalidate
PSN_A, PSN_B, PSN_C, PSN_E = 0xFFFFFE, 0x123456, 0x00ABCD, 0x777777
QKEY = 0x11111111
ACC = 15 | IBV_ACCESS_FLUSH_GLOBAL

dev = sys.argv[1] if len(sys.argv) > 1 else "rxe0"
ctx = device.Context(name=dev)
gids = {}
for i in range(ctx.query_port(1).gid_tbl_len):
    raw = ctx.query_gid(1, i).raw
    if raw[:12] == bytes(10) + b"\xff\xff" and "v4" not in gids:
        gids["v4"] = i
    elif raw == bytes(15) + b"\x01" and "v6" not in gids:
        gids["v6"] = i
p = pd.PD(ctx)
mem = mr.MR(p, 1 << 20, ACC)
victims = [mr.MR(p, 4096, ACC) for _ in range(2)]
c = cq.CQ(ctx, 256)


def new_qp(kind):
    return qp.QP(p, qp.QPInitAttr(kind, scq=c, rcq=c, cap=qp.QPCap(max_send_wr=16, max_recv_wr=16)))


def connect(q, peer, sq_psn, rq_psn):
    a = qp.QPAttr()
    a.qp_access_flags, a.path_mtu, a.dest_qp_num = ACC, IBV_MTU_1024, peer.qp_num
    a.sq_psn, a.rq_psn = sq_psn, rq_psn
    a.max_dest_rd_atomic = a.max_rd_atomic = 1
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
    a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, gids["v4"]), sgid_index=gids["v4"]),
                            is_global=1)
    q.to_rts(a)


def wait(n):
    got = []
    end = time.monotonic() + 30
    while len(got) < n:
        if time.monotonic() > end:
            sys.exit(f"timed out with {len(got)} of {n} completions")
        got += c.poll(16)[1]
    for w in got:
        if w.status != IBV_WC_SUCCESS:
            sys.exit(f"completion error {w.status} on wr {w.wr_id}")
    return got


def recv(q, i, off):
    q.post_recv(wr.RecvWR(i, 1, [wr.SGE(mem.buf + off, 4096, mem.lkey)]))


def run(q, ops, base):
    """Post each op from ``q`` (data at mem[0:]) to ``base`` in mem, wait for it."""
    data = os.urandom(4096)
    mem.write(data, 4096)
    inv = iter(victims)
    for k, (name, op, size) in enumerate(ops):
        w = wr.SendWR(k, op, 1, sg=[wr.SGE(mem.buf, size, mem.lkey)])
        if op in (IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM):
            w.imm_data = 0x1000 + k
        if op in (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ):
            w.set_wr_rdma(mem.rkey, mem.buf + base)
        if op in (IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP):
            w.set_wr_atomic(mem.rkey, mem.buf + base, 1, 2)
        if op == IBV_WR_ATOMIC_WRITE:            # post_send carries its 8 bytes in compare_add
            w.set_wr_atomic(mem.rkey, mem.buf + base, 0x4847464544434241)
        if op == IBV_WR_FLUSH:                   # compare_add the length, swap type | level << 8
            w.set_wr_atomic(mem.rkey, mem.buf + base, size, IBV_FLUSH_GLOBAL)
        if op == IBV_WR_SEND_WITH_INV:
            w.set_inv_rkey(next(inv).rkey)
        q.post_send(w)
        consumes = op in (IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV, IBV_WR_RDMA_WRITE_WITH_IMM)
        wait(2 if consumes else 1)              # the send completion and the receive it consumed


qa, qb = new_qp(IBV_QPT_RC), new_qp(IBV_QPT_RC)
qc, qd = new_qp(IBV_QPT_UC), new_qp(IBV_QPT_UC)
connect(qa, qb, PSN_A, PSN_B)
connect(qb, qa, PSN_B, PSN_A)
connect(qc, qd, PSN_C, 0)
connect(qd, qc, 0, PSN_C)
for i in range(16):
    recv(qb, 100 + i, 0x10000)
    recv(qd, 200 + i, 0x30000)
recv(qa, 300, 0x50000)
run(qa, OPS, 0x60000)
mem.write(b"b" * 64, 64)
qb.post_send(wr.SendWR(400, IBV_WR_SEND, 1, sg=[wr.SGE(mem.buf, 64, mem.lkey)]))
wait(2)
run(qc, UC_OPS, 0x70000)
ud_gid = gids.get("v6", gids["v4"])
qe, qf = new_qp(IBV_QPT_UD), new_qp(IBV_QPT_UD)
for q, psn in ((qe, PSN_E), (qf, 0)):
    a = qp.QPAttr()
    a.qkey, a.sq_psn = QKEY, psn
    q.to_rts(a)
for i in range(2):
    qf.post_recv(wr.RecvWR(500 + i, 1, [wr.SGE(mem.buf + 0x80000 + 8192 * i, 4096, mem.lkey)]))
ah = addr.AH(p, addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, ud_gid), sgid_index=ud_gid),
                            is_global=1))
for k, op in enumerate((IBV_WR_SEND, IBV_WR_SEND_WITH_IMM)):
    w = wr.SendWR(600 + k, op, 1, sg=[wr.SGE(mem.buf, 200, mem.lkey)], imm_data=0x2000 + k)
    w.set_wr_ud(ah, qf.qp_num, QKEY)
    qe.post_send(w)
    wait(2)
ud = {"e": qe.qp_num, "f": qf.qp_num, "psn_e": PSN_E, "ipv6": "v6" in gids}
print(json.dumps({"a": qa.qp_num, "b": qb.qp_num, "c": qc.qp_num, "d": qd.qp_num, "psn_a": PSN_A, "psn_b": PSN_B,
                  "psn_c": PSN_C, "ud": ud, "ops": [(n, s) for n, _, s in OPS],
                  "uc_ops": [(n, s) for n, _, s in UC_OPS]}), flush=True)
