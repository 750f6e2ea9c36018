"""rdma_cm by GID (AF_IB) on InfiniBand, written against rdma-core's pyverbs API
(AddrInfo with RAI_FAMILY | RAI_NUMERICHOST and the hints' family AF_IB).

    cm_ib_pingpong.py server|client GID PORT rc|ud|route|nolisten [N] [TIMEOUT_MS]

rc: an RC connection (private data both ways), N messages of SIZE bytes
each way checked byte for byte, then the client disconnects; ud: SIDR for
a UD QP, N datagrams checked byte for byte, each answered through an
address handle made from the completion; route: the client only resolves
the address and the route, printing the event and its status; nolisten:
the client connects to a port nobody listens on and prints the event the
REJ gives.  Prints one line per step; exits 0 on success.
"""

import random
import sys

import pyverbs.enums as e
import pyverbs.librdmacm_enums as ce
from pyverbs.addr import AH
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, UDParam
from pyverbs.qp import QPCap, QPInitAttr

from cm_common import next_event, ud_accept

AF_IB = 27
role, gid, port, mode = sys.argv[1:5]
n = int(sys.argv[5]) if len(sys.argv) > 5 else 4
SIZE = 4000
HINTS = ce.RAI_FAMILY | ce.RAI_NUMERICHOST


def payload(i: int, back: bool) -> bytes:
    return random.Random(i * 2 + back).randbytes(SIZE)


def ps():
    return ce.RDMA_PS_UDP if mode == "ud" else ce.RDMA_PS_TCP


def rc(cmid, server):
    mr = cmid.reg_msgs(SIZE)
    for i in range(n):
        cmid.post_recv(mr)
        if not server:
            mr.write(payload(i, False), SIZE)
            cmid.post_send(mr)
            assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
        wc = cmid.get_recv_comp()
        assert wc.status == e.IBV_WC_SUCCESS and wc.byte_len == SIZE, (wc.status, wc.byte_len)
        got = mr.read(SIZE, 0)
        assert got == payload(i, not server), f"message {i} differs"
        if server:
            mr.write(payload(i, True), SIZE)
            cmid.post_send(mr)
            assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
    print("data ok", n, flush=True)


ch = CMEventChannel()
if role == "server":
    listen = CMID(creator=ch, port_space=ps())
    listen.bind_addr(AddrInfo(src=gid, src_service=port, port_space=ps(), flags=ce.RAI_PASSIVE | HINTS,
                              family=AF_IB))
    listen.listen()
    print("listening", flush=True)
    ev = next_event(ch, ce.RDMA_CM_EVENT_CONNECT_REQUEST)
    print("request", ev.private_data[:5], flush=True)
    cmid = CMID(creator=ev, listen_id=listen)
    ev.ack_cm_event()
    if mode == "ud":
        mr = ud_accept(cmid, n, SIZE, send_wr=n + 1)
        for i in range(n):
            wc = cmid.get_recv_comp()
            assert wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 40 + 1000, (wc.status, wc.byte_len)
            assert mr.read(1000, 40) == payload(i, False)[:1000], f"datagram {i} differs"
            ah = AH(cmid.pd, wc=wc, port_num=1, grh=mr.buf)
            mr.write(payload(i, True)[:1000], 1000, 0)
            cmid.post_ud_send(mr, ah, rqpn=wc.src_qp, length=1000)
            assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
        print("data ok", n, "from lid", wc.slid, flush=True)
        sys.exit(0)
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=n + 1, max_recv_wr=n + 1)))
    cmid.accept(ConnParam(private_data=b"welcome"))
    next_event(ch, ce.RDMA_CM_EVENT_ESTABLISHED).ack_cm_event()
    print("established", flush=True)
    rc(cmid, True)
    next_event(ch, ce.RDMA_CM_EVENT_DISCONNECTED).ack_cm_event()
    cmid.disconnect()
    print("disconnected", flush=True)
    cmid.close()
    listen.close()
    sys.exit(0)

cmid = CMID(creator=ch, port_space=ps())
cmid.resolve_addr(AddrInfo(dst=gid, dst_service=port, port_space=ps(), flags=HINTS, family=AF_IB))
next_event(ch, ce.RDMA_CM_EVENT_ADDR_RESOLVED).ack_cm_event()
print("address resolved", flush=True)
try:
    cmid.resolve_route(int(sys.argv[6]) if len(sys.argv) > 6 else 2000)
except Exception as ex:                          # noqa: BLE001 (what the call itself refused)
    print("resolve_route failed", getattr(ex, "error_code", ex), flush=True)
    sys.exit(0 if mode == "route" else 1)
ev = CMEvent(ch)
print(ev.event_str(), ev.status, flush=True)
if ev.event_type != ce.RDMA_CM_EVENT_ROUTE_RESOLVED or mode == "route":
    sys.exit(0 if mode == "route" else 1)
ev.ack_cm_event()
if mode == "ud":
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_send_wr=n + 1, max_recv_wr=n + 1)))
    cmid.connect(ConnParam(qp_num=cmid.qpn))
    ev = next_event(ch, ce.RDMA_CM_EVENT_ESTABLISHED)
    ud = UDParam(ev)
    a = ud.ah_attr
    print("sidr qkey", hex(ud.qkey), "dlid", a.dlid, "global", a.is_global, flush=True)
    ah = AH(cmid.pd, attr=a)
    mr = cmid.reg_msgs(SIZE + 40)
    for i in range(n):
        cmid.post_recv(mr)
        mr.write(payload(i, False)[:1000], 1000, 0)
        cmid.post_ud_send(mr, ah, rqpn=ud.qp_num, length=1000)
        assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
        wc = cmid.get_recv_comp()
        assert wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 40 + 1000, (wc.status, wc.byte_len)
        assert mr.read(1000, 40) == payload(i, True)[:1000], f"answer {i} differs"
    print("data ok", n, flush=True)
    sys.exit(0)
cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=n + 1, max_recv_wr=n + 1)))
cmid.connect(ConnParam(private_data=b"hello"))
if mode == "nolisten":
    ev = CMEvent(ch)
    print(ev.event_str(), ev.status, flush=True)
    sys.exit(0)
ev = next_event(ch, ce.RDMA_CM_EVENT_ESTABLISHED)
print("established", ev.private_data[:7], flush=True)
ev.ack_cm_event()
attr, _ = cmid.query_qp(e.IBV_QP_AV | e.IBV_QP_PATH_MTU)
print("qp dlid", attr.ah_attr.dlid, "global", attr.ah_attr.is_global, "mtu", attr.path_mtu, flush=True)
rc(cmid, False)
cmid.disconnect()
next_event(ch, ce.RDMA_CM_EVENT_DISCONNECTED).ack_cm_event()
print("disconnected", flush=True)
cmid.close()
