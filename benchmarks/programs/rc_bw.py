"""RDMA WRITE bandwidth between two processes (one per host), the sender
keeping ``depth`` WRITEs of SIZE bytes in flight for SECONDS.

    rc_bw.py server|client SECONDS SIZE MTU_ENUM

Each side prints its JSON address line and reads the peer's from stdin;
the client prints {"bytes":..., "seconds":..., "Bps":...}; the server
exits when its stdin closes."""

import json
import sys
import time

from softrdma.enums import IBV_QPT_RC, IBV_WR_RDMA_WRITE
from softrdma.verbs import addr, cq, device, mr, pd, qp, wr

role, seconds, size, mtu = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
depth = max(2, min(64, (16 << 20) // size))
ctx = device.Context(name="rxe0")
gid_index = next(i for i in range(8) if str(ctx.query_gid(1, i)).startswith("0000:0000:0000:0000:0000:ffff"))
p = pd.PD(ctx)
m = mr.MR(p, size, 15)
c = cq.CQ(ctx, 256)
q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(max_send_wr=128, max_recv_wr=4)))
print(json.dumps({"qpn": q.qp_num, "rkey": m.rkey, "addr": m.buf, "gid": ctx.query_gid(1, gid_index).raw.hex()}),
      flush=True)
peer = json.loads(sys.stdin.readline())
a = qp.QPAttr()
a.qp_access_flags, a.path_mtu, a.dest_qp_num = 15, mtu, peer["qpn"]
a.max_dest_rd_atomic = a.max_rd_atomic = 4
a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=addr.GID(bytes.fromhex(peer["gid"])), sgid_index=gid_index),
                        is_global=1)
q.to_rts(a)
if role == "server":
    sys.stdin.read()
    sys.exit(0)
w = wr.SendWR(0, IBV_WR_RDMA_WRITE, 1, sg=[wr.SGE(m.buf, size, m.lkey)])
w.set_wr_rdma(peer["rkey"], peer["addr"])
posted = done = 0
t0 = time.monotonic()
end = t0 + seconds
while True:
    now = time.monotonic()
    while posted - done < depth and now < end:
        q.post_send(w)
        posted += 1
    n, wcs = c.poll(32)
    for x in wcs:
        if x.status:
            sys.exit(f"completion error {x.status}")
    done += n
    if done == posted and now >= end:
        break
dt = time.monotonic() - t0
print(json.dumps({"bytes": done * size, "seconds": dt, "Bps": done * size / dt}), flush=True)
