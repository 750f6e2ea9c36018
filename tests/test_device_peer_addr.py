"""Peers are who they claim to be (rxe's check_addr): a well-formed RoCEv2
packet for an RC QP is taken only from the QP's destination address and to
its own; from anywhere else it is dropped and counted (``dropped_bad_addr``,
``rdma statistic qp``) and never reaches memory.  UD takes datagrams from
anyone.  Over a real softrdmad: raw packets with a valid ICRC from sockets
bound to other loopback addresses (127.0.0.0/8), and a spoofing QP of the
same daemon (the path without sockets)."""

from __future__ import annotations

import json
import os
import time

import pytest

from daemon_helpers import daemon_in_shm
from rc_pair import ACC, rc_attr
from softrdma import wire
from softrdma.device.net import RoceSocket
from softrdma.enums import IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_WC_RETRY_EXC_ERR, IBV_WC_SUCCESS, IBV_WR_RDMA_WRITE
from softrdma.tools import rdma as tool
from softrdma.verbs import cq, device, mr, pd, qp, wr

MR_BYTES = 4096


@pytest.fixture
def env(monkeypatch):
    with daemon_in_shm("peer") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        ctx = device.Context(name="rxe0")
        try:
            yield d, ctx
        finally:
            ctx.close()


def gid_index(ctx, prefix: str) -> int:
    return next(i for i in range(16) if str(ctx.query_gid(1, i)).startswith(prefix))


V4 = "0000:0000:0000:0000:0000:ffff:7f00:0001"      # ::ffff:127.0.0.1
V6 = "0000:0000:0000:0000:0000:0000:0000:0001"      # ::1


def udp_port(ip: str) -> int:
    link = device.management().call("links")[0]["links"][0]
    return next(p for a, p in link["udp"] if a == ip)


def rx_packets() -> int:
    """Datagrams the daemon's sockets took in (whole, ICRC good): once one
    is counted, the daemon (one thread) has also handed it on."""
    link = device.management().call("links")[0]["links"][0]
    return sum(n["rx_packets"] for n in link["net"])


def bad_addr(capsys, qpn: int) -> int:
    """``dropped_bad_addr`` of the rdma counter QP ``qpn`` is bound to."""
    assert tool.main(["-j", "stat", "qp", "show", "link", "rxe0/1"], prog="rdma") == 0
    out, err = capsys.readouterr()
    assert err == ""
    for c in json.loads(out):
        if qpn in c["lqpn"]:
            return c["dropped_bad_addr"]
    raise AssertionError(f"QP {qpn} is bound to no counter: {out}")


def bind(capsys, qpn: int) -> None:
    assert tool.main(["stat", "qp", "bind", "link", "rxe0/1", "lqpn", str(qpn)], prog="rdma") == 0
    assert capsys.readouterr() == ("", "")


def until(cond, what: str, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while not (v := cond()):
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(0.01)
    return v


class Victim:
    """An RC (or UC) QP connected (to RTS) to QP 0x99 at GID index ``gi``
    of the daemon's own device, and a remotely writable MR filled with a
    pattern."""

    def __init__(self, ctx, gi: int, qp_type: int = IBV_QPT_RC):
        self.qp_type = qp_type
        self.pd = pd.PD(ctx)
        self.mr = mr.MR(self.pd, MR_BYTES, ACC)
        self.pattern = os.urandom(MR_BYTES)
        self.mr.write(self.pattern, MR_BYTES)
        self.cq = cq.CQ(ctx, 16)
        self.qp = qp.QP(self.pd, qp.QPInitAttr(qp_type, scq=self.cq, rcq=self.cq, cap=qp.QPCap(4, 4)))
        self.qp.to_rts(rc_attr(0x99, ctx.query_gid(1, gi), gi))

    def write_packet(self, data: bytes, offset: int = 0) -> bytearray:
        """A correct RDMA WRITE ONLY for this QP: its next PSN (0), its rkey."""
        op = wire.Opcode.RC_RDMA_WRITE_ONLY if self.qp_type == IBV_QPT_RC else wire.Opcode.UC_RDMA_WRITE_ONLY
        return wire.build(op, self.qp.qp_num, 0, data, ackreq=self.qp_type == IBV_QPT_RC,
                          reth=(self.mr.buf + offset, self.mr.rkey, len(data)))

    def unchanged(self) -> bool:
        return self.mr.read(MR_BYTES, 0) == self.pattern


def send_from(src_ip: str, pkt, dst_ip: str) -> None:
    """``pkt`` with the right ICRC, from a socket bound to ``src_ip``;
    returns once the daemon has taken it in."""
    before = rx_packets()
    s = RoceSocket(src_ip, port=0)
    try:
        assert s.send(pkt, dst_ip, udp_port(dst_ip))
    finally:
        s.close()
    until(lambda: rx_packets() > before, f"the daemon did not receive the packet from {src_ip}")


@pytest.mark.parametrize("qp_type", [IBV_QPT_RC, IBV_QPT_UC], ids=["rc", "uc"])
def test_write_from_a_spoofed_ipv4_source_is_dropped_and_counted(env, capsys, qp_type):
    daemon, ctx = env
    v = Victim(ctx, gid_index(ctx, V4), qp_type)            # its peer is 127.0.0.1
    bind(capsys, v.qp.qp_num)
    pkt = v.write_packet(b"forged by 127.0.0.2", 100)
    send_from("127.0.0.2", pkt, "127.0.0.1")
    assert v.unchanged()
    assert bad_addr(capsys, v.qp.qp_num) == 1
    # the same packet from the peer's address lands (so the drop was the address, and
    # the dropped one did not consume the PSN)
    send_from("127.0.0.1", pkt, "127.0.0.1")
    until(lambda: v.mr.read(19, 100) == b"forged by 127.0.0.2", "the WRITE from the peer did not land")
    assert bad_addr(capsys, v.qp.qp_num) == 1
    assert daemon.proc.poll() is None


def test_ipv6_peer_takes_packets_only_from_its_ipv6_address(env, capsys):
    daemon, ctx = env
    v = Victim(ctx, gid_index(ctx, V6))                     # its peer is ::1, its own address ::1
    bind(capsys, v.qp.qp_num)
    pkt = v.write_packet(b"via IPv4", 8)
    send_from("127.0.0.1", pkt, "127.0.0.1")                # both addresses wrong (the IPv4 forms)
    assert v.unchanged()
    assert bad_addr(capsys, v.qp.qp_num) == 1
    pkt = v.write_packet(b"via IPv6", 8)
    send_from("::1", pkt, "::1")
    until(lambda: v.mr.read(8, 8) == b"via IPv6", "the WRITE from ::1 did not land")
    assert bad_addr(capsys, v.qp.qp_num) == 1


def test_ud_takes_datagrams_from_anyone(env, capsys):
    daemon, ctx = env
    p = pd.PD(ctx)
    m = mr.MR(p, MR_BYTES, ACC)
    c = cq.CQ(ctx, 16)
    a = qp.QPAttr()
    a.qkey = 0x1234
    ud = qp.QP(p, qp.QPInitAttr(IBV_QPT_UD, scq=c, rcq=c, cap=qp.QPCap(4, 4)), a)
    ud.post_recv(wr.RecvWR(7, 1, [wr.SGE(m.buf, 1024, m.lkey)]))
    pkt = wire.build(wire.Opcode.UD_SEND_ONLY, ud.qp_num, 0, b"datagram", deth=(0x1234, 0x55))
    send_from("127.0.0.3", pkt, "127.0.0.1")
    got = until(lambda: c.poll(1)[1], "the UD datagram from 127.0.0.3 was not received")
    assert (got[0].wr_id, got[0].status, got[0].src_qp) == (7, IBV_WC_SUCCESS, 0x55)
    assert m.read(8, 40) == b"datagram"


def test_a_same_daemon_qp_posing_as_another_peer_writes_nothing(env, capsys):
    """A QP of another application on the same daemon aims at the victim
    from ::1 while the victim's peer is 127.0.0.1: no socket is involved,
    the check is the same."""
    daemon, ctx = env
    v = Victim(ctx, gid_index(ctx, V4))
    bind(capsys, v.qp.qp_num)
    p = pd.PD(ctx)
    src = mr.MR(p, MR_BYTES, ACC)
    src.write(b"x" * 64, 64)
    c = cq.CQ(ctx, 16)
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(4, 4)))
    g6 = gid_index(ctx, V6)
    q.to_rts(rc_attr(v.qp.qp_num, ctx.query_gid(1, g6), g6, timeout=8, retry_cnt=1))
    w = wr.SendWR(1, IBV_WR_RDMA_WRITE, 1, sg=[wr.SGE(src.buf, 64, src.lkey)])
    w.set_wr_rdma(v.mr.rkey, v.mr.buf)
    q.post_send(w)
    got = until(lambda: c.poll(1)[1], "the spoofing WRITE never completed")
    assert got[0].status == IBV_WC_RETRY_EXC_ERR                 # never acknowledged: it never got in
    assert v.unchanged()
    assert bad_addr(capsys, v.qp.qp_num) == 2                    # the WRITE and its one retry
