"""Every GID index of a real netdev, used by an application: the daemon
survives each, and each either works or is refused with EINVAL.

Two namespaces joined by veth; each end has an IPv4 address, an IPv6 ULA
and its link-local address, so each device's GID table holds the default
(link-local) GID, an IPv4-mapped GID and an IPv6 GID.  For every pair
(source GID index, destination GID of the peer) a client of the daemon
moves an RC QP to RTR/RTS and creates a UD AH against it and posts a send
on both: a source and destination of different IP families are refused
with EINVAL (as the kernel's rdma_resolve_ip refuses them), the others
are accepted, and after every attempt the daemon still answers.  Then
``ibv_rc_pingpong -g N`` runs between the namespaces over every GID index
(link-local included, over a socket scoped to the veth).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import sys
import time

import pytest

from netns_helpers import TwoHosts, need_root

QKEY = 0x11111111


def _rc_in_init(p, c, sgid_index: int, dgid: str):
    """An RC QP in INIT and the RTR/RTS attributes towards ``dgid`` from
    ``sgid_index``: (the route, the QP, the attributes)."""
    from softrdma.enums import IBV_MTU_1024, IBV_QPT_RC
    from softrdma.verbs import addr, qp
    route = addr.AHAttr(gr=addr.GlobalRoute(dgid=addr.GID(dgid), sgid_index=sgid_index, hop_limit=1),
                        is_global=1, port_num=1)
    rc = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(4, 4, 1, 1)))
    a = qp.QPAttr()
    rc.to_init(a)
    a.path_mtu, a.dest_qp_num, a.rq_psn, a.sq_psn = IBV_MTU_1024, 0x4242, 1, 1
    a.max_dest_rd_atomic = a.max_rd_atomic = 1
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 1, 1, 1
    a.ah_attr = route
    return route, rc, a


def _ready(h: TwoHosts, i: int, want: int) -> list:
    """The netdev's addresses once every one is usable (no DAD pending)."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        out = h.exec(h.ns[i], "ip", "-o", "addr", "show", "dev", h.dev[i]).stdout
        if "tentative" not in out and out.count(" inet") >= want:
            return out.splitlines()
        time.sleep(0.05)
    raise AssertionError(f"addresses of {h.dev[i]} never settled: {out}")


@pytest.fixture(scope="module")
def hosts():
    need_root()
    h = TwoHosts()
    try:
        for i in range(2):
            # a ULA each, no DAD; the link-local came with the link (its DAD is waited for)
            h.exec(h.ns[i], "ip", "-6", "addr", "add", f"fd00:5d:{h.ip[0].split('.')[2]}::{i + 1}/64", "dev",
                   h.dev[i], "nodad")
            _ready(h, i, 3)
        h.start_daemons()
        yield h
    finally:
        h.close()


def _gids(h: TwoHosts, i: int) -> dict[int, bytes]:
    """GID index -> GID of host i's rxe0, as its clients see it."""
    from softrdma.verbs import device
    os.environ["SOFTRDMA_RUN"] = h.run_dirs[i]
    try:
        with device.Context(name="rxe0") as ctx:
            out = {}
            for idx in range(8):
                raw = ctx.query_gid(1, idx).raw
                if raw != bytes(16):
                    out[idx] = raw
            return out
    finally:
        del os.environ["SOFTRDMA_RUN"]


def _family(gid: bytes) -> int:
    return 4 if gid[:12] == bytes(10) + b"\xff\xff" else 6


def _alive(h: TwoHosts, i: int) -> None:
    assert h.daemons[i].poll() is None, open(os.path.join(h.run_dirs[i], "test-daemon.log")).read()
    r = h.exec(h.ns[i], "env", f"SOFTRDMA_RUN={h.run_dirs[i]}", "SOFTRDMA_AUTOSTART=0", sys.executable, "-m",
               "softrdma", "rdma", "link", "show", check=False)
    assert r.returncode == 0 and "rxe0" in r.stdout, (r.stdout, r.stderr)


def test_gid_table_has_every_kind(hosts):
    g = _gids(hosts, 0)
    kinds = {("ll" if v[:2] == b"\xfe\x80" else _family(v)) for v in g.values()}
    assert kinds == {"ll", 4, 6}, g


def _attempt(h: TwoHosts, sgid_index: int, dgid: bytes) -> int | None:
    """RC QP to RTR/RTS and a UD AH against ``dgid`` from ``sgid_index`` of
    host 0, a send posted on each.  None if accepted, else the errno."""
    from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_QPT_UD
    from softrdma.verbs import addr, cq, device, mr, pd, qp, wr
    from softrdma.verbs.errors import PyverbsRDMAError
    os.environ["SOFTRDMA_RUN"] = h.run_dirs[0]
    ctx = device.Context(name="rxe0")
    errs = []
    try:
        p = pd.PD(ctx)
        m = mr.MR(p, 4096, IBV_ACCESS_LOCAL_WRITE)
        c = cq.CQ(ctx, 16)
        route, rc, a = _rc_in_init(p, c, sgid_index, dgid)
        try:
            rc.to_rts(a)
            rc.post_send(wr.SendWR(1, sg=[wr.SGE(m.buf, 64, m.lkey)]))
        except PyverbsRDMAError as e:
            errs.append(e.error_code)
        ud = qp.QP(p, qp.QPInitAttr(IBV_QPT_UD, scq=c, rcq=c, cap=qp.QPCap(4, 4, 1, 1)))
        u = qp.QPAttr()
        u.qkey = QKEY
        ud.to_rts(u)
        try:
            ah = addr.AH(p, route)
            s = wr.SendWR(2, sg=[wr.SGE(m.buf, 64, m.lkey)])
            s.set_wr_ud(ah, 0x4242, QKEY)
            ud.post_send(s)
        except PyverbsRDMAError as e:
            errs.append(e.error_code)
        time.sleep(0)           # the sends are on their way; the daemon is checked next
    finally:
        ctx.close()
        del os.environ["SOFTRDMA_RUN"]
    assert len(set(errs)) <= 1 and len(errs) in (0, 2), errs      # QP and AH agree
    return errs[0] if errs else None


def test_every_source_and_destination_gid(hosts):
    mine, theirs = _gids(hosts, 0), _gids(hosts, 1)
    seen = []
    for si, sg in mine.items():
        for di, dg in theirs.items():
            err = _attempt(hosts, si, dg)
            _alive(hosts, 0)
            _alive(hosts, 1)
            if _family(sg) != _family(dg):
                assert err == errno.EINVAL, (si, di, err)
            else:
                assert err is None, (si, di, err)
            seen.append((si, di, err))
    assert len(seen) == len(mine) * len(theirs) >= 9, seen


@pytest.mark.parametrize("index", [0, 1, 2])
def test_rc_pingpong_over_every_gid_index(hosts, index):
    """``ibv_rc_pingpong -g N`` between the namespaces for every GID index
    (0: the link-local default GID, 1: IPv4, 2: the IPv6 ULA)."""
    h = hosts
    assert index in _gids(h, 0) and index in _gids(h, 1)
    cout, sout = h.pingpong(["-g", str(index), "-n", "20"])
    assert "20 iters in" in cout and "20 iters in" in sout, (cout, sout)
    gid = ipaddress.IPv6Address(_gids(h, 0)[index])
    print(f"GID index {index} ({gid}): {cout.strip().splitlines()[-1]}")
    _alive(h, 0)
    _alive(h, 1)


def test_a_source_gid_without_an_address_is_refused():
    """The embedded device on lo: its default GID (fe80::/64 from lo's zero
    MAC) is no address of lo, so nothing can be sent from it to another
    host: modify_qp and create_ah refuse it with EINVAL (the kernel fails
    the route) -- and accept it towards a GID of the same daemon, whose
    traffic never leaves it.  The daemon answers after each."""
    from daemon_helpers import daemon_in_shm
    from softrdma.verbs import addr, cq, device, pd
    from softrdma.verbs.errors import PyverbsRDMAError

    def attempt(p, c, sgid, dgid):
        errs = []
        route, rc, a = _rc_in_init(p, c, sgid, dgid)
        try:
            rc.to_rts(a)
        except PyverbsRDMAError as e:
            errs.append(e.error_code)
        try:
            addr.AH(p, route)
        except PyverbsRDMAError as e:
            errs.append(e.error_code)
        rc.close()
        return errs

    with daemon_in_shm("gid-noaddr") as d:
        os.environ["SOFTRDMA_RUN"] = d.run_dir
        try:
            with device.Context(name="rxe0") as ctx:
                g0 = ctx.query_gid(1, 0).raw
                assert g0[:2] == b"\xfe\x80"
                p = pd.PD(ctx)
                c = cq.CQ(ctx, 16)
                remote = ipaddress.IPv6Address("fd00:5d::99").packed
                assert attempt(p, c, 0, remote) == [errno.EINVAL, errno.EINVAL]
                assert d.proc.poll() is None
                assert attempt(p, c, 0, g0) == []
                assert ctx.query_port(1).state == 4          # the daemon answers
        finally:
            del os.environ["SOFTRDMA_RUN"]
        assert d.proc.poll() is None
