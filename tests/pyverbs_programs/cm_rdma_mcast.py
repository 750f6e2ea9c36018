"""rdma_cm's RDMA helpers and multicast, with rdma-core's pyverbs API only.

    cm_rdma_mcast.py rdma server|client ADDR PORT
    cm_rdma_mcast.py mcast receiver|sender GROUP LOCAL_ADDR

rdma: the server accepts with its buffer's address and rkey as private
data; the client RDMA READs it (post_read), RDMA WRITEs its own text
(post_write) and disconnects; the server then checks what was written.
mcast: both join GROUP (RDMA_PS_UDP); the sender sends one datagram to the
group with the address the join event gave; the receiver prints it.
"""

import struct
import sys

import pyverbs.enums as e
import pyverbs.librdmacm_enums as ce
from pyverbs.addr import AH
from pyverbs.cmid import CMID, AddrInfo, CMEventChannel, ConnParam, UDParam
from pyverbs.mr import MR
from pyverbs.qp import QPCap, QPInitAttr

from cm_common import next_event

what, role = sys.argv[1], sys.argv[2]


ch = CMEventChannel()
if what == "rdma":
    addr, port = sys.argv[3], sys.argv[4]
    rc = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4))
    if role == "server":
        listen = CMID(creator=ch)
        listen.bind_addr(AddrInfo(src=addr, src_service=port, flags=ce.RAI_PASSIVE))
        listen.listen()
        print("listening", flush=True)
        ev = next_event(ch, ce.RDMA_CM_EVENT_CONNECT_REQUEST)
        cmid = CMID(creator=ev, listen_id=listen)
        cmid.create_qp(rc)
        mr = MR(cmid.pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE)
        mr.write(b"server data".ljust(64, b"."), 64)
        cmid.accept(ConnParam(private_data=struct.pack(">QI", mr.buf, mr.rkey)))
        next_event(ch, ce.RDMA_CM_EVENT_ESTABLISHED)
        next_event(ch, ce.RDMA_CM_EVENT_DISCONNECTED)
        cmid.disconnect()
        print("buffer:", mr.read(12, 0), flush=True)
    else:
        cmid = CMID(creator=ch)
        cmid.resolve_addr(AddrInfo(dst=addr, dst_service=port))
        next_event(ch, ce.RDMA_CM_EVENT_ADDR_RESOLVED)
        cmid.resolve_route()
        next_event(ch, ce.RDMA_CM_EVENT_ROUTE_RESOLVED)
        cmid.create_qp(rc)
        cmid.connect(ConnParam(resources=1, depth=1))
        ev = next_event(ch, ce.RDMA_CM_EVENT_ESTABLISHED)
        raddr, rkey = struct.unpack_from(">QI", ev.private_data)
        mr = cmid.reg_write(64)
        cmid.post_read(mr, 11, raddr, rkey, e.IBV_SEND_SIGNALED)
        assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
        print("read:", mr.read(11, 0), flush=True)
        mr.write(b"client wrote", 12)
        cmid.post_write(mr, 12, raddr, rkey, e.IBV_SEND_SIGNALED)
        assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
        cmid.disconnect()
        next_event(ch, ce.RDMA_CM_EVENT_DISCONNECTED)
    sys.exit(0)

group, local = sys.argv[3], sys.argv[4]
cmid = CMID(creator=ch, port_space=ce.RDMA_PS_UDP)
cmid.bind_addr(AddrInfo(src=local, src_service="0", port_space=ce.RDMA_PS_UDP, flags=ce.RAI_PASSIVE))
cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_send_wr=2, max_recv_wr=2)))
cmid.join_multicast(addr=AddrInfo(src=group))
ud = UDParam(next_event(ch, ce.RDMA_CM_EVENT_MULTICAST_JOIN))
mr = cmid.reg_msgs(40 + 64)
if role == "receiver":
    cmid.post_recv(mr)
    print("ready", flush=True)
    wc = cmid.get_recv_comp()
    assert wc.status == e.IBV_WC_SUCCESS, wc.status
    print("got:", mr.read(10, 40), flush=True)
else:
    ah = AH(cmid.pd, attr=ud.ah_attr)
    mr.write(b"to a group", 10)
    cmid.post_ud_send(mr, ah, rqpn=ud.qp_num, length=10)
    assert cmid.get_send_comp().status == e.IBV_WC_SUCCESS
    print("sent", flush=True)
cmid.leave_multicast(addr=AddrInfo(src=group))
cmid.close()
