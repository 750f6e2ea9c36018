"""A 2-port HCA on two subnets: one topology whose CA ``h1`` has port 1 on
switch ``swa`` (with host h2) and port 2 on switch ``swb`` (with host h3),
the two switches not linked -- two disjoint subnets.  h1's daemon holds
``mlx5_0`` with both ports (``rdma link add mlx5_0/2 ...``); one
``softrdma opensm`` per port, bound by the port GUID ``ibstat -p`` lists
(the usual per-port script); each port gets its LID from its own SM, and
RC and UD traffic flows byte-exact on each port to the host of its subnet."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys

import pytest

from daemon_helpers import softrdma_run
from ib_helpers import IbHosts, add_ib, control, link
from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_QPT_RC
from sm_helpers import have_ibsim
from wait_helpers import free_port, stop, wait_for, wait_listening

NET_TWO_SUBNETS = """\
Switch 4 "swa"
[1] "h1"[1]
[2] "h2"[1]
Switch 4 "swb"
[1] "h1"[2]
[2] "h3"[1]
Ca 2 "h1"
[1] "swa"[1]
[2] "swb"[1]
Ca 1 "h2"
[1] "swa"[2]
Ca 1 "h3"
[1] "swb"[2]
"""


def tool(d, *args, timeout=120):
    r = subprocess.run([sys.executable, "-m", "softrdma", *args], env=d.env, capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def port_of(d, num: int) -> dict:
    return next(p for p in link(d.run_dir, "mlx5_0")["ports"] if p["port"] == num)


@pytest.fixture(scope="module")
def two(tmp_path_factory, shm_path_module):
    """The fabric, the three hosts (h1 with mlx5_0/1 on h1 port 1 and
    mlx5_0/2 on h1 port 2), and one SM per port of h1 bound by GUID."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    tmp = tmp_path_factory.mktemp("ib2port")
    hosts = IbHosts(tmp, shm_path_module, NET_TWO_SUBNETS, ("h1", "h2", "h3"), sm=None)
    try:
        d1 = hosts.daemons["h1"]
        r = add_ib(d1.run_dir, "mlx5_0/2", hosts.fabric.base, "h1", port=2)
        assert r["errno"] == 0, r
        rc, out, err = tool(d1, "ibstat", "-p", "mlx5_0")      # (the daemon's rxe0 has a port GUID too)
        assert rc == 0, err
        guids = out.split()
        hosts.guids = guids
        hosts.sms = []
        # the seed's per-port script: one SM per port GUID of the host
        for i, guid in enumerate(guids):
            log = tmp / f"osm-{guid}.log"
            env = {k: v for k, v in d1.env.items() if not k.startswith(("IBSIM_", "SIM_"))}
            env.update(OSM_CACHE_DIR=str(tmp / guid), OSM_TMP_DIR=str(tmp / guid))
            p = subprocess.Popen([sys.executable, "-m", "softrdma", "opensm", "-g", guid, "-p", str(10 + i),
                                  "-s", "1", "-f", str(log)], env=env, stdout=open(tmp / f"sm-{guid}.out", "w"),
                                 stderr=subprocess.STDOUT)
            hosts.fabric.procs.append(p)
            hosts.sms.append((p, log))
        for p, log in hosts.sms:
            wait_for(lambda: log.exists() and "SUBNET UP" in log.read_text(), 90, "SUBNET UP", proc=p)
        wait_for(lambda: all(port_of(d1, n)["port_attr"]["state"] == 4 for n in (1, 2)), 60, "h1's ports Active")
        hosts.lid = {h: hosts.fabric.wait_active(d.run_dir) for h, d in hosts.daemons.items() if h != "h1"}
        hosts.lid["h1/1"] = port_of(d1, 1)["port_attr"]["lid"]
        hosts.lid["h1/2"] = port_of(d1, 2)["port_attr"]["lid"]
    except BaseException:
        hosts.close()
        raise
    yield hosts
    hosts.close()


def test_two_ports_two_subnets_each_with_its_own_sm(two):
    d1, d2, d3 = (two.daemons[h] for h in ("h1", "h2", "h3"))
    g1, g2 = (int(g, 16) for g in two.guids)
    assert len(two.guids) == 2 and g1 != g2
    p1, p2 = port_of(d1, 1), port_of(d1, 2)
    assert int(p1["ib"]["port_guid"].replace(":", ""), 16) == g1
    assert int(p2["ib"]["port_guid"].replace(":", ""), 16) == g2
    assert p2["ib"]["ca_port"] == 2 and link(d1.run_dir, "mlx5_0")["num_ports"] == 2
    # each subnet's hosts have the SM of h1's port on that subnet as their SM
    lid1, lid2 = two.lid["h1/1"], two.lid["h1/2"]
    assert lid1 and lid2
    assert p1["port_attr"]["sm_lid"] == lid1 and p2["port_attr"]["sm_lid"] == lid2
    assert link(d2.run_dir, "mlx5_0")["port_attr"]["sm_lid"] == lid1
    assert link(d3.run_dir, "mlx5_0")["port_attr"]["sm_lid"] == lid2
    for (p, log), guid in zip(two.sms, two.guids):
        assert "SUBNET UP" in log.read_text() and p.poll() is None
    # each SM swept only its own subnet: its port holds IsSM, the hosts are Active
    assert p1["ib"]["umad_files"] == 1 and p2["ib"]["umad_files"] == 1
    # ibstat: both ports, the CA's port count, and one port alone
    rc, out, err = tool(d1, "ibstat", "mlx5_0")
    assert rc == 0, err
    assert "\tNumber of ports: 2\n" in out and "\tPort 1:\n" in out and "\tPort 2:\n" in out, out
    rc, out, err = tool(d1, "ibstat", "mlx5_0", "2")
    assert rc == 0, err
    assert (f"Port 2:\nState: Active\nPhysical state: LinkUp\n" in out and f"Base lid: {lid2}\n" in out
            and f"SM lid: {lid2}\n" in out and f"Port GUID: 0x{g2:016x}\n" in out), out
    rc, out, err = tool(d1, "ibstat", "mlx5_0", "3")
    assert rc == 255 and "has no port number 3 - max (2)" in err, out + err
    # rdma link show: mlx5_0/1 and mlx5_0/2
    rc, out, err = tool(d1, "rdma", "link", "show")
    assert rc == 0, err
    assert re.search(rf"link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid {lid1} sm_lid {lid1} lmc 0 state "
                     r"ACTIVE physical_state LINK_UP", out), out
    assert re.search(rf"link mlx5_0/2 subnet_prefix fe80:0000:0000:0000 lid {lid2} sm_lid {lid2} lmc 0 state "
                     r"ACTIVE physical_state LINK_UP", out), out
    # sysfs ports/1 and ports/2, GID 0 = subnet prefix + that port's GUID
    base = os.path.join(d1.run_dir, "sys/class/infiniband/mlx5_0/ports")
    for n, lid, g in ((1, lid1, g1), (2, lid2, g2)):
        assert open(f"{base}/{n}/lid").read() == f"0x{lid:x}\n"
        assert open(f"{base}/{n}/state").read() == "4: ACTIVE\n"
        assert open(f"{base}/{n}/gids/0").read().replace(":", "").strip() == f"fe80000000000000{g:016x}"
        assert open(f"{base}/{n}/pkeys/0").read() == "0xffff\n"
    # ib_umad's files: umadN / issmN per port, in the order the ports came
    mad = os.path.join(d1.run_dir, "sys/class/infiniband_mad")
    ports = {(open(f"{mad}/{u}/ibdev").read(), open(f"{mad}/{u}/port").read()): u
             for u in os.listdir(mad) if u.startswith("umad")}
    assert ports == {("mlx5_0\n", "1\n"): "umad0", ("mlx5_0\n", "2\n"): "umad1"}, ports
    assert open(f"{mad}/issm1/port").read() == "2\n"
    # ibv_devinfo: phys_port_cnt 2, both ports
    rc, out, err = tool(d1, "ibv_devinfo", "-d", "mlx5_0")
    assert rc == 0, err
    assert "\tphys_port_cnt:\t\t\t2\n" in out and "\t\tport:\t1\n" in out and "\t\tport:\t2\n" in out, out
    assert f"\t\t\tport_lid:\t\t{lid2}\n" in out[out.index("\t\tport:\t2\n"):], out


def test_a_port_is_added_in_order_and_only_once(two):
    d1 = two.daemons["h1"]
    base = two.fabric.base
    r = add_ib(d1.run_dir, "mlx5_0/2", base, "h1", port=2)
    assert r["errno"] != 0                                     # mlx5_0 has its port 2
    r = add_ib(d1.run_dir, "mlx5_0/3", base, "h2")
    assert r["errno"] != 0                                     # ports 1..2 only
    r = add_ib(d1.run_dir, "mlx5_9/2", base, "h2")
    assert r["errno"] != 0                                     # no such device


def test_diags_on_port_2(two):
    """``-C mlx5_0 -P 2``: the diags' MADs leave from port 2, into its subnet."""
    d1 = two.daemons["h1"]
    rc, out, err = tool(d1, "sminfo", "-C", "mlx5_0", "-P", "2")
    assert rc == 0, err
    assert re.match(rf"sminfo: sm lid {two.lid['h1/2']} sm guid 0x{int(two.guids[1], 16):x}, activity count \d+ "
                    r"priority 11 state 3 SMINFO_MASTER\n", out), out
    rc, out, err = tool(d1, "smpquery", "-C", "mlx5_0", "-P", "2", "nodedesc", str(two.lid["h3"]))
    assert rc == 0 and "h3" in out, out + err
    # from each subnet's host, the master is h1's port on that subnet (by GUID: both may have LID 1)
    for h, guid, prio in (("h2", two.guids[0], 10), ("h3", two.guids[1], 11)):
        rc, out, err = tool(two.daemons[h], "sminfo", "-C", "mlx5_0")
        assert rc == 0, err
        assert re.match(rf"sminfo: sm lid \d+ sm guid 0x{int(guid, 16):x}, activity count \d+ priority {prio} "
                        r"state 3 SMINFO_MASTER\n", out), out


def _pair(server, client, args, timeout=120):
    """``args`` on the server's daemon and, against it, on the client's."""
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", *args[0], "-p", str(port)], env=server.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, srv)
        cli = subprocess.run([sys.executable, "-m", "softrdma", *args[1], "-p", str(port), "localhost"],
                             env=client.env, capture_output=True, text=True, timeout=timeout)
        out, err = srv.communicate(timeout=timeout)
    finally:
        stop(srv)
    return (srv.returncode, out, err), (cli.returncode, cli.stdout, cli.stderr)


@pytest.mark.parametrize("prog", ["ibv_rc_pingpong", "ibv_ud_pingpong"])
def test_traffic_on_each_port_to_a_host_of_its_subnet(two, prog):
    """RC and UD (``-c``: every byte checked) from h1's port 1 to h2 and
    from h1's port 2 to h3, by LID as pingpong exchanges them."""
    d1 = two.daemons["h1"]
    for num, peer in ((1, "h2"), (2, "h3")):
        before = port_of(d1, num)["port_attr"]
        (src, sout, serr), (crc, cout, cerr) = _pair(
            d1, two.daemons[peer], ([prog, "-d", "mlx5_0", "-i", str(num), "-n", "100", "-c", "-s", "2048"],
                                    [prog, "-d", "mlx5_0", "-n", "100", "-c", "-s", "2048"]))
        assert (src, crc) == (0, 0), serr + cerr
        assert f"  local address:  LID 0x{two.lid[f'h1/{num}']:04x}," in sout, sout
        assert f"  remote address: LID 0x{two.lid[f'h1/{num}']:04x}," in cout, cout
        assert f"  local address:  LID 0x{two.lid[peer]:04x}," in cout, cout
        assert re.search(r"\d+ iters in [\d.]+ seconds", sout), sout
        assert before["state"] == 4
    # the traffic went out of the port it was meant for: each port counted its own
    c1, c2 = (port_of(d1, n)["ib"]["counters"]["xmit_packets"] for n in (1, 2))
    assert c1 >= 100 and c2 >= 100, (c1, c2)


def test_ports_on_two_fabrics(two):
    """Port 1 on one fabric, port 2 on another (stand-in fabrics): each
    port mirrors its own fabric's CA port; deleting the device detaches
    both."""
    from ib_helpers import FakeFabric
    d2 = two.daemons["h2"]
    fa = FakeFabric(two.fabric.fdir, "ibp2fa", {"x1": 7})
    fb = FakeFabric(two.fabric.fdir, "ibp2fb", {"y1": 9})
    try:
        assert add_ib(d2.run_dir, "mlx5_1", "ibp2fa", "x1")["errno"] == 0
        assert add_ib(d2.run_dir, "mlx5_1/2", "ibp2fb", "y1")["errno"] == 0
        assert add_ib(d2.run_dir, "mlx5_1/2", "ibp2fb", "y1")["errno"] != 0      # (already there)
        ports = link(d2.run_dir, "mlx5_1")["ports"]
        assert [(p["port"], p["ib"]["fabric"], p["ib"]["node"], p["port_attr"]["lid"]) for p in ports] == \
            [(1, "ibp2fa", "x1", 7), (2, "ibp2fb", "y1", 9)]
        assert int(ports[1]["ib"]["port_guid"].replace(":", ""), 16) == fb.guid("y1")
        fb.set("y1", lid=11)                                     # port 2's change, port 1 untouched
        wait_for(lambda: link(d2.run_dir, "mlx5_1")["ports"][1]["port_attr"]["lid"] == 11, 30, "port 2's new LID")
        assert link(d2.run_dir, "mlx5_1")["ports"][0]["port_attr"]["lid"] == 7
        sysfs = os.path.join(d2.run_dir, "sys/class/infiniband/mlx5_1/ports/2/lid")
        wait_for(lambda: open(sysfs).read() == "0xb\n", 30, "ports/2/lid")
        assert control(d2.run_dir, "link_delete", name="mlx5_1")["errno"] == 0
        wait_for(lambda: not fa.conns and not fb.conns, 30, "both ports detached")
    finally:
        fa.close()
        fb.close()


def test_link_delete_of_port_2(two):
    """``rdma link delete mlx5_1/2``: port 2 goes away as on a hot-unplug
    -- detached from its fabric, query_port(2) EINVAL, its sysfs port and
    umad/issm entries gone, the QPs on it in ERR with their WRs flushed --
    while port 1 and its QPs stay; unknown links are refused as the real
    tool refuses them."""
    from ib_helpers import FakeFabric
    from softrdma.enums import IBV_QPS_ERR, IBV_QPS_INIT, IBV_WC_WR_FLUSH_ERR
    from softrdma.verbs import cq as cq_m, device, mr as mr_m, pd as pd_m, qp as qp_m, wr as wr_m
    from softrdma.verbs.errors import PyverbsRDMAError
    d3 = two.daemons["h3"]
    fa = FakeFabric(two.fabric.fdir, "ibp2da", {"x1": 7})
    fb = FakeFabric(two.fabric.fdir, "ibp2db", {"y1": 9})
    ctx = None
    try:
        assert add_ib(d3.run_dir, "mlx5_1", "ibp2da", "x1")["errno"] == 0
        assert add_ib(d3.run_dir, "mlx5_1/2", "ibp2db", "y1")["errno"] == 0
        sys_ports = os.path.join(d3.run_dir, "sys/class/infiniband/mlx5_1/ports")
        mad = os.path.join(d3.run_dir, "sys/class/infiniband_mad")

        def umads():
            return {open(f"{mad}/{u}/port").read().strip(): u[4:] for u in os.listdir(mad)
                    if u.startswith("umad") and open(f"{mad}/{u}/ibdev").read() == "mlx5_1\n"}

        ports_umad = umads()
        assert set(ports_umad) == {"1", "2"} and os.path.isdir(f"{sys_ports}/2")
        with softrdma_run(d3.run_dir):
            ctx = device.Context(name="mlx5_1")
            pd = pd_m.PD(ctx)
            cq = cq_m.CQ(ctx, 16)
            mr = mr_m.MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE)
            qps = {}
            for num in (1, 2):
                cap = qp_m.QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
                q = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
                a = qp_m.QPAttr(port_num=num)
                a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE
                q.to_init(a)
                q.post_recv(wr_m.RecvWR(wr_id=num, num_sge=1, sg=[wr_m.SGE(mr.buf, 64, mr.lkey)]))
                qps[num] = q
            assert ctx.query_port(2).lid == 9
            rc, out, err = tool(d3, "rdma", "link", "delete", "mlx5_1/2")
            assert (rc, out, err) == (0, "", ""), out + err
            got = []
            wait_for(lambda: got.extend(cq.poll(4)[1]) or got, 10, "the flush of port 2's QP")
            assert [(w.wr_id, w.status) for w in got] == [(2, IBV_WC_WR_FLUSH_ERR)]
            assert qps[2].query(0)[0].qp_state == IBV_QPS_ERR
            assert qps[1].query(0)[0].qp_state == IBV_QPS_INIT
            with pytest.raises(PyverbsRDMAError) as e:
                ctx.query_port(2)
            assert e.value.error_code == errno.EINVAL
            assert ctx.query_port(1).lid == 7
            with device.Context(name="mlx5_1") as fresh:          # (a context reads the attributes at open)
                assert fresh.query_device().phys_port_cnt == 1
        wait_for(lambda: not fb.conns, 30, "port 2 detached from its fabric")
        assert fa.conns
        assert not os.path.exists(f"{sys_ports}/2") and os.path.isdir(f"{sys_ports}/1")
        assert set(umads()) == {"1"} and not os.path.exists(f"{mad}/issm{ports_umad['2']}")
        assert [p["port"] for p in link(d3.run_dir, "mlx5_1")["ports"]] == [1]
        # what is not there: the real tool's words
        for name in ("mlx5_1/2", "mlx5_1/3", "mlx5_9/2"):
            rc, out, err = tool(d3, "rdma", "link", "delete", name)
            assert rc != 0 and err == "Wrong device name\n", (name, out, err)
        # port 1 is the device: ``rdma link delete mlx5_1`` removes it
        assert control(d3.run_dir, "link_delete", name="mlx5_1/1")["errno"] == errno.EINVAL
        # the port can come back
        assert add_ib(d3.run_dir, "mlx5_1/2", "ibp2db", "y1")["errno"] == 0
        assert os.path.isdir(f"{sys_ports}/2") and set(umads()) == {"1", "2"}
    finally:
        if ctx is not None:
            ctx.close()
        control(d3.run_dir, "link_delete", name="mlx5_1")
        fa.close()
        fb.close()
