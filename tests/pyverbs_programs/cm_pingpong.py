"""An rdma_cm program written against rdma-core's pyverbs API only.

    cm_pingpong.py server|client ADDR PORT MODE [N]

MODE: sync (rdma_create_ep style, AddrInfo), async (event channel, RC),
ud (event channel, RDMA_PS_UDP: SIDR), reject (the server rejects with
private data), mcast (UD multicast join; ADDR is the group).  Prints one
line per step; exits 0 on success.
"""

import sys

from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, UDParam
from pyverbs.qp import QPCap, QPInitAttr
from pyverbs.addr import AH
import pyverbs.enums as e
import pyverbs.librdmacm_enums as ce
from cm_common import ud_accept

role, addr, port, mode = sys.argv[1:5]
n = int(sys.argv[5]) if len(sys.argv) > 5 else 3
SIZE = 64


def expect(ev, want):
    if ev.event_type != want:
        print(f"unexpected {ev.event_str()} (status {ev.status}), wanted {want}", flush=True)
        sys.exit(1)
    ev.ack_cm_event()


def qp_attr():
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=n + 1, max_recv_wr=n + 1))


def rc_traffic(cmid, server):
    mr = cmid.reg_msgs(SIZE)
    for i in range(n):
        if server:
            cmid.post_recv(mr)
            wc = cmid.get_recv_comp()
            assert wc.status == e.IBV_WC_SUCCESS, wc.status
            msg = mr.read(SIZE, 0)
            mr.write(msg.upper(), SIZE)
            cmid.post_send(mr)
            assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
        else:
            cmid.post_recv(mr)
            mr.write(f"ping {i}".ljust(SIZE).encode(), SIZE)
            cmid.post_send(mr)
            assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
            wc = cmid.get_recv_comp()
            assert wc.status == e.IBV_WC_SUCCESS
            got = mr.read(SIZE, 0).decode().strip()
            assert got == f"PING {i}", got
            print("pong", got, flush=True)


if mode == "sync":
    if role == "server":
        ai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
        listen = CMID(creator=ai, qp_init_attr=qp_attr())
        listen.listen()
        print("listening", flush=True)
        cmid = listen.get_request()
        cmid.accept()
        print("established", flush=True)
        rc_traffic(cmid, True)
        cmid.close()
        listen.close()
    else:
        ai = AddrInfo(dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)
        cmid = CMID(creator=ai, qp_init_attr=qp_attr())
        cmid.connect()
        print("established", flush=True)
        rc_traffic(cmid, False)
        cmid.disconnect()
        cmid.close()
    print("done", flush=True)
    sys.exit(0)

ch = CMEventChannel()
ps = ce.RDMA_PS_UDP if mode in ("ud", "mcast") else ce.RDMA_PS_TCP
if role == "server" and mode != "mcast":
    listen = CMID(creator=ch, port_space=ps)
    listen.bind_addr(AddrInfo(src=addr, src_service=port, port_space=ps, flags=ce.RAI_PASSIVE))
    listen.listen()
    print("listening", flush=True)
    ev = CMEvent(ch)
    if ev.event_type != ce.RDMA_CM_EVENT_CONNECT_REQUEST:
        print("unexpected", ev.event_str())
        sys.exit(1)
    print("request private data", ev.private_data[:5], flush=True)
    cmid = CMID(creator=ev, listen_id=listen)
    ev.ack_cm_event()
    if mode == "reject":
        cmid.reject(b"go away")
        print("rejected", flush=True)
        cmid.close()
        listen.close()
        sys.exit(0)
    if mode == "ud":
        mr = ud_accept(cmid, n, SIZE)
        for _ in range(n):
            wc = cmid.get_recv_comp()
            assert wc.status == e.IBV_WC_SUCCESS
            print("got", mr.read(5, 40), flush=True)
            cmid.post_recv(mr)
        sys.exit(0)
    cmid.create_qp(qp_attr())
    cmid.accept(ConnParam(private_data=b"welcome"))
    expect(CMEvent(ch), ce.RDMA_CM_EVENT_ESTABLISHED)
    print("established", flush=True)
    rc_traffic(cmid, True)
    expect(CMEvent(ch), ce.RDMA_CM_EVENT_DISCONNECTED)
    cmid.disconnect()
    print("disconnected", flush=True)
    cmid.close()
    listen.close()
    sys.exit(0)

cmid = CMID(creator=ch, port_space=ps)
if mode == "mcast":
    cmid.bind_addr(AddrInfo(src=sys.argv[6] if len(sys.argv) > 6 else None, src_service="0",
                            port_space=ps, flags=ce.RAI_PASSIVE))
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_send_wr=2, max_recv_wr=2)))
    cmid.join_multicast(addr=addr)
    ev = CMEvent(ch)
    if ev.event_type != ce.RDMA_CM_EVENT_MULTICAST_JOIN:
        print("unexpected", ev.event_str())
        sys.exit(1)
    ud = UDParam(ev)
    print("joined", ud.qp_num == 0xFFFFFF, hex(ud.qkey), flush=True)
    cmid.leave_multicast(addr=addr)
    cmid.close()
    sys.exit(0)
cmid.resolve_addr(AddrInfo(dst=addr, dst_service=port, port_space=ps))
expect(CMEvent(ch), ce.RDMA_CM_EVENT_ADDR_RESOLVED)
cmid.resolve_route()
expect(CMEvent(ch), ce.RDMA_CM_EVENT_ROUTE_RESOLVED)
if mode == "ud":
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_send_wr=n + 1, max_recv_wr=2)))
    cmid.connect(ConnParam(qp_num=cmid.qpn))
    ev = CMEvent(ch)
    if ev.event_type != ce.RDMA_CM_EVENT_ESTABLISHED:
        print("unexpected", ev.event_str(), ev.status)
        sys.exit(1)
    ud = UDParam(ev)
    print("resolved qkey", hex(ud.qkey), flush=True)
    ah = AH(cmid.pd, attr=ud.ah_attr)
    mr = cmid.reg_msgs(SIZE)
    for i in range(n):
        mr.write(f"dg {i}".ljust(5).encode(), 5)
        cmid.post_ud_send(mr, ah, rqpn=ud.qp_num)
        assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
    print("sent", flush=True)
    sys.exit(0)
cmid.create_qp(qp_attr())
cmid.connect(ConnParam(private_data=b"hello"))
ev = CMEvent(ch)
if mode == "reject":
    print(ev.event_str(), ev.status, ev.private_data[:7], flush=True)
    sys.exit(0 if ev.event_type == ce.RDMA_CM_EVENT_REJECTED else 1)
if ev.event_type != ce.RDMA_CM_EVENT_ESTABLISHED:
    print("unexpected", ev.event_str(), ev.status, flush=True)
    sys.exit(1)
print("established", ev.private_data[:7], flush=True)
ev.ack_cm_event()
rc_traffic(cmid, False)
cmid.disconnect()
expect(CMEvent(ch), ce.RDMA_CM_EVENT_DISCONNECTED)
print("disconnected", flush=True)
cmid.close()
