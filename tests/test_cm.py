"""rdma_cm end to end: QP1 in the daemon, the IB CM on the wire, the
pyverbs.cmid API in both roles, across processes and namespaces."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from daemon_helpers import daemon_in_shm
from netns_helpers import TwoHosts, need_root
from softrdma.device.core import Device
from softrdma.runner import shim_path
from softrdma.wire.mad import IB_QP1_QKEY, MgmtClass, Method, build_mad
from wait_helpers import free_port, wait_for, wait_line
from softrdma.wire.packet import build

PROG = os.path.join(os.path.dirname(__file__), "pyverbs_programs", "cm_pingpong.py")


def _env(d, **kw):
    env = dict(d.env, PYTHONPATH=shim_path() + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SOFTRDMA_AUTOSTART="0")
    env.update(kw)
    return env


def _pair(env, mode, port, addr="127.0.0.1", server_env=None, client_env=None, n=3, popen=None):
    popen = popen or (lambda i, args, **kw: subprocess.Popen(args, env=(server_env if i == 0 else client_env)
                                                             or env, **kw))
    srv = popen(0, [sys.executable, PROG, "server", addr, str(port), mode, str(n)], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)
    _, lines = wait_line(srv.stdout, "listening", proc=srv)
    line = "".join(lines)
    cli = popen(1, [sys.executable, PROG, "client", addr, str(port), mode, str(n)], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)
    cout, _ = cli.communicate(timeout=60)
    sout, _ = srv.communicate(timeout=60)
    return cli.returncode, cout, srv.returncode, line + sout


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("cm") as d:
        yield d


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_rc_connect_traffic_disconnect(daemon, mode):
    crc, cout, src, sout = _pair(_env(daemon), mode, free_port())
    assert crc == 0 and src == 0, cout + sout
    assert "pong PING 2" in cout
    if mode == "async":
        assert "established b'welcome'" in cout          # the REP's private data
        assert "request private data b'hello'" in sout   # the REQ's, after the cma_hdr
        assert "disconnected" in cout and "disconnected" in sout


def test_reject_with_private_data(daemon):
    crc, cout, src, sout = _pair(_env(daemon), "reject", free_port())
    assert crc == 0 and src == 0, cout + sout
    # IB_CM_REJ_CONSUMER_DEFINED (28) and the REJ's private data
    assert "RDMA_CM_EVENT_REJECTED 28 b'go away'" in cout


def test_ud_sidr_and_datagrams(daemon):
    crc, cout, src, sout = _pair(_env(daemon), "ud", free_port())
    assert crc == 0 and src == 0, cout + sout
    assert "resolved qkey 0x1234567" in cout             # RDMA_UDP_QKEY via SIDR_REP
    assert sout.count("got b'dg") == 3


def test_multicast_join(daemon):
    r = subprocess.run([sys.executable, PROG, "client", "239.1.2.3", "0", "mcast", "1", "127.0.0.1"],
                       env=_env(daemon), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "joined True 0x1234567" in r.stdout


def _cm_counters(d) -> dict:
    base = os.path.join(d.run_dir, "sys", "class", "infiniband_cm", "rxe0", "1")
    out = {}
    for g in ("cm_tx_msgs", "cm_rx_msgs", "cm_tx_retries", "cm_rx_duplicates"):
        out[g] = {n: int(open(os.path.join(base, g, n)).read()) for n in os.listdir(os.path.join(base, g))}
    return out


def test_cm_counters_in_sysfs(daemon):
    # the files are rewritten once a second: wait until they show the earlier tests' exchanges
    c = wait_for(lambda: (lambda c: c["cm_tx_msgs"]["sidr_rep"] >= 1 and c)(_cm_counters(daemon)),
                 what="the CM counters in sysfs")
    assert set(c["cm_tx_msgs"]) == {"req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep",
                                    "lap", "apr"}
    # one daemon, both ends: every REQ sent was received, and so on
    assert c["cm_tx_msgs"]["req"] >= 3 and c["cm_rx_msgs"]["req"] == c["cm_tx_msgs"]["req"]
    assert c["cm_tx_msgs"]["rep"] >= 2 and c["cm_tx_msgs"]["rtu"] >= 2
    assert c["cm_tx_msgs"]["rej"] >= 1 and c["cm_tx_msgs"]["sidr_rep"] >= 1


def test_no_listener_is_rejected_invalid_service_id(daemon):
    from softrdma.verbs.cm import CmId, EventChannel
    os.environ["SOFTRDMA_RUN"] = daemon.run_dir
    ch = EventChannel()
    cid = CmId(ch)
    cid.resolve_addr(None, "127.0.0.1", 7699)
    assert ch.get_event(60).event_str == "RDMA_CM_EVENT_ADDR_RESOLVED"
    cid.resolve_route()
    assert ch.get_event(60).event_str == "RDMA_CM_EVENT_ROUTE_RESOLVED"
    cid.connect({"private_data": b"x"})
    ev = ch.get_event(60)
    assert ev.event_str == "RDMA_CM_EVENT_REJECTED" and ev.status == 8      # IB_CM_REJ_INVALID_SERVICE_ID
    cid.destroy()
    ch.close()


def test_hundred_connections(daemon):
    from softrdma.verbs.cm import CmId, EventChannel
    from softrdma.verbs.qp import QPCap, QPInitAttr
    os.environ["SOFTRDMA_RUN"] = daemon.run_dir
    sch, cch = EventChannel(), EventChannel()
    listen = CmId(sch)
    listen.bind_addr("127.0.0.1", 7650)
    listen.listen(200)
    clients = []
    for i in range(100):
        c = CmId(cch)
        c.resolve_addr(None, "127.0.0.1", 7650)
        clients.append(c)
    evs = [cch.get_event(60) for _ in range(100)]
    assert all(e.event_str == "RDMA_CM_EVENT_ADDR_RESOLVED" for e in evs)
    for c in clients:
        c.resolve_route()
    assert all(cch.get_event(60).event_str == "RDMA_CM_EVENT_ROUTE_RESOLVED" for _ in range(100))
    for c in clients:
        c.create_qp(QPInitAttr(qp_type=2, cap=QPCap(1, 1)))
        c.connect()
    accepted = []
    established = 0
    while len(accepted) < 100:
        ev = sch.get_event(60)
        assert ev.event_str == "RDMA_CM_EVENT_CONNECT_REQUEST", ev.event_str
        ev.id.create_qp(QPInitAttr(qp_type=2, cap=QPCap(1, 1)))
        ev.id.accept()
        accepted.append(ev.id)
    while established < 100:
        assert cch.get_event(60).event_str == "RDMA_CM_EVENT_ESTABLISHED"
        established += 1
    n = sum(1 for _ in range(100) if sch.get_event(60).event_str == "RDMA_CM_EVENT_ESTABLISHED")
    assert n == 100
    qpns = {c.qp.qp_num for c in clients}
    peers = {a.qp.query(0x1fffff)[0].dest_qp_num for a in accepted}
    assert peers == qpns
    for c in clients:
        c.destroy()
    for a in accepted:
        a.destroy()
    listen.destroy()
    sch.close()
    cch.close()


def test_unreachable_after_req_retries():
    """REQ retries, then RDMA_CM_EVENT_UNREACHABLE with -ETIMEDOUT (a peer
    whose daemon is gone: nothing answers on its address)."""
    from softrdma.verbs.cm import CmId, EventChannel
    env = {"SOFTRDMA_CMA_RESPONSE_TIMEOUT": "8", "SOFTRDMA_CMA_MAX_RETRIES": "2"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with daemon_in_shm("cm-unreach", devices=("rxe0:lo",)) as d:
            os.environ["SOFTRDMA_RUN"] = d.run_dir
            ch = EventChannel()
            cid = CmId(ch)
            cid.resolve_addr(None, "127.0.0.2", 7660)       # lo, but no device there: nobody answers
            ev = ch.get_event(60)
            assert ev.event_str == "RDMA_CM_EVENT_ADDR_RESOLVED", (ev.event_str, ev.status)
            cid.resolve_route()
            ch.get_event(60)
            t0 = time.monotonic()
            cid.connect()
            ev = ch.get_event(30)
            assert ev.event_str == "RDMA_CM_EVENT_UNREACHABLE" and ev.status == -110
            assert time.monotonic() - t0 > 1.0              # 3 sends, 0.5 s apart at least
            # the files are rewritten once a second; no REQ is sent after UNREACHABLE
            assert wait_for(lambda: _cm_counters(d)["cm_tx_retries"]["req"], what="the retry counter") == 2
            cid.destroy()
            ch.close()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_killed_server_leaves_nothing(daemon):
    """A server killed after the CONNECT_REQUEST: the client is rejected and
    the daemon keeps no ID of the dead process."""
    env = _env(daemon)
    srv = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from softrdma.verbs.cm import CmId, EventChannel
ch = EventChannel(); l = CmId(ch); l.bind_addr('127.0.0.1', 7670); l.listen()
print('listening', flush=True)
ev = ch.get_event(60); print('request', flush=True); time.sleep(60)
"""], env=env, stdout=subprocess.PIPE, text=True)
    assert "listening" in srv.stdout.readline()
    from softrdma.verbs.cm import CmId, EventChannel
    os.environ["SOFTRDMA_RUN"] = daemon.run_dir
    ch = EventChannel()
    cid = CmId(ch)
    cid.resolve_addr(None, "127.0.0.1", 7670)
    ch.get_event(60)
    cid.resolve_route()
    ch.get_event(60)
    cid.connect()
    assert "request" in srv.stdout.readline()
    srv.send_signal(signal.SIGKILL)
    srv.wait(10)
    ev = ch.get_event(60)
    assert ev.event_str == "RDMA_CM_EVENT_REJECTED", ev.event_str
    left = [r for r in daemon.resources() if r["pid"] == srv.pid]
    assert left == []
    cid.destroy()
    ch.close()


def _roce_to_qp1(flow, payload: bytes, qkey: int = IB_QP1_QKEY) -> bytes:
    from softrdma.wire.icrc import ICRC
    pkt = build(0x64, 1, 0, payload, deth=(qkey, 1))
    return bytes(pkt) + ICRC.pack(flow.icrc(pkt))


def test_malformed_mads_dropped_and_counted():
    """Garbage to QP1 over the real socket: dropped and counted, the CM
    still works afterwards."""
    import random
    port = free_port("udp")                               # never a fixed one: another test run may use it
    with daemon_in_shm("cm-fuzz", port=port) as d:
        from softrdma.wire.icrc import Ipv4Flow
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        lo = socket.inet_aton("127.0.0.1")
        flow = Ipv4Flow(lo, lo, s.getsockname()[1], port)
        rng = random.Random(7)
        dst = ("127.0.0.1", port)
        good_get = build_mad(MgmtClass.PERF_MGMT, 1, Method.GET, 0x12, tid=77)
        sent = {"qkey": 0, "length": 0, "mad": 0}
        for i in range(300):
            kind = i % 3
            if kind == 0:
                s.sendto(_roce_to_qp1(flow, bytes(good_get), qkey=0x1234), dst)
                sent["qkey"] += 1
            elif kind == 1:
                s.sendto(_roce_to_qp1(flow, rng.randbytes(rng.choice((16, 100, 252)))), dst)
                sent["length"] += 1
            else:
                bad = bytearray(rng.randbytes(256))
                bad[0] = 0x55                                   # base version
                s.sendto(_roce_to_qp1(flow, bytes(bad)), dst)
                sent["mad"] += 1
        # random CM MADs (class 7, version 2, method Send): decode refuses or the CM ignores them
        for i in range(300):
            m = bytearray(rng.randbytes(256))
            m[0:4] = b"\x01\x07\x02\x03"
            m[16:18] = rng.choice((b"\x00\x10", b"\x00\x13", b"\x00\x15", b"\x00\x17", b"\x00\x99"))
            s.sendto(_roce_to_qp1(flow, bytes(m)), dst)
        s.close()
        g = wait_for(lambda: (lambda g: all(g["rx_dropped"][k] >= n for k, n in sent.items()) and g)(
            _links(d)["gsi"]), what="the daemon to count every bad MAD")
        assert g["rx_dropped"]["qkey"] == sent["qkey"]
        assert g["rx_dropped"]["length"] == sent["length"]
        assert g["rx_dropped"]["mad"] == sent["mad"]
        crc, cout, src, sout = _pair(_env(d), "async", free_port())
        assert crc == 0 and src == 0, cout + sout


def test_unmatched_get_answered_unsupported():
    """A Get for a class no agent serves gets GetResp with status
    UNSUPPORTED_METHOD_ATTRIB (the MAD layer's generate_unmatched_resp)."""
    dev = Device("t0", "lo", ["127.0.0.1"], bind=False)
    try:
        mad = build_mad(MgmtClass.PERF_MGMT, 1, Method.GET, 0x12, tid=99)
        pkt = build(0x64, 1, 5, bytes(mad), deth=(IB_QP1_QKEY, 1))
        dev.gsi.receive(pkt, bytes([127, 0, 0, 2]), bytes([127, 0, 0, 1]), 0.0)
        assert len(dev.tx) == 1
        _, out, av = dev.tx[0]
        resp = bytes(out)[12 + 8:]
        assert resp[3] == 0x81 and resp[4:6] == b"\x00\x0c" and resp[8:16] == (99).to_bytes(8, "big")
        assert av.dgid == bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 2])
        # a response matches its request by TID; no response: done(None) after the retries
        got = []
        dev.gsi.request(bytes(mad), av.dgid, got.append, now=0.0, timeout_ms=10, retries=1)
        dev.gsi.tick(0.011)
        dev.gsi.tick(0.022)
        assert got == [None] and dev.gsi.counters["tx_retries"] == 1
        dev.gsi.request(bytes(mad), av.dgid, got.append, now=1.0, timeout_ms=10, retries=1)
        dev.gsi.receive(out, bytes([127, 0, 0, 2]), bytes([127, 0, 0, 1]), 1.001)
        assert got[1] is not None and got[1][8:16] == (99).to_bytes(8, "big")
    finally:
        dev.close()


def _links(d) -> dict:
    from softrdma.uapi.control import recv_msg, send_msg
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.path.join(d.run_dir, "softrdmad.sock"))
    send_msg(s, {"op": "links", "seq": 1})
    msg, _ = recv_msg(s)
    s.close()
    return msg["links"][0]


def test_across_namespaces():
    """Two hosts, two daemons: RC (async API) and UD (SIDR) over real UDP."""
    need_root()
    h = TwoHosts()
    try:
        h.start_daemons()
        env = {**os.environ, "PYTHONPATH": shim_path() + os.pathsep + os.environ.get("PYTHONPATH", "")}

        def popen(i, args, **kw):
            return h.popen(i, ["env", f"PYTHONPATH={env['PYTHONPATH']}", *args], **kw)
        for mode in ("async", "ud", "sync"):
            crc, cout, src, sout = _pair(None, mode, free_port(), addr=h.ip[0], popen=popen)
            assert crc == 0 and src == 0, (mode, cout, sout)
    finally:
        h.close()


def test_rdma_resource_show_cm_id(daemon):
    """iproute2's fields for a listening and a connected rdma_cm ID."""
    from softrdma.verbs.cm import CmId, EventChannel
    os.environ["SOFTRDMA_RUN"] = daemon.run_dir
    ch = EventChannel()
    listen = CmId(ch)
    listen.bind_addr("127.0.0.1", 7690)
    listen.listen()
    unbound = CmId(ch)                       # no device yet: not listed, as in the kernel
    env = _env(daemon)
    r = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "resource", "show", "cm_id"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "src-addr 127.0.0.1:7690" in ln]
    assert len(lines) == 1, r.stdout
    assert lines[0].startswith("link rxe0/1 state LISTEN ps TCP pid ")
    assert "dst-addr 0.0.0.0:0" in lines[0] and "cm-idn " in lines[0]
    r = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "res"], env=env, capture_output=True,
                       text=True, timeout=30)
    assert "cm_id 1 " in r.stdout or "cm_id 1" in r.stdout.split("mr")[0], r.stdout
    unbound.destroy()
    listen.destroy()
    ch.close()


def test_ack_timeout_option_reaches_rts(daemon):
    """RDMA_OPTION_ID_ACK_TIMEOUT overrides the CM's local ACK timeout in
    init_qp_attr (rdma_init_qp_attr's timeout_set)."""
    from softrdma.verbs.cm import CmId, EventChannel
    from softrdma.verbs.qp import QPCap, QPInitAttr
    os.environ["SOFTRDMA_RUN"] = daemon.run_dir
    sch, cch = EventChannel(), EventChannel()
    listen = CmId(sch)
    listen.bind_addr("127.0.0.1", 7695)
    listen.listen()
    c = CmId(cch)
    c.resolve_addr(None, "127.0.0.1", 7695)
    cch.get_event(60)
    c.set_option("ack_timeout", 19)
    c.resolve_route()
    cch.get_event(60)
    c.create_qp(QPInitAttr(qp_type=2, cap=QPCap(1, 1)))
    c.connect()
    ev = sch.get_event(60)
    ev.id.create_qp(QPInitAttr(qp_type=2, cap=QPCap(1, 1)))
    ev.id.accept()
    assert cch.get_event(60).event_str == "RDMA_CM_EVENT_ESTABLISHED"
    assert c.qp.query(0x1fffff)[0].timeout == 19
    for x in (c, ev.id, listen):
        x.destroy()
    sch.close()
    cch.close()


PROG2 = os.path.join(os.path.dirname(__file__), "pyverbs_programs", "cm_rdma_mcast.py")


def test_rdma_read_write_helpers(daemon):
    """CMID.post_read/post_write (rdma_post_read/write) with the peer's
    address and rkey from the REP's private data."""
    env = _env(daemon)
    srv = subprocess.Popen([sys.executable, PROG2, "rdma", "server", "127.0.0.1", "7710"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert "listening" in srv.stdout.readline()
    cli = subprocess.run([sys.executable, PROG2, "rdma", "client", "127.0.0.1", "7710"], env=env,
                         capture_output=True, text=True, timeout=60)
    sout, _ = srv.communicate(timeout=60)
    assert cli.returncode == 0 and srv.returncode == 0, cli.stdout + cli.stderr + sout
    assert "read: b'server data'" in cli.stdout
    assert "buffer: b'client wrote'" in sout


def test_multicast_join_and_traffic(daemon):
    """Two rdma_cm IDs join one group (RDMA_PS_UDP); a datagram sent with
    the join event's address reaches the other member's QP."""
    env = _env(daemon)
    rcv = subprocess.Popen([sys.executable, PROG2, "mcast", "receiver", "239.7.7.7", "127.0.0.1"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert "ready" in rcv.stdout.readline()
    snd = subprocess.run([sys.executable, PROG2, "mcast", "sender", "239.7.7.7", "127.0.0.1"], env=env,
                         capture_output=True, text=True, timeout=60)
    rout, _ = rcv.communicate(timeout=30)
    assert snd.returncode == 0, snd.stdout + snd.stderr
    assert rcv.returncode == 0 and "got: b'to a group'" in rout, rout
