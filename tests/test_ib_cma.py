"""rdma_cm on InfiniBand devices, by GID (AF_IB): route resolution through
the subnet administrator's PathRecords (softrdma's SM and the real opensm),
the IB CM over QP1 with LID-routed MADs, RC and UD (SIDR) between two hosts
a switch apart, the errors of no SM and no path, and ``ucmatose``/``udaddy
-f gid`` between the hosts."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from ib_helpers import link, two_hosts
from wait_helpers import stop, wait_for

PROG = os.path.join(os.path.dirname(__file__), "pyverbs_programs", "cm_ib_pingpong.py")


@pytest.fixture(scope="module", params=["softrdma", "opensm"])
def hosts(tmp_path_factory, shm_path_module, request):
    """h1 and h4 (one switch hop apart: sw1 - sw2), swept by softrdma's SM or by the real opensm."""
    h = two_hosts(tmp_path_factory, shm_path_module, request.param, "ibcma")
    yield h
    h.close()


def gid0(h, host: str) -> str:
    """The host's port GID 0, written as an IPv6 address."""
    import ipaddress
    return str(ipaddress.IPv6Address(bytes.fromhex(link(h.run_dir(host), "mlx5_0")["gids"][0])))


def pyverbs_env(h, host: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "softrdma", "pyverbs-path"], capture_output=True, text=True,
                         check=True).stdout.strip()
    d = h.daemons[host]
    return {**d.env, "PYTHONPATH": out + os.pathsep + d.env.get("PYTHONPATH", ""), "SOFTRDMA_AUTOSTART": "0"}


def peer(h, host: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, PROG, *args], env=pyverbs_env(h, host), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def run_pair(h, port: int, mode: str, n: int = 4):
    srv = peer(h, "h1", "server", gid0(h, "h1"), str(port), mode, str(n))
    try:
        wait_for(lambda: srv.poll() is not None or "listening" in (srv.stdout.readline() or ""), 60, "the server",
                 proc=srv)
        cli = subprocess.run([sys.executable, PROG, "client", gid0(h, "h1"), str(port), mode, str(n)],
                             env=pyverbs_env(h, "h4"), capture_output=True, text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    return cli, sout


def test_rc_by_gid_across_a_switch_hop(hosts):
    cli, sout = run_pair(hosts, 7800, "rc")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "ROUTE_RESOLVED" in cli.stdout and "established b'welcome'" in cli.stdout, cli.stdout
    # the QP's path is the SA's: LID-routed to h1's LID, no GRH (HopLimit 0 within the subnet)
    assert f"qp dlid {hosts.lid['h1']} global 0" in cli.stdout, cli.stdout
    assert "data ok 4" in cli.stdout and "disconnected" in cli.stdout
    assert "request b'hello'" in sout and "data ok 4" in sout and "disconnected" in sout, sout


def test_ud_by_gid_sidr_across_a_switch_hop(hosts):
    cli, sout = run_pair(hosts, 7801, "ud")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    # SIDR_REP's Q_Key (RDMA_PS_UDP's), the address handle of the SA's path
    assert f"sidr qkey 0x1234567 dlid {hosts.lid['h1']} global 0" in cli.stdout, cli.stdout
    assert "data ok 4" in cli.stdout
    assert "accepted" in sout and f"data ok 4 from lid {hosts.lid['h4']}" in sout, sout


def client(h, gid: str, mode: str = "route", timeout_ms: int = 2000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, PROG, "client", gid, "7802", mode, "1", str(timeout_ms)],
                          env=pyverbs_env(h, "h4"), capture_output=True, text=True, timeout=120)


def test_connect_to_no_listener_is_rejected_over_lids(hosts):
    """The passive CM answers a REQ for no listener with a REJ to the REQ's
    SLID (invalid service ID, 8): REJECTED with that reason."""
    r = client(hosts, gid0(hosts, "h1"), "nolisten")
    assert r.returncode == 0 and "RDMA_CM_EVENT_REJECTED 8" in r.stdout, r.stdout + r.stderr


def test_route_errors_as_the_kernel_gives_them(hosts):
    import ipaddress
    g = ipaddress.IPv6Address(gid0(hosts, "h1")).packed
    # a GID of the subnet that no port has: the SA has no path -> ROUTE_ERROR -EINVAL
    nobody = str(ipaddress.IPv6Address(g[:8] + bytes.fromhex("00000000deadbeef")))
    r = client(hosts, nobody)
    assert r.returncode == 0 and f"RDMA_CM_EVENT_ROUTE_ERROR {-errno.EINVAL}" in r.stdout, r.stdout + r.stderr
    # a GID of another subnet: no IB port reaches it -> rdma_resolve_addr fails ENODEV
    r = client(hosts, "fe90::1")
    assert r.returncode != 0 and "Failed to Resolve Address" in r.stdout + r.stderr, r.stdout + r.stderr
    assert f"Errno: {errno.ENODEV}" in r.stdout + r.stderr or "No such device" in r.stdout + r.stderr


PORT_ARGS = {"ucmatose": ("-p", "7810"), "udaddy": ()}        # (udaddy's -p is the port space; its port is 7174)


@pytest.mark.parametrize("tool", ["ucmatose", "udaddy"])
def test_tool_f_gid_between_two_hosts(hosts, tool):
    g = gid0(hosts, "h1")
    s, c = hosts.daemons["h1"], hosts.daemons["h4"]
    env_s, env_c = {**s.env, "SOFTRDMA_AUTOSTART": "0"}, {**c.env, "SOFTRDMA_AUTOSTART": "0"}
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", tool, "-f", "gid", "-b", g, *PORT_ARGS[tool],
                            "-C", "3"], env=env_s, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(i.get("state") == 8 for i in cm_ids(s.run_dir)), 60, f"{tool} to listen", proc=srv)
        cli = subprocess.run([sys.executable, "-m", "softrdma", tool, "-f", "gid", "-s", g, *PORT_ARGS[tool],
                              "-C", "3"], env=env_c, capture_output=True, text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert cli.stdout == CLIENT_OUT[tool], cli.stdout
    assert srv.returncode == 0 and sout.endswith("data transfers complete\n" + SERVER_TAIL[tool]), sout


# the examples' own lines (cmatose.c's messages say "cmatose")
CLIENT_OUT = {
    "ucmatose": "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n"
                "data transfers complete\ntest complete\nreturn status 0\n",
    "udaddy": "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n"
              "data transfers complete\ntest complete\nreturn status 0\n"}
SERVER_TAIL = {"ucmatose": "cmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
               "udaddy": "test complete\nreturn status 0\n"}


def cm_ids(run_dir: str) -> list:
    from ib_helpers import control
    r = control(run_dir, "resources")
    return [o for o in r.get("resources", []) if o.get("kind") == "cm_id"]


def test_zz_no_sm_the_route_query_times_out(hosts):
    """Last in the module: the SM goes; the ports keep their LIDs and SM LID,
    and the SA query gets no answer -> ROUTE_ERROR -ETIMEDOUT."""
    stop(hosts.fabric.sm)
    r = client(hosts, gid0(hosts, "h1"), timeout_ms=500)
    assert r.returncode == 0 and f"RDMA_CM_EVENT_ROUTE_ERROR {-errno.ETIMEDOUT}" in r.stdout, r.stdout + r.stderr


# --- the IB CM over LIDs, sans I/O: what goes where, what the QP is told ----------------------

def test_cm_over_lids_answers_the_slid_and_gives_the_path_to_the_qp():
    """Two CM agents on IB ports (LIDs 3 and 6, the REQ's path at SL 2):
    every MAD of the active side goes to the path's DLID, every answer of
    the passive side to the SLID it came from (cm_init_av_for_response),
    LID-routed MADs carry no GID (the REQ names its sender's), and the QPs'
    RTR address vectors are LID-routed with no GRH."""
    import random

    from softrdma.mgmt.cm.agent import CmAgent
    from softrdma.mgmt.cm.ids import CmEventType, CmState
    from softrdma.mgmt.cm.request import AcceptParams, ConnectParams
    from softrdma.mgmt.cm.sidr import SidrStatus
    from softrdma.wire.cm import decode

    ga, gb = bytes.fromhex("fe800000000000000000000000100001"), bytes.fromhex("fe800000000000000000000000100007")
    a = CmAgent(0x100000, ga, rng=random.Random(1), hi_tid=1)
    b = CmAgent(0x100006, gb, rng=random.Random(2), hi_tid=2)
    lids, sent = {id(a): 3, id(b): 6}, []

    def run():
        while a.mads or b.mads:
            for src, dst in ((a, b), (b, a)):
                mads, src.mads = src.mads, []
                for m in mads:
                    assert m.dlid == lids[id(dst)] and m.sl == 2, (m.attr, m.dlid, m.sl)
                    sent.append(m.attr)
                    dst.receive(m.data, b"", 0.0, src_lid=lids[id(src)], sl=2)

    b.listen(0x1060000 | 7471)
    a_id = a.connect(ConnectParams(service_id=0x1060000 | 7471, dest_gid=gb, qp_num=0x11, sl=2, dlid=6, slid=3,
                                   hop_limit=0, packet_rate=3, subnet_local=1), now=0.0)
    req = decode(a.mads[0].data)
    assert (req["primary_local_port_lid"], req["primary_remote_port_lid"], req["primary_sl"]) == (3, 6, 2)
    assert (req["primary_subnet_local"], req["primary_packet_rate"]) == (1, 3)
    run()
    ev = b.events.pop()
    b_id = ev.cm_id
    assert ev.type == CmEventType.REQ_RECEIVED and b_id.remote_gid == ga and b_id.remote_lid == 3
    b.accept(b_id, AcceptParams(qp_num=0x22), now=0.0)
    run()
    a.send_rtu(a_id)
    run()
    assert a_id.state == b_id.state == CmState.ESTABLISHED and sent == ["REQ", "REP", "RTU"]
    for agent, cm_id, dlid in ((a, a_id, 6), (b, b_id, 3)):
        ah = agent.qp_attrs(cm_id, "RTR")["ah_attr"]
        assert (ah["dlid"], ah["sl"], ah["is_global"], ah["static_rate"]) == (dlid, 2, False, 3), ah
    a.disconnect(a_id, now=0.0)
    run()
    assert b.events.pop().type == CmEventType.DREQ_RECEIVED
    b.send_drep(b_id, now=0.0)
    run()
    assert sent[-2:] == ["DREQ", "DREP"] and a.events.pop().type == CmEventType.DREP_RECEIVED
    # SIDR: the request to the path's DLID, the reply to the SLID
    b.listen(0x1110000 | 7174)
    s_id = a.sidr_request(0x1110000 | 7174, gb, dlid=6, sl=2, now=0.0)
    run()
    ev = b.events.pop()
    assert ev.type == CmEventType.SIDR_REQ_RECEIVED and ev.cm_id.remote_lid == 3
    b.sidr_reply(ev.cm_id, SidrStatus.SUCCESS, qp_num=0x33, qkey=0x1234567, now=0.0)
    run()
    ev = a.events.pop()
    assert ev.type == CmEventType.SIDR_REP_RECEIVED and ev.cm_id is s_id and ev.msg["qpn"] == 0x33


def test_ipoib_hook_resolves_an_ip_onto_an_ib_device():
    """The one place IPoIB plugs in: with ``daemon.ipoib`` answering (device,
    source address, destination GID), an IP destination resolves onto the IB
    device, its GIDs from the port and from IPoIB's neighbour; without it the
    IB-only host's ADDR_ERROR -ENODEV stands (tests/test_ib_cm.py)."""
    import ipaddress
    import types

    from softrdma.device.rdma_cm import RdmaCm
    from softrdma.enums import rdma_cm_event_type

    gid_local, gid_peer = bytes.fromhex("fe800000000000000000000000100001"), bytes.fromhex(
        "fe800000000000000000000000100007")
    dev = types.SimpleNamespace(name="mlx5_0", link_layer=1, caps=types.SimpleNamespace(active_mtu=4),
                                gid=lambda i: gid_local if i == 0 else None)
    asked = []

    class Ipoib:
        def resolve(self, src, dst, waiter=None):
            asked.append((src, dst))
            return dev, ipaddress.ip_address("10.9.0.1"), gid_peer

    daemon = types.SimpleNamespace(devices={"mlx5_0": dev}, ipoib=Ipoib(), by_ip={})
    client = types.SimpleNamespace(uid=0, add=lambda kind, obj: 1)
    cm = RdmaCm(daemon)
    cid = cm.create_id(client, 0x106, "RC")
    cm.resolve_addr(cid, None, "10.9.0.2", 7471)
    assert asked == [(None, ipaddress.ip_address("10.9.0.2"))]
    assert cid.dev is dev and (cid.sgid, cid.dgid) == (gid_local, gid_peer) and str(cid.src_ip) == "10.9.0.1"
    assert [r["type"] for _, r in cm.outq] == [int(rdma_cm_event_type.RDMA_CM_EVENT_ADDR_RESOLVED)]
