"""Untrusted datagrams on UDP 4791: 100k random and mutated packets never
crash the daemon and never write to registered memory."""

from __future__ import annotations

import os
import random
import socket
import time

import pytest

from daemon_helpers import daemon_in_shm
from softrdma import wire
from softrdma.enums import IBV_MTU_1024, IBV_QPT_RC, IBV_QPT_UD, IBV_WC_SUCCESS, IBV_WR_SEND
from softrdma.enums import IBV_QP_INIT_ATTR_XRCD, IBV_QPT_XRC_RECV, IBV_XRCD_INIT_ATTR_FD, IBV_XRCD_INIT_ATTR_OFLAGS
from softrdma.verbs import addr, cq, device, mr, pd, qp, srq as srq_mod, wr, xrcd as xrcd_mod
from softrdma.wire.icrc import ICRC, Ipv4Flow
from softrdma.wire.opcodes import OPCODE_TABLE

N_DATAGRAMS = 100_000


@pytest.fixture
def daemon(monkeypatch):
    with daemon_in_shm("fuzz") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        yield d


def _seen(mgmt) -> int:
    net = mgmt.call("links")[0]["links"][0]["net"][0]
    return net["rx_packets"] + net["rx_icrc_errors"] + net["rx_short"]


@pytest.mark.slow                   # 100k datagrams
def test_random_and_mutated_datagrams_never_crash_or_write_memory(daemon):
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    victim = mr.MR(p, 1 << 16, 15)                                   # remotely writable
    pattern = os.urandom(1 << 16)
    victim.write(pattern, len(pattern))
    c = cq.CQ(ctx, 64)
    rc = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(8, 8)))
    a = qp.QPAttr()
    a.qp_access_flags, a.path_mtu, a.dest_qp_num = 15, IBV_MTU_1024, 0x99
    a.max_dest_rd_atomic = a.max_rd_atomic = 1
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
    a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, 1), sgid_index=1), is_global=1)
    rc.to_rts(a)
    ua = qp.QPAttr()
    ua.qkey = 0x1234
    ud = qp.QP(p, qp.QPInitAttr(IBV_QPT_UD, scq=c, rcq=c, cap=qp.QPCap(8, 8)), ua)
    # an XRC TGT QP and an XRC SRQ of its domain (on the victim's PD): XRC requests name it or not
    xd = xrcd_mod.XRCD(ctx, xrcd_mod.XRCDInitAttr(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, 0, -1))
    xsrq = srq_mod.SRQ(p, srq_mod.SrqInitAttr(srq_mod.SrqAttr(8, 1)), xrcd=xd, cq=c)
    tgt = qp.QP(ctx, qp.QPInitAttrEx(qp_type=IBV_QPT_XRC_RECV, comp_mask=IBV_QP_INIT_ATTR_XRCD, xrcd=xd))
    tgt.to_rts(a)
    link = device.management().call("links")[0]["links"][0]
    ip, port = link["udp"][0]
    qpns = [rc.qp_num, ud.qp_num, tgt.qp_num]

    rng = random.Random(42)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    flow = Ipv4Flow(socket.inet_aton("127.0.0.1"), socket.inet_aton(ip), s.getsockname()[1], port)
    opcodes = [i for i, info in enumerate(OPCODE_TABLE) if info is not None]
    sent = 0
    mgmt = device.management()
    while sent < N_DATAGRAMS:
        kind = rng.random()
        if kind < 0.4:                                               # pure noise
            data = rng.randbytes(rng.randrange(0, 300))
        else:                                                        # a well-formed RoCE packet, then mangled
            op = rng.choice(opcodes)
            info = OPCODE_TABLE[op]
            kw = {}
            if info.reth >= 0:
                kw["reth"] = (victim.buf + rng.randrange(-4096, 1 << 17), rng.getrandbits(32), rng.randrange(0, 5000))
            if info.aeth >= 0:
                kw["aeth"] = (rng.getrandbits(8), rng.getrandbits(24))
            if info.atmeth >= 0:
                kw["atmeth"] = (victim.buf + rng.randrange(0, 1 << 16), rng.getrandbits(32), rng.getrandbits(64),
                                rng.getrandbits(64))
            if info.atmack >= 0:
                kw["atmack"] = rng.getrandbits(64)
            if info.deth >= 0:
                kw["deth"] = (rng.choice([0x1234, rng.getrandbits(32)]), rng.getrandbits(24))
            if info.immdt >= 0:
                kw["imm"] = rng.getrandbits(32)
            if info.ieth >= 0:
                kw["ieth"] = rng.getrandbits(32)
            if info.xrceth >= 0:
                kw["xrceth"] = rng.choice([xsrq.get_srq_num(), rng.getrandbits(24)])
            if info.feth >= 0:
                kw["feth"] = rng.getrandbits(32)
            payload = rng.randbytes(rng.randrange(0, 1100)) if info.has_payload else b""
            pkt = wire.build(op, rng.choice(qpns + [rng.getrandbits(24)]), rng.getrandbits(24), payload, **kw)
            if kind < 0.7:                                           # valid ICRC, fields random
                data = bytes(pkt) + ICRC.pack(flow.icrc(pkt))
            else:                                                    # flipped bits / truncated, old ICRC
                raw = bytearray(bytes(pkt) + ICRC.pack(flow.icrc(pkt)))
                for _ in range(rng.randrange(1, 4)):
                    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
                data = bytes(raw[:rng.randrange(1, len(raw) + 1)])
        try:
            s.sendto(data, (ip, port))
            sent += 1
        except BlockingIOError:
            time.sleep(0.001)
        if sent % 2000 == 0:                                         # let the daemon keep up: every datagram counts
            end = time.monotonic() + 60
            while _seen(mgmt) < sent - 1000 and time.monotonic() < end:
                time.sleep(0.005)
    end = time.monotonic() + 60
    while _seen(mgmt) < N_DATAGRAMS * 0.99 and time.monotonic() < end:
        time.sleep(0.05)
    assert daemon.proc.poll() is None, "softrdmad died"
    assert _seen(mgmt) >= N_DATAGRAMS * 0.99                        # the daemon really read them
    assert victim.read(1 << 16) == pattern                           # no datagram wrote to memory
    links = device.management().call("links")[0]["links"][0]
    net = links["net"][0]
    dropped = net["rx_icrc_errors"] + net["rx_short"] + sum(links["rx_dropped"].values())
    assert dropped > 0.5 * N_DATAGRAMS, (net, links["rx_dropped"])         # and most were refused
    # and the device still works: a fresh QP pair moves data
    from test_device_daemon import connect
    c2 = cq.CQ(ctx, 16)
    q1 = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c2, rcq=c2, cap=qp.QPCap(4, 4)))
    q2 = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c2, rcq=c2, cap=qp.QPCap(4, 4)))
    connect(qp, addr, q1, q2.qp_num, ctx.query_gid(1, 1))
    connect(qp, addr, q2, q1.qp_num, ctx.query_gid(1, 1))
    m2 = mr.MR(p, 4096, 15)
    m2.write(b"still alive", 11)
    q2.post_recv(wr.RecvWR(1, 1, [wr.SGE(m2.buf + 2048, 64, m2.lkey)]))
    q1.post_send(wr.SendWR(2, IBV_WR_SEND, 1, sg=[wr.SGE(m2.buf, 11, m2.lkey)]))
    got = []
    end = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < end:
        got += c2.poll(4)[1]
    assert sorted((w.wr_id, w.status) for w in got) == [(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    assert m2.read(11, 2048) == b"still alive"
    ctx.close()
