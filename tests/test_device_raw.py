"""Raw packet QPs through a real daemon on lo: whole Ethernet frames sent
with AF_PACKET and steered back by flow rules of every spec type, a frame
no rule matches not delivered (and still the kernel's), RSS spreading over
WQs by the Toeplitz hash, the state machine's masks, and EPERM for a
process without CAP_NET_RAW.  Needs root (AF_PACKET), as the kernel's raw
QPs do; CI runs as root."""

from __future__ import annotations

import errno
import os
import random
import socket
import struct
import subprocess
import sys
import textwrap

import pytest

from daemon_helpers import default_daemon_in_shm, poll_wcs, resources
from wait_helpers import wait_for
from softrdma.enums import (IBV_ACCESS_LOCAL_WRITE, IBV_FLOW_ATTR_ALL_DEFAULT, IBV_FLOW_ATTR_SNIFFER,
                            IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_PD,
                            IBV_QP_INIT_ATTR_RX_HASH, IBV_QP_PORT, IBV_QP_RATE_LIMIT, IBV_QP_SQ_PSN, IBV_QP_STATE,
                            IBV_QPS_INIT, IBV_QPS_RTS, IBV_QPT_RAW_PACKET, IBV_RX_HASH_DST_IPV4,
                            IBV_RX_HASH_FUNC_TOEPLITZ,
                            IBV_RX_HASH_SRC_IPV4, IBV_WC_RECV, IBV_WC_SEND, IBV_WC_SUCCESS, IBV_WQ_ATTR_STATE,
                            IBV_WQS_RDY)
from softrdma.pyverbs.flow import Flow, FlowAttr
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.spec import EthSpec, Ipv4ExtSpec, Ipv6Spec, TcpUdpSpec
from softrdma.pyverbs.wq import RwqIndTable, RwqIndTableInitAttr, RxHashConf, WQ, WQAttr, WQInitAttr
from softrdma.verbs import cq as cq_m, device, pd as pd_m, qp as qp_m, wr as wr_m
from softrdma.verbs.errors import PyverbsRDMAError
from softrdma.wire.flow import parse_frame
from softrdma.wire.toeplitz import rss_hash

pytestmark = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                                reason="AF_PACKET needs root (CI runs as root)")

# locally administered MACs and addresses of no network here: frames of
# this test are told apart from anything else on lo (and from rdma-core's
# suite, which may run meanwhile)
SRC_MAC, DST_MAC = "02:5a:13:00:00:01", "03:5a:13:00:00:02"
SRC_IP, DST_IP = "10.213.0.1", "10.213.0.2"
SRC_IP6, DST_IP6 = "fd13::1", "fd13::2"
MSG = 256


def gen_frame(l3=4, l4="udp", src=SRC_IP, dst=DST_IP, sport=1234, dport=None, size=MSG, dst_mac=DST_MAC):
    dport = dport if dport is not None else PORT
    eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(SRC_MAC.replace(":", ""))
    proto = socket.IPPROTO_UDP if l4 == "udp" else socket.IPPROTO_TCP
    l4len = 8 if l4 == "udp" else 20
    iplen = 20 if l3 == 4 else 40
    payload = bytes(random.getrandbits(8) for _ in range(size - 14 - iplen - l4len))
    l4h = struct.pack("!4H", sport, dport, 8 + len(payload), 0) if l4 == "udp" else \
        struct.pack("!2H2I4H", sport, dport, 0, 0, 5 << 12, 65535, 0, 0)
    if l3 == 4:
        ip = struct.pack("!2B3H2BH4s4s", 0x45, 0, size - 14, 0, 0x4000, 64, proto, 0, socket.inet_aton(src),
                         socket.inet_aton(dst))
        return eth + b"\x08\x00" + ip + l4h + payload
    ip = struct.pack("!IH2B16s16s", 6 << 28, size - 54, proto, 64, socket.inet_pton(socket.AF_INET6, src),
                     socket.inet_pton(socket.AF_INET6, dst))
    return eth + b"\x86\xdd" + ip + l4h + payload


PORT = random.randrange(20000, 60000)          # this run's UDP/TCP destination port


@pytest.fixture(scope="module")
def ctx():
    with default_daemon_in_shm("raw") as d:
        c = device.Context(name="rxe0")
        yield c
        c.close()
        d.stop()


class RawSide:
    """A PD, an MR, a CQ and a raw packet QP in RTS."""

    def __init__(self, ctx, rts=True, slots=4):
        self.pd = pd_m.PD(ctx)
        self.slots = slots
        self.mr = MR(self.pd, slots * MSG, IBV_ACCESS_LOCAL_WRITE)
        self.cq = cq_m.CQ(ctx, 256)
        self.qp = qp_m.QP(self.pd, qp_m.QPInitAttr(IBV_QPT_RAW_PACKET, scq=self.cq, rcq=self.cq,
                                                   cap=qp_m.QPCap(64, 64, 1, 1)),
                          qp_m.QPAttr(port_num=1) if rts else None)

    def post_recv(self, n=1, offset=0, wr_id=0, spread=False):
        for i in range(n):
            off = (wr_id + i) * MSG if spread else offset
            self.qp.post_recv(wr_m.RecvWR(wr_id + i, 1, [wr_m.SGE(self.mr.buf + off, MSG, self.mr.lkey)]))

    def ours(self, wcs):
        """The frames of ``wcs`` this test sent (lo carries others too)."""
        src = bytes.fromhex(SRC_MAC.replace(":", ""))
        return [bytes(self.mr.read(w.byte_len, w.wr_id * MSG)) for w in wcs
                if w.status == IBV_WC_SUCCESS and bytes(self.mr.read(12, w.wr_id * MSG))[6:12] == src]

    def send(self, frame, wr_id=7):
        self.mr.write(frame, len(frame), 2 * MSG)
        self.qp.post_send(wr_m.SendWR(wr_id, sg=[wr_m.SGE(self.mr.buf + 2 * MSG, len(frame), self.mr.lkey)]))
        (wc,) = poll_wcs(self.cq, 1, 10)
        assert (wc.status, wc.opcode, wc.wr_id) == (IBV_WC_SUCCESS, IBV_WC_SEND, wr_id)

    def close(self):
        self.pd.close()
        self.cq.close()


def flow(qp, specs, **kw):
    fa = FlowAttr(num_of_specs=len(specs), **kw)
    fa.specs.extend(specs)
    return Flow(qp, fa)


def eth_spec(ether_type=0x800):
    s = EthSpec(ether_type=ether_type, dst_mac=DST_MAC)
    s.src_mac, s.src_mac_mask = SRC_MAC, SRC_MAC
    return s


SPECS = {
    "eth": (lambda: [eth_spec()], 4, "udp"),
    "ipv4": (lambda: [Ipv4ExtSpec(src_ip=SRC_IP, dst_ip=DST_IP, proto=socket.IPPROTO_UDP)], 4, "udp"),
    "ipv6": (lambda: [eth_spec(0x86DD), Ipv6Spec(src_ip=SRC_IP6, dst_ip=DST_IP6, next_hdr=socket.IPPROTO_UDP)],
             6, "udp"),
    "udp": (lambda: [eth_spec(), Ipv4ExtSpec(src_ip=SRC_IP, dst_ip=DST_IP),
                     TcpUdpSpec(IBV_FLOW_SPEC_UDP, src_port=1234, dst_port=PORT)], 4, "udp"),
    "tcp": (lambda: [eth_spec(0x86DD), Ipv6Spec(src_ip=SRC_IP6, dst_ip=DST_IP6, next_hdr=socket.IPPROTO_TCP),
                     TcpUdpSpec(IBV_FLOW_SPEC_TCP, src_port=1234, dst_port=PORT)], 6, "tcp"),
}


@pytest.mark.parametrize("kind", list(SPECS))
def test_frames_steered_by_each_spec_type(ctx, kind):
    make, l3, l4 = SPECS[kind]
    client, server = RawSide(ctx), RawSide(ctx)
    try:
        fl = flow(server.qp, make())
        server.post_recv(4)
        ips = (SRC_IP6, DST_IP6) if l3 == 6 else (SRC_IP, DST_IP)
        for i in range(3):
            f = gen_frame(l3, l4, *ips)
            client.send(f, wr_id=100 + i)
            (wc,) = poll_wcs(server.cq, 1, 10)
            assert (wc.status, wc.opcode, wc.byte_len, wc.qp_num) == \
                (IBV_WC_SUCCESS, IBV_WC_RECV, MSG, server.qp.qp_num)
            assert server.mr.read(MSG, 0) == f
            server.post_recv(1, wr_id=wc.wr_id)
        fl.close()
    finally:
        client.close()
        server.close()


def test_frame_no_rule_matches_is_not_delivered_and_reaches_the_kernel(ctx):
    """A rule for one destination address: a frame to another is not
    delivered; a UDP datagram the kernel receives is still the kernel's
    (the socket is a copy) and, matching a rule, a copy goes to the QP."""
    server, client = RawSide(ctx), RawSide(ctx)
    try:
        flow(server.qp, [Ipv4ExtSpec(dst_ip=DST_IP)])
        flow(server.qp, [Ipv4ExtSpec(dst_ip="127.0.0.1"), TcpUdpSpec(IBV_FLOW_SPEC_UDP, dst_port=PORT)])
        server.post_recv(4)
        client.send(gen_frame(dst="10.213.0.99"), 1)
        client.send(gen_frame(l3=6, src=SRC_IP6, dst=DST_IP6), 2)
        match = gen_frame()
        client.send(match, 3)
        (wc,) = poll_wcs(server.cq, 1, 10)
        assert server.mr.read(MSG, 0) == match and wc.byte_len == MSG
        assert poll_wcs(server.cq, 1, 0.3) == []
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            rx.bind(("127.0.0.1", PORT))
            rx.settimeout(10)
            tx.sendto(b"kernel's", ("127.0.0.1", PORT))
            assert rx.recv(100) == b"kernel's"
        (wc,) = poll_wcs(server.cq, 1, 10)
        assert wc.status == IBV_WC_SUCCESS and server.mr.read(wc.byte_len, 0)[-8:] == b"kernel's"
    finally:
        client.close()
        server.close()


def test_priorities_defaults_and_sniffer(ctx):
    """The lower priority value wins among NORMAL rules; ALL_DEFAULT takes
    what no NORMAL rule took; a SNIFFER sees everything."""
    hi, lo, dflt, sniff, client = (RawSide(ctx, slots=64) for _ in range(5))
    try:
        flow(lo.qp, [Ipv4ExtSpec(dst_ip=DST_IP)], priority=5)
        flow(hi.qp, [Ipv4ExtSpec(dst_ip=DST_IP), TcpUdpSpec(IBV_FLOW_SPEC_UDP, dst_port=PORT)], priority=1)
        flow(dflt.qp, [], flow_type=IBV_FLOW_ATTR_ALL_DEFAULT)
        flow(sniff.qp, [], flow_type=IBV_FLOW_ATTR_SNIFFER)
        for s in (hi, lo, dflt, sniff):
            s.post_recv(64, spread=True)
        f1, f2, f3 = gen_frame(), gen_frame(dport=PORT + 1), gen_frame(dst="10.213.0.77")
        client.send(f1, 1)                              # both NORMAL rules match: priority 1's
        client.send(f2, 2)                              # only the priority 5 rule
        client.send(f3, 3)                              # no NORMAL rule: the default's
        assert hi.ours(poll_wcs(hi.cq, 1, 10)) == [f1] and lo.ours(poll_wcs(lo.cq, 1, 10)) == [f2]
        assert poll_wcs(hi.cq, 1, 0.2) == [] and poll_wcs(lo.cq, 1, 0.2) == []
        got = []
        for _ in range(50):
            got += sniff.ours(poll_wcs(sniff.cq, 64, 0.1))
            if len(got) >= 3:
                break
        assert got == [f1, f2, f3]
        got = []
        for _ in range(50):
            got += dflt.ours(poll_wcs(dflt.cq, 64, 0.1))
            if got:
                break
        assert got == [f3]                               # (other lo traffic may reach it too: not ours)
        with pytest.raises(PyverbsRDMAError) as ei:      # a default rule has no specs
            flow(dflt.qp, [Ipv4ExtSpec(dst_ip=DST_IP)], flow_type=IBV_FLOW_ATTR_ALL_DEFAULT)
        assert ei.value.error_code == errno.EINVAL
    finally:
        for s in (hi, lo, dflt, sniff, client):
            s.close()


def test_rss_spreads_frames_over_wqs_by_toeplitz(ctx):
    key = bytes(random.getrandbits(8) for _ in range(40))
    pd = pd_m.PD(ctx)
    cqs = [cq_m.CQ(ctx, 128) for _ in range(2)]
    mr = MR(pd, MSG * 64, IBV_ACCESS_LOCAL_WRITE)
    client = RawSide(ctx)
    try:
        wqs = []
        for i in range(8):
            wq = WQ(ctx, WQInitAttr(wq_pd=pd, wq_cq=cqs[i % 2], max_wr=16, max_sge=1))
            wq.modify(WQAttr(attr_mask=IBV_WQ_ATTR_STATE, wq_state=IBV_WQS_RDY))
            for j in range(4):
                wq.post_recv(wr_m.RecvWR(i << 8 | j, 1, [wr_m.SGE(mr.buf + (4 * i + j) * MSG, MSG, mr.lkey)]))
            wqs.append(wq)
        table = RwqIndTable(ctx, RwqIndTableInitAttr(3, wqs))
        mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4
        qp = qp_m.QP(ctx, qp_m.QPInitAttrEx(
            qp_type=IBV_QPT_RAW_PACKET, pd=pd, ind_table=table,
            comp_mask=IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
            hash_conf=RxHashConf(IBV_RX_HASH_FUNC_TOEPLITZ, 40, list(key), mask)))
        flow(qp, [eth_spec()])
        want = {}
        for n in range(24):
            f = gen_frame(src=f"10.213.{n}.{n + 1}")
            wq_num = wqs[rss_hash(key, parse_frame(f), mask) & 7].wqn
            want[wq_num] = want.get(wq_num, 0) + 1
            if want[wq_num] > 4:                  # 4 receives per WQ: keep within them
                want[wq_num] -= 1
                continue
            client.send(f, n)
        got = {}
        for w in poll_wcs(cqs[0], 32, 1) + poll_wcs(cqs[1], 32, 1):
            assert w.status == IBV_WC_SUCCESS and w.byte_len == MSG
            got[w.qp_num] = got.get(w.qp_num, 0) + 1
        assert got == want and len(got) > 2            # spread, exactly as the hash says
        qp.close()
        table.close()
    finally:
        client.close()
        for c in cqs:
            c.close()
        pd.close()


def test_raw_qp_state_machine_masks(ctx):
    s = RawSide(ctx, rts=False)
    try:
        a = qp_m.QPAttr(port_num=1)
        a.qp_state = IBV_QPS_INIT
        with pytest.raises(PyverbsRDMAError) as ei:         # RESET->INIT needs the port
            s.qp.modify(a, IBV_QP_STATE)
        assert ei.value.error_code == errno.EINVAL
        s.qp.modify(a, IBV_QP_STATE | IBV_QP_PORT)
        s.qp.to_rtr(a)
        a.qp_state = IBV_QPS_RTS
        with pytest.raises(PyverbsRDMAError) as ei:         # no PSNs on a raw QP
            s.qp.modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN)
        assert ei.value.error_code == errno.EINVAL
        a.rate_limit = 5000                               # packet pacing: the device has none
        with pytest.raises(PyverbsRDMAError) as ei:
            s.qp.modify(a, IBV_QP_STATE | IBV_QP_RATE_LIMIT)
        assert ei.value.error_code == errno.EOPNOTSUPP
        s.qp.to_rts(a)
        assert s.qp.query(IBV_QP_STATE)[0].qp_state == IBV_QPS_RTS
    finally:
        s.close()


NO_NET_RAW = textwrap.dedent("""
    import ctypes, errno, sys
    from softrdma.enums import IBV_QPT_RAW_PACKET, IBV_QPT_UD
    from softrdma.pyverbs.flow import Flow, FlowAttr
    from softrdma.verbs import cq, device, pd, qp
    libc = ctypes.CDLL(None, use_errno=True)
    c = device.Context(name="rxe0")
    p, q = pd.PD(c), cq.CQ(c, 8)
    raw = qp.QP(p, qp.QPInitAttr(IBV_QPT_RAW_PACKET, scq=q, rcq=q), qp.QPAttr())   # with CAP_NET_RAW
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)           # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    assert libc.capget(hdr, data) == 0
    for i in (0, 1):                                     # effective and permitted, first word
        data[i] &= ~(1 << 13)                            # CAP_NET_RAW
    assert libc.capset(hdr, data) == 0
    qp.QP(p, qp.QPInitAttr(IBV_QPT_UD, scq=q, rcq=q)).close()     # anything else: allowed
    for what, make in (("qp", lambda: qp.QP(p, qp.QPInitAttr(IBV_QPT_RAW_PACKET, scq=q, rcq=q))),
                       ("flow", lambda: Flow(raw, FlowAttr()))):
        try:
            make()
        except Exception as e:
            print(what, "refused", e.error_code == errno.EPERM)
        else:
            print(what, "created")
""")


def test_raw_qp_needs_cap_net_raw(ctx):
    out = subprocess.run([sys.executable, "-c", NO_NET_RAW], env={**os.environ}, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split("\n")[:2] == ["qp refused True", "flow refused True"], out.stdout + out.stderr
    # and with it (this process), created
    s = RawSide(ctx)
    s.close()


def test_objects_in_use_are_busy_and_a_client_leaving_frees_all(ctx):
    """A CQ under a WQ, a WQ in a table, a table under a QP, a QP with a
    flow: EBUSY (ibv_destroy_*); the verbs objects close their dependants
    first, and what a process leaves is freed when it goes."""
    from softrdma.uapi.commands import CMD
    pd = pd_m.PD(ctx)
    cq = cq_m.CQ(ctx, 16)
    wq = WQ(ctx, WQInitAttr(wq_pd=pd, wq_cq=cq, max_wr=4))
    table = RwqIndTable(ctx, RwqIndTableInitAttr(1, [wq]))
    qp = qp_m.QP(ctx, qp_m.QPInitAttrEx(
        qp_type=IBV_QPT_RAW_PACKET, pd=pd, ind_table=table,
        comp_mask=IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
        hash_conf=RxHashConf(IBV_RX_HASH_FUNC_TOEPLITZ, 40, [1] * 40, IBV_RX_HASH_SRC_IPV4)))
    fl = flow(qp, [eth_spec()])
    for cmd, kw in ((CMD.destroy_cq, {"cq": cq.handle}), (CMD.destroy_wq, {"wq": wq.handle}),
                    (CMD.destroy_rwq_ind_table, {"ind_table": table.handle}), (CMD.destroy_qp, {"qp": qp.handle})):
        with pytest.raises(PyverbsRDMAError) as ei:
            ctx.conn.call(cmd, **kw)
        assert ei.value.error_code == errno.EBUSY, cmd.name
    cq.close()                                        # closes the WQ, its table, their QP and its flow
    assert fl.closed and qp.closed and table.closed and wq.closed
    cq2 = cq_m.CQ(ctx, 16)
    wq2 = WQ(ctx, WQInitAttr(wq_pd=pd, wq_cq=cq2, max_wr=4))
    t2 = RwqIndTable(ctx, RwqIndTableInitAttr(1, [wq2]))
    with pytest.raises(PyverbsRDMAError) as ei:       # a Toeplitz key of the wrong length
        qp_m.QP(ctx, qp_m.QPInitAttrEx(
            qp_type=IBV_QPT_RAW_PACKET, pd=pd, ind_table=t2,
            comp_mask=IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
            hash_conf=RxHashConf(IBV_RX_HASH_FUNC_TOEPLITZ, 8, [1] * 8, IBV_RX_HASH_SRC_IPV4)))
    assert ei.value.error_code == errno.EINVAL
    cq2.close()
    assert wq2.closed and t2.closed
    pd.close()
    # a process that leaves its raw objects: the daemon frees them with its connection
    prog = textwrap.dedent("""
        from softrdma.enums import IBV_QPT_RAW_PACKET
        from softrdma.pyverbs.flow import Flow, FlowAttr
        from softrdma.pyverbs.wq import WQ, WQInitAttr, RwqIndTable, RwqIndTableInitAttr
        from softrdma.verbs import cq, device, pd, qp
        c = device.Context(name="rxe0")
        p, q = pd.PD(c), cq.CQ(c, 8)
        r = qp.QP(p, qp.QPInitAttr(IBV_QPT_RAW_PACKET, scq=q, rcq=q), qp.QPAttr())
        f = Flow(r, FlowAttr())
        w = WQ(c, WQInitAttr(wq_pd=p, wq_cq=q, max_wr=4))
        t = RwqIndTable(c, RwqIndTableInitAttr(2, [w, w]))
        print("made", flush=True)
        import os; os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", prog], env={**os.environ}, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "made", out.stderr
    left = {"flow", "wq", "rwq_ind_table", "qp"}
    wait_for(lambda: not left & {r["kind"] for r in resources(os.environ["SOFTRDMA_RUN"])}, 10,
             "the daemon to free what the process left")
