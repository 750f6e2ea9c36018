"""softrdmad end to end: the verbs library, the control socket, the shared
rings and the transport, in one process and across processes, and what
happens when either side dies."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from daemon_helpers import RunningDaemon
from shm_helpers import shm_dir
from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
    IBV_EVENT_DEVICE_FATAL, IBV_MTU_1024, IBV_QPS_RTS, IBV_QPT_RC, IBV_QPT_UD,
    IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_WC_GRH, IBV_WC_REM_ACCESS_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_SUCCESS,
    IBV_WC_WITH_IMM,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,
)

IPV4_GID = 1             # on lo: fe80::(MAC) at 0, ::ffff:127.0.0.1 at 1
ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC


@pytest.fixture
def daemon(shm_path, monkeypatch):
    d = RunningDaemon(str(shm_path))
    monkeypatch.setenv("SOFTRDMA_RUN", str(shm_path))
    yield d
    d.stop()


def _verbs():
    from softrdma.verbs import addr, cq, device, mr, pd, qp, wr
    return device, pd, mr, cq, qp, addr, wr


def wait(cq, n, timeout=60.0):
    got = []
    end = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        got += cq.poll(16)[1]
    return got


def connect(qp_mod, addr_mod, q, peer_qpn, gid, **kw):
    a = qp_mod.QPAttr()
    a.qp_access_flags = ACC
    a.path_mtu = kw.get("mtu", IBV_MTU_1024)
    a.dest_qp_num = peer_qpn
    a.max_dest_rd_atomic = a.max_rd_atomic = 4
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, kw.get("timeout", 14), 7, 7
    a.ah_attr = addr_mod.AHAttr(gr=addr_mod.GlobalRoute(dgid=gid, sgid_index=IPV4_GID), is_global=1, port_num=1)
    q.to_rts(a)


def test_device_list_and_queries(daemon):
    device, *_ = _verbs()
    devs = device.get_device_list()
    assert [d.name for d in devs] == [b"rxe0"]
    with device.Context(name="rxe0") as ctx:
        assert ctx.query_port(1).state == 4
        # rxe's layout: the default GID from the MAC (lo: all zero) at 0, then the addresses
        assert str(ctx.query_gid(1, 0)) == "fe80:0000:0000:0000:0200:00ff:fe00:0000"
        assert str(ctx.query_gid(1, 1)) == "0000:0000:0000:0000:0000:ffff:7f00:0001"
        assert str(ctx.query_gid(1, 2)) == "0000:0000:0000:0000:0000:0000:0000:0001"
        assert str(ctx.query_gid(1, 3)) == "0000:0000:0000:0000:0000:0000:0000:0000"
        assert ctx.query_device().phys_port_cnt == 1
        with pytest.raises(Exception) as e:
            ctx.query_port(2)
        assert e.value.error_code == errno.EINVAL
    with pytest.raises(Exception) as e:
        device.Context(name="mlx5_0")
    assert e.value.error_code == errno.ENODEV


def test_loopback_rc_every_opcode(daemon):
    device, pd_m, mr_m, cq_m, qp_m, addr_m, wr_m = _verbs()
    ctx = device.Context(name="rxe0")
    pd = pd_m.PD(ctx)
    ma, mb = mr_m.MR(pd, 1 << 20, ACC), mr_m.MR(pd, 1 << 20, ACC)
    cqa, cqb = cq_m.CQ(ctx, 64), cq_m.CQ(ctx, 64)
    cap = qp_m.QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=2, max_recv_sge=2, max_inline_data=64)
    qa = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=cqa, rcq=cqa, cap=cap))
    qb = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=cqb, rcq=cqb, cap=cap))
    gid = ctx.query_gid(1, IPV4_GID)
    connect(qp_m, addr_m, qa, qb.qp_num, gid)
    connect(qp_m, addr_m, qb, qa.qp_num, gid)
    assert qa.qp_state == qb.qp_state == IBV_QPS_RTS
    data = os.urandom(200_000)
    ma.write(data, len(data))
    qb.post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(mb.buf, 200_000, mb.lkey)]))
    qa.post_send(wr_m.SendWR(10, IBV_WR_SEND, 1, sg=[wr_m.SGE(ma.buf, 200_000, ma.lkey)]))
    assert [(w.wr_id, w.status) for w in wait(cqa, 1)] == [(10, IBV_WC_SUCCESS)]
    assert [(w.wr_id, w.status, w.byte_len) for w in wait(cqb, 1)] == [(1, IBV_WC_SUCCESS, 200_000)]
    assert mb.read(200_000) == data
    w = wr_m.SendWR(11, IBV_WR_RDMA_WRITE, 1, sg=[wr_m.SGE(ma.buf, 5000, ma.lkey)])
    w.set_wr_rdma(mb.rkey, mb.buf + 300_000)
    r = wr_m.SendWR(12, IBV_WR_RDMA_READ, 1, sg=[wr_m.SGE(ma.buf + 400_000, 5000, ma.lkey)])
    r.set_wr_rdma(mb.rkey, mb.buf + 300_000)
    mb.write((41).to_bytes(8, "little"), 8, 900_000)
    f = wr_m.SendWR(13, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, sg=[wr_m.SGE(ma.buf + 700_000, 8, ma.lkey)])
    f.set_wr_atomic(mb.rkey, mb.buf + 900_000, 1)
    c = wr_m.SendWR(14, IBV_WR_ATOMIC_CMP_AND_SWP, 1, sg=[wr_m.SGE(ma.buf + 700_008, 8, ma.lkey)])
    c.set_wr_atomic(mb.rkey, mb.buf + 900_000, 42, 7)
    for x in (w, r, f, c):
        qa.post_send(x)
    assert [(x.wr_id, x.status) for x in wait(cqa, 4)] == [(i, IBV_WC_SUCCESS) for i in (11, 12, 13, 14)]
    assert mb.read(5000, 300_000) == data[:5000] and ma.read(5000, 400_000) == data[:5000]
    assert ma.read(8, 700_000) == (41).to_bytes(8, "little") and ma.read(8, 700_008) == (42).to_bytes(8, "little")
    assert mb.read(8, 900_000) == (7).to_bytes(8, "little")
    # inline SEND with immediate: ibv_wc.imm_data comes back as the WR carried it
    qb.post_recv(wr_m.RecvWR(2, 1, [wr_m.SGE(mb.buf, 100, mb.lkey)]))
    qa.post_send(wr_m.SendWR(15, IBV_WR_SEND_WITH_IMM, 1, sg=[wr_m.SGE(ma.buf, 10, ma.lkey)], imm_data=0x12345678,
                             send_flags=IBV_SEND_SIGNALED | IBV_SEND_INLINE))
    assert [x.status for x in wait(cqa, 1)] == [IBV_WC_SUCCESS]
    (rx,) = wait(cqb, 1)
    assert (rx.imm_data, rx.wc_flags & IBV_WC_WITH_IMM, rx.byte_len) == (0x12345678, IBV_WC_WITH_IMM, 10)
    # a bad rkey: the spec's NAK and status
    bad = wr_m.SendWR(16, IBV_WR_RDMA_WRITE, 1, sg=[wr_m.SGE(ma.buf, 8, ma.lkey)])
    bad.set_wr_rdma(mb.rkey ^ 0x5500, mb.buf)
    qa.post_send(bad)
    assert [x.status for x in wait(cqa, 1)] == [IBV_WC_REM_ACCESS_ERR]
    ctx.close()


def test_loopback_ud_with_grh(daemon):
    device, pd_m, mr_m, cq_m, qp_m, addr_m, wr_m = _verbs()
    ctx = device.Context(name="rxe0")
    pd = pd_m.PD(ctx)
    mr = mr_m.MR(pd, 65536, ACC)
    cq = cq_m.CQ(ctx, 16)
    attr = qp_m.QPAttr()
    attr.qkey = 0x11111111
    qa = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_UD, scq=cq, rcq=cq, cap=qp_m.QPCap(4, 4)), attr)
    qb = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_UD, scq=cq, rcq=cq, cap=qp_m.QPCap(4, 4)), attr)
    assert qa.qp_state == IBV_QPS_RTS
    ah = addr_m.AH(pd, addr_m.AHAttr(gr=addr_m.GlobalRoute(dgid=ctx.query_gid(1, IPV4_GID), sgid_index=IPV4_GID),
                                     is_global=1))
    mr.write(b"ud payload", 10)
    qb.post_recv(wr_m.RecvWR(5, 1, [wr_m.SGE(mr.buf + 1000, 40 + 64, mr.lkey)]))
    s = wr_m.SendWR(6, IBV_WR_SEND, 1, sg=[wr_m.SGE(mr.buf, 10, mr.lkey)])
    s.set_wr_ud(ah, qb.qp_num, 0x11111111)
    qa.post_send(s)
    wcs = {w.wr_id: w for w in wait(cq, 2)}
    assert wcs[6].status == IBV_WC_SUCCESS
    rx = wcs[5]
    assert (rx.status, rx.byte_len, rx.src_qp, rx.wc_flags & IBV_WC_GRH) == (IBV_WC_SUCCESS, 50, qa.qp_num,
                                                                             IBV_WC_GRH)
    assert mr.read(10, 1040) == b"ud payload"
    assert mr.read(20, 1000) == bytes(20) and mr.read(1, 1020) == b"\x45"        # IPv4 header in the GRH area
    ctx.close()


def test_errors_come_back_as_pyverbs_errors(daemon):
    device, pd_m, mr_m, cq_m, qp_m, addr_m, wr_m = _verbs()
    from softrdma.verbs.errors import PyverbsRDMAError
    ctx = device.Context(name="rxe0")
    pd = pd_m.PD(ctx)
    cq = cq_m.CQ(ctx, 8)
    q = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=cq, rcq=cq))
    a = qp_m.QPAttr(qp_state=IBV_QPS_RTS)
    with pytest.raises(PyverbsRDMAError) as e:               # RESET -> RTS is no transition
        q.modify(a, 1)
    assert e.value.error_code == errno.EINVAL and "Errno: 22" in str(e.value)
    with pytest.raises(PyverbsRDMAError) as e:
        ctx.conn.call("no_such_verb")
    assert e.value.error_code == errno.EOPNOTSUPP
    with pytest.raises(PyverbsRDMAError) as e:
        ctx.conn.call("destroy_qp", qp=12345)
    assert e.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as e:               # CQ in use: the daemon refuses (the kernel's EBUSY)
        ctx.conn.call("destroy_cq", cq=cq.handle)
    assert e.value.error_code == errno.EBUSY
    cq.close()                                              # pyverbs closes the QP using it first
    assert q.closed and cq.closed
    ctx.close()


CHILD = textwrap.dedent("""
    import json, os, sys, time
    from softrdma.verbs import device, pd, mr, cq, qp, addr, wr
    from softrdma.enums import *
    acc = 15
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    m = mr.MR(p, 1 << 20, acc)
    c = cq.CQ(ctx, 64)
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(64, 64)))
    print(json.dumps({"qpn": q.qp_num, "rkey": m.rkey, "addr": m.buf}), flush=True)
    peer = json.loads(sys.stdin.readline())
    a = qp.QPAttr(); a.qp_access_flags = acc; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = peer["qpn"]
    a.max_dest_rd_atomic = a.max_rd_atomic = 1; a.min_rnr_timer = 12; a.timeout = 10; a.retry_cnt = 7; a.rnr_retry = 7
    a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, 1), sgid_index=1), is_global=1)
    q.to_rts(a)
    m.write(bytes(range(256)) * 4096, 1 << 20)
    for i in range(10):
        w = wr.SendWR(i, IBV_WR_RDMA_WRITE, 1, sg=[wr.SGE(m.buf, 1 << 20, m.lkey)])
        w.set_wr_rdma(peer["rkey"], peer["addr"])
        q.post_send(w)
    got = 0
    while got < 10:
        got += c.poll(16)[0]
    print("done", flush=True)
    if len(sys.argv) > 1:
        time.sleep(60)
""")


def _child(env, *args):
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, text=True)


def test_two_processes_rdma_write_and_sigkill_leaves_nothing(daemon):
    device, pd_m, mr_m, cq_m, qp_m, addr_m, wr_m = _verbs()
    ctx = device.Context(name="rxe0")
    pd = pd_m.PD(ctx)
    mr = mr_m.MR(pd, 1 << 20, ACC)
    cq = cq_m.CQ(ctx, 8)
    q = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=cq, rcq=cq, cap=qp_m.QPCap(8, 8)))
    child = _child(daemon.env, "linger")
    info = json.loads(child.stdout.readline())
    connect(qp_m, addr_m, q, info["qpn"], ctx.query_gid(1, IPV4_GID), timeout=10)
    child.stdin.write(json.dumps({"qpn": q.qp_num, "rkey": mr.rkey, "addr": mr.buf}) + "\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done"
    assert mr.read(1 << 20) == bytes(range(256)) * 4096           # written by the other process's QP
    pids = {r["pid"] for r in daemon.resources()}
    assert child.pid in pids
    child.send_signal(signal.SIGKILL)
    child.wait(5)
    end = time.monotonic() + 60
    while child.pid in {r["pid"] for r in daemon.resources()} and time.monotonic() < end:
        time.sleep(0.02)
    assert child.pid not in {r["pid"] for r in daemon.resources()}
    assert {r["kind"] for r in daemon.resources() if r["pid"] == os.getpid()} >= {"qp", "mr", "cq", "pd"}
    ctx.close()
    end = time.monotonic() + 60
    while daemon.resources() and time.monotonic() < end:
        time.sleep(0.02)
    assert daemon.resources() == []


def test_daemon_death_is_device_fatal_not_a_hang(daemon):
    device, pd_m, *_ = _verbs()
    from softrdma.verbs.errors import PyverbsRDMAError
    ctx = device.Context(name="rxe0")
    pd_m.PD(ctx)
    t0 = time.monotonic()
    daemon.stop(signal.SIGKILL)
    with pytest.raises(PyverbsRDMAError) as e:
        pd_m.PD(ctx)
    assert e.value.error_code == errno.EIO            # as after the kernel's disassociate
    ev = ctx.get_async_event(timeout=1)
    assert ev["event"] == IBV_EVENT_DEVICE_FATAL
    assert time.monotonic() - t0 < 1.0


def test_sigterm_removes_socket_and_pid_file(shm_path):
    tmp_path = shm_path
    d = RunningDaemon(str(tmp_path))
    assert d.stop(signal.SIGTERM) == 0
    assert not os.path.exists(tmp_path / "softrdmad.sock") and not os.path.exists(tmp_path / "softrdmad.pid")


def test_embedded_default_starts_a_daemon_once(tmp_path):
    run = shm_dir(f"softrdma-test-{os.getpid()}")
    env = {**os.environ, "SOFTRDMA_RUN": run, "SOFTRDMA_PORT": "0"}     # (never 4791: other daemons may hold it)
    env.pop("SOFTRDMA_AUTOSTART", None)
    prog = ("from softrdma.verbs.device import get_device_list, Context\n"
            "print([d.name.decode() for d in get_device_list()])\n"
            "c = Context(name='rxe0'); print(c.query_port(1).state)\n")
    try:
        out = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["['rxe0']", "4"]
        assert out.stderr.count("started one with rxe0 on lo") == 1
        again = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "started one" not in again.stderr      # the daemon is there now
        env["SOFTRDMA_RUN"] = run + "-off"
        env["SOFTRDMA_AUTOSTART"] = "0"
        off = subprocess.run([sys.executable, "-c", "from softrdma.verbs.device import get_device_list;"
                              "print(get_device_list())"], env=env, capture_output=True, text=True, timeout=60)
        assert off.stdout.strip() == "[]" and not os.path.exists(run + "-off/softrdmad.sock")
    finally:
        from softrdma.device.main import running_pid
        pid = running_pid(run)
        if pid:
            os.kill(pid, signal.SIGTERM)
            end = time.monotonic() + 60
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < end:     # gone, not only its pid file
                time.sleep(0.05)
        subprocess.run(["rm", "-rf", run, run + "-off"])


def test_send_queue_full_is_max_send_wr_outstanding_at_post_time(daemon):
    """A send WQE holds its slot until it completes, as in hardware: with
    max_send_wr=4 WRs in flight (to a QP that never answers), the fifth
    post fails with ENOMEM at once -- not later as a LOC_QP_OP_ERR."""
    device, pd, mr, cq, qp, addr, wr = _verbs()
    from softrdma.verbs.errors import PyverbsRDMAError
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    m = mr.MR(p, 4096, ACC)
    c = cq.CQ(ctx, 16)
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(max_send_wr=4, max_recv_wr=2)))
    connect(qp, addr, q, 0xABCDE, ctx.query_gid(1, IPV4_GID), timeout=12)   # nobody there: no ACK ever
    for i in range(4):
        q.post_send(wr.SendWR(i, IBV_WR_SEND, 1, sg=[wr.SGE(m.buf, 8, m.lkey)]))
    time.sleep(0.05)                                   # the daemon has read all four
    with pytest.raises(PyverbsRDMAError) as e:
        q.post_send(wr.SendWR(4, IBV_WR_SEND, 1, sg=[wr.SGE(m.buf, 8, m.lkey)]))
    assert e.value.error_code == errno.ENOMEM
    assert c.poll(8)[0] == 0                           # nothing failed in the meantime
    # the retries run out (timeout 12 = 16.8 ms x 8 tries): the slots come back
    got = wait(c, 4, timeout=10)
    assert [w.status for w in got][:1] == [IBV_WC_RETRY_EXC_ERR]
    ctx.close()


def test_a_pd_in_use_is_busy_and_closing_it_closes_what_was_made_on_it(daemon):
    """ibv_dealloc_pd of a PD that still has an MR, QP, SRQ or AH fails with
    EBUSY; pyverbs' PD.close() closes them first, so it succeeds and leaves
    nothing behind."""
    device, pd, mr, cq, qp, addr, wr = _verbs()
    from softrdma.verbs import srq as srq_mod
    from softrdma.verbs.errors import PyverbsRDMAError
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    m = mr.MR(p, 4096, ACC)
    c = cq.CQ(ctx, 8)
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(4, 4)))
    s = srq_mod.SRQ(p, srq_mod.SrqInitAttr(srq_mod.SrqAttr(max_wr=4)))
    ah = addr.AH(p, addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, IPV4_GID), sgid_index=IPV4_GID),
                                is_global=1, port_num=1))
    for obj in (s, q, ah, None):                     # busy while any of them is left
        with pytest.raises(PyverbsRDMAError) as e:
            ctx.conn.call("dealloc_pd", pd=p.handle)
        assert e.value.error_code == errno.EBUSY
        if obj is not None:
            obj.close()
    kinds = sorted(r["kind"] for r in daemon.resources())
    assert kinds == ["cq", "mr", "pd"]
    q2 = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(4, 4)))
    p.close()                                        # closes the QP and the MR, then the PD
    assert m.closed and q2.closed
    assert sorted(r["kind"] for r in daemon.resources()) == ["cq"]
    c.close()
    ctx.close()
