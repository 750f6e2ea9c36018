"""UD multicast end to end: ibv_attach_mcast/ibv_detach_mcast through
softrdmad, one send to a multicast GID (dest QPN 0xFFFFFF) reaching every
attached QP whose Q_Key matches, the device joining and leaving the IP group
with its first and last member, the errnos, the PMA multicast counters --
on one daemon (the loopback path), and across two daemons in two network
namespaces (real IPv4 multicast on a veth)."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from daemon_helpers import default_daemon_in_shm, poll_wcs as wait
from netns_helpers import hosts  # noqa: F401 (a fixture)
from softrdma.enums import IBV_QPT_RC, IBV_QPT_UD, IBV_WC_GRH, IBV_WC_SUCCESS, IBV_WR_SEND
from softrdma.verbs import addr, cq as cq_m, device, mr as mr_m, pd as pd_m, qp as qp_m, wr as wr_m
from softrdma.verbs.errors import PyverbsRDMAError

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "programs", "ud_mcast.py")
IPV4_GID = 1
QKEY = 0x11111111
MCAST_QPN = 0xFFFFFF
# a group of our own (other test daemons on this host must not share it)
GROUP = f"239.{(os.getpid() >> 8) & 0xFF}.{os.getpid() & 0xFF}.7"


def v4_gid(ip: str, prefix: bytes = bytes(10) + b"\xff\xff") -> addr.GID:
    return addr.GID(prefix + socket.inet_aton(ip))


def igmp_groups(ifname: str) -> set[str]:
    """IPv4 groups the host has joined on ``ifname`` (/proc/net/igmp)."""
    out, cur = set(), None
    with open("/proc/net/igmp") as f:
        for line in f.readlines()[1:]:
            if not line.startswith(("\t", " ")):
                cur = line.split()[1].rstrip(":")
            elif cur == ifname:
                out.add(socket.inet_ntoa(int(line.split()[0], 16).to_bytes(4, sys.byteorder)))
    return out


@pytest.fixture(scope="module")
def daemon():
    with default_daemon_in_shm("mcast") as d:
        yield d


class UD:
    def __init__(self, ctx, pd, qkey=QKEY):
        self.mr = mr_m.MR(pd, 4096, 1)
        self.cq = cq_m.CQ(ctx, 16)
        a = qp_m.QPAttr()
        a.qkey = qkey
        self.qp = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_UD, scq=self.cq, rcq=self.cq, cap=qp_m.QPCap(4, 4)), a)

    def post_recv(self, wr_id=1):
        self.qp.post_recv(wr_m.RecvWR(wr_id, 1, [wr_m.SGE(self.mr.buf, 2048, self.mr.lkey)]))


def send(ctx, pd, sender, gid, payload, wr_id=9):
    ah = addr.AH(pd, addr.AHAttr(gr=addr.GlobalRoute(dgid=gid, sgid_index=IPV4_GID), is_global=1))
    sender.mr.write(payload, len(payload), 1024)
    w = wr_m.SendWR(wr_id, IBV_WR_SEND, 1, sg=[wr_m.SGE(sender.mr.buf + 1024, len(payload), sender.mr.lkey)])
    w.set_wr_ud(ah, MCAST_QPN, QKEY)
    sender.qp.post_send(w)
    assert [c.status for c in wait(sender.cq, 1)] == [IBV_WC_SUCCESS]


@pytest.mark.parametrize("prefix", [bytes(10) + b"\xff\xff", b"\xff\x0e" + bytes(8) + b"\xff\xff"],
                         ids=["roce_v2_mgid", "ff0e_mgid"])
def test_one_send_reaches_every_attached_qp_until_it_detaches(daemon, prefix):
    gid = v4_gid(GROUP, prefix)
    with device.Context(name="rxe0") as ctx:
        pd = pd_m.PD(ctx)
        s, r1, r2 = UD(ctx, pd), UD(ctx, pd), UD(ctx, pd)
        other_qkey = UD(ctx, pd, qkey=0x2222)
        for r in (r1, r2, other_qkey):
            r.post_recv()
            r.qp.attach_mcast(gid)
        r1.qp.attach_mcast(gid)                          # again: a no-op, as in uverbs
        assert GROUP in igmp_groups("lo")                # the device joined the group
        send(ctx, pd, s, gid, b"to the group")
        for r in (r1, r2):
            (wc,) = wait(r.cq, 1)
            assert (wc.status, wc.byte_len, wc.src_qp, wc.wc_flags & IBV_WC_GRH) == (IBV_WC_SUCCESS, 40 + 12,
                                                                                     s.qp.qp_num, IBV_WC_GRH)
            assert r.mr.read(12, 40) == b"to the group"
            assert r.mr.read(4, 36) == socket.inet_aton(GROUP)      # the GRH's destination: the group
        assert wait(other_qkey.cq, 1, timeout=0.3) == []            # its Q_Key differs: dropped by that QP
        assert wait(s.cq, 1, timeout=0.1) == []                     # the sender is not attached
        r1.qp.detach_mcast(gid)
        for r in (r1, r2):
            r.post_recv(2)
        send(ctx, pd, s, gid, b"second")
        assert [c.wr_id for c in wait(r2.cq, 1)] == [2]
        assert wait(r1.cq, 1, timeout=0.3) == []
        r2.qp.detach_mcast(gid)
        other_qkey.qp.close()                            # destroying the QP detaches it
        assert GROUP not in igmp_groups("lo")            # the last member left: so did the device


def test_attach_errnos(daemon):
    gid = v4_gid(GROUP)
    with device.Context(name="rxe0") as ctx:
        pd = pd_m.PD(ctx)
        cq = cq_m.CQ(ctx, 4)
        rc = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=cq, rcq=cq))
        ud = UD(ctx, pd)
        cases = [(lambda: rc.attach_mcast(gid), errno.EINVAL),                    # UD QPs only
                 (lambda: ud.qp.attach_mcast(v4_gid("10.1.2.3")), errno.EINVAL),  # not a multicast GID
                 (lambda: ud.qp.detach_mcast(gid), errno.EINVAL),                 # not attached
                 (lambda: ctx.conn.call("attach_mcast", qp=ud.qp.handle, gid="ff0e", lid=0), errno.EINVAL)]
        for call, err in cases:
            with pytest.raises(PyverbsRDMAError) as e:
                call()
            assert e.value.error_code == err
        ud.qp.attach_mcast(gid, 0xC001)
        with pytest.raises(PyverbsRDMAError) as e:                                  # attached with another LID
            ud.qp.detach_mcast(gid, 0xC002)
        assert e.value.error_code == errno.EINVAL
        ud.qp.detach_mcast(gid, 0xC001)
        assert ctx.query_device().max_mcast_qp_attach == 56


def test_qp_limit_per_group_is_enomem(daemon):
    gid = addr.GID("ff0e::1:" + format(os.getpid() & 0xFFFF, "x"))
    with device.Context(name="rxe0") as ctx:
        pd = pd_m.PD(ctx)
        cq = cq_m.CQ(ctx, 4)
        qps = [qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_UD, scq=cq, rcq=cq, cap=qp_m.QPCap(1, 1)))
               for _ in range(ctx.query_device().max_mcast_qp_attach + 1)]
        for q in qps[:-1]:
            q.attach_mcast(gid)
        with pytest.raises(PyverbsRDMAError) as e:
            qps[-1].attach_mcast(gid)
        assert e.value.error_code == errno.ENOMEM


def test_multicast_counters_in_sysfs(daemon):
    gid = v4_gid(GROUP)
    counters = os.path.join(daemon.run_dir, "sys", "class", "infiniband", "rxe0", "ports", "1", "counters")

    def read(name):
        with open(os.path.join(counters, name)) as f:
            return int(f.read())

    time.sleep(1.1)                      # the tree is refreshed each second: let earlier tests' sends land
    x0, r0 = read("multicast_xmit_packets"), read("multicast_rcv_packets")
    with device.Context(name="rxe0") as ctx:
        pd = pd_m.PD(ctx)
        s, r = UD(ctx, pd), UD(ctx, pd)
        r.post_recv()
        r.qp.attach_mcast(gid)
        send(ctx, pd, s, gid, b"count me")
        assert len(wait(r.cq, 1)) == 1
        end = time.monotonic() + 60
        while read("multicast_xmit_packets") == x0 and time.monotonic() < end:
            time.sleep(0.1)
        assert (read("multicast_xmit_packets") - x0, read("multicast_rcv_packets") - r0) == (1, 1)


# ---------------------------------------------------------------- two hosts
def test_multicast_across_two_daemons_on_a_veth(hosts):
    group = "239.77.0.9"
    rcv = hosts.popen(1, [sys.executable, PROG, "recv", group, "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(rcv.stdout.readline())["ready"]
        joined = hosts.exec(hosts.ns[1], "cat", "/proc/net/igmp").stdout
        assert socket.inet_aton(group)[::-1].hex().upper() in joined       # the daemon joined on its veth
        snd = hosts.popen(0, [sys.executable, PROG, "send", group, "3"], stdout=subprocess.PIPE, text=True)
        out, _ = snd.communicate(timeout=30)
        assert snd.returncode == 0, out
        sender = json.loads(out.strip().splitlines()[-1])
        res = json.loads(rcv.stdout.readline())
    finally:
        if rcv.poll() is None:
            rcv.kill()
        rcv.wait(10)
    # both QPs of host B got every message, from host A's QP, over IPv4 to the group
    assert res["got"] == [[f"msg {i}" for i in range(3)]] * 2
    assert res["src_qp"] == [sender["qpn"]] * 2
    assert res["grh_src"] == hosts.ip[0] and res["grh_dst"] == group
