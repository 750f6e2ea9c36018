"""UD multicast between hosts: receivers attached to a group, one sender.

    ud_mcast.py recv GROUP NQPS     NQPS UD QPs attach to ::ffff:GROUP, print
                                    {"ready": true}, then wait for 3 messages
                                    on each and print what arrived
    ud_mcast.py send GROUP N        one UD QP sends N messages to the group
                                    (dest QPN 0xFFFFFF) and prints its QPN

Receive buffers start with the 40-byte network header (rxe's layout: an
IPv4 header in the last 20 bytes), so the receiver also reports the source
and destination addresses the packets carried."""

import json
import socket
import sys
import time

from softrdma.enums import IBV_QPT_UD, IBV_WC_SUCCESS, IBV_WR_SEND
from softrdma.verbs import addr, cq, device, mr, pd, qp, wr

QKEY = 0x11111111
role, group, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = device.Context(name="rxe0")
gid_index = next(i for i in range(8) if str(ctx.query_gid(1, i)).startswith("0000:0000:0000:0000:0000:ffff"))
mgid = addr.GID(bytes(10) + b"\xff\xff" + socket.inet_aton(group))
p = pd.PD(ctx)
m = mr.MR(p, 1 << 16, 1)


def ud_qp():
    c = cq.CQ(ctx, 64)
    a = qp.QPAttr()
    a.qkey = QKEY
    return qp.QP(p, qp.QPInitAttr(IBV_QPT_UD, scq=c, rcq=c, cap=qp.QPCap(16, 16)), a), c


def poll(c, k, timeout=20.0):
    got, end = [], time.monotonic() + timeout
    while len(got) < k and time.monotonic() < end:
        got += c.poll(16)[1]
    return got


if role == "recv":
    qps = [ud_qp() for _ in range(n)]
    for i, (q, _) in enumerate(qps):
        for j in range(3):
            slot = (i * 3 + j) * 1024
            q.post_recv(wr.RecvWR(slot, 1, [wr.SGE(m.buf + slot, 1024, m.lkey)]))
        q.attach_mcast(mgid)
    print(json.dumps({"ready": True}), flush=True)
    got, src_qp, grh = [], [], None
    for q, c in qps:
        wcs = poll(c, 3)
        assert all(w.status == IBV_WC_SUCCESS for w in wcs), wcs
        got.append([m.read(w.byte_len - 40, w.wr_id + 40).decode() for w in wcs])
        src_qp += sorted({w.src_qp for w in wcs})
        grh = m.read(40, wcs[0].wr_id) if wcs else grh
    print(json.dumps({"got": got, "src_qp": src_qp,
                      "grh_src": socket.inet_ntoa(grh[32:36]) if grh else None,
                      "grh_dst": socket.inet_ntoa(grh[36:40]) if grh else None}), flush=True)
else:
    q, c = ud_qp()
    ah = addr.AH(p, addr.AHAttr(gr=addr.GlobalRoute(dgid=mgid, sgid_index=gid_index), is_global=1))
    for i in range(n):
        data = f"msg {i}".encode()
        m.write(data, len(data), 4096)
        w = wr.SendWR(i, IBV_WR_SEND, 1, sg=[wr.SGE(m.buf + 4096, len(data), m.lkey)])
        w.set_wr_ud(ah, 0xFFFFFF, QKEY)
        q.post_send(w)
        assert [x.status for x in poll(c, 1)] == [IBV_WC_SUCCESS]
        time.sleep(0.01)
    print(json.dumps({"qpn": q.qp_num}), flush=True)
