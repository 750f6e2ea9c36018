"""Move N MiB over one RC QP to a peer process, byte-exact.

    rc_xfer.py server|client MIB [QP_TIMEOUT]

Each side prints its JSON address line, reads the peer's from stdin.  The
client RDMA-WRITEs 8 MiB batches of seeded random data into the server's
MR, then SENDs the batch's SHA-256; the server hashes what landed (the SEND
is ordered after the WRITEs), and answers with a SEND ("ok"/"bad"), which
also tells the client the region is free again.  Both print a summary.

The client keeps its QP until its stdin closes: the ACK of the server's
last SEND may be lost, and the server's retransmission needs a live QP to
be acknowledged (else it ends in IBV_WC_RETRY_EXC_ERR, as on real RC)."""

import hashlib
import json
import random
import sys
import time

from softrdma.enums import IBV_MTU_1024, IBV_QPT_RC, IBV_WC_SUCCESS, IBV_WR_RDMA_WRITE, IBV_WR_SEND
from softrdma.verbs import addr, cq, device, mr, pd, qp, wr

role, total_mib = sys.argv[1], int(sys.argv[2])
qp_timeout = int(sys.argv[3]) if len(sys.argv) > 3 else 14
BATCH = 8 << 20
ACC = 15
ctx = device.Context(name="rxe0")
gid_index = next(i for i in range(8) if str(ctx.query_gid(1, i)).startswith("0000:0000:0000:0000:0000:ffff"))
p = pd.PD(ctx)
data_mr = mr.MR(p, BATCH, ACC)
msg_mr = mr.MR(p, 4096, ACC)
c = cq.CQ(ctx, 512)
q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(max_send_wr=64, max_recv_wr=16), sq_sig_all=0))
print(json.dumps({"qpn": q.qp_num, "rkey": data_mr.rkey, "addr": data_mr.buf,
                  "gid": ctx.query_gid(1, gid_index).raw.hex()}), flush=True)
peer = json.loads(sys.stdin.readline())
a = qp.QPAttr()
a.qp_access_flags, a.path_mtu, a.dest_qp_num = ACC, IBV_MTU_1024, peer["qpn"]
a.max_dest_rd_atomic = a.max_rd_atomic = 4
a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, qp_timeout, 7, 7
a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=addr.GID(bytes.fromhex(peer["gid"])), sgid_index=gid_index),
                        is_global=1)
q.to_rts(a)


def wait(n):
    got = []
    end = time.monotonic() + 300
    while len(got) < n:
        if time.monotonic() > end:
            sys.exit("timed out")
        got += c.poll(32)[1]
    for w in got:
        if w.status != IBV_WC_SUCCESS:
            sys.exit(f"{role}: completion error {w.status} on wr {w.wr_id}")
    return got


def post_recv(i):
    q.post_recv(wr.RecvWR(i, 1, [wr.SGE(msg_mr.buf + 2048, 64, msg_mr.lkey)]))


batches = total_mib * (1 << 20) // BATCH
t0 = time.monotonic()
post_recv(0)
if role == "server":
    bad = 0
    for b in range(batches):
        wait(1)                                              # the client's digest
        digest = msg_mr.read(32, 2048)
        ok = hashlib.sha256(data_mr.read(BATCH)).digest() == digest
        bad += not ok
        post_recv(b + 1)
        msg_mr.write(b"ok" if ok else b"no", 2)
        q.post_send(wr.SendWR(b, IBV_WR_SEND, 1, sg=[wr.SGE(msg_mr.buf, 2, msg_mr.lkey)]))
        wait(1)
    print(json.dumps({"batches": batches, "bad": bad}), flush=True)
    sys.stdin.read()
else:
    rng = random.Random(1)
    for b in range(batches):
        block = rng.randbytes(BATCH)
        data_mr.write(block, BATCH)
        for i in range(BATCH >> 20):
            w = wr.SendWR(i, IBV_WR_RDMA_WRITE, 1, sg=[wr.SGE(data_mr.buf + (i << 20), 1 << 20, data_mr.lkey)],
                          send_flags=0)
            w.set_wr_rdma(peer["rkey"], peer["addr"] + (i << 20))
            q.post_send(w)
        msg_mr.write(hashlib.sha256(block).digest(), 32)
        q.post_send(wr.SendWR(1000 + b, IBV_WR_SEND, 1, sg=[wr.SGE(msg_mr.buf, 32, msg_mr.lkey)]))
        got = wait(2)                                        # our SEND's completion and the server's answer
        if msg_mr.read(2, 2048) != b"ok":
            sys.exit(f"batch {b}: server saw different bytes")
        post_recv(b + 1)
    dt = time.monotonic() - t0
    print(json.dumps({"batches": batches, "seconds": dt, "MBps": batches * BATCH / dt / 1e6}), flush=True)
    sys.stdin.read()
