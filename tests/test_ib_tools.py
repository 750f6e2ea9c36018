"""The tools on InfiniBand devices (against the stand-in fabric of
``ib_helpers``): ibstat, rdma link show, ibv_devinfo, the pingpongs and
perftest by LID (no -g), ibping through the device's QP1."""

from __future__ import annotations

import re
import subprocess
import sys

from daemon_helpers import softrdma_run
from ib_helpers import add_ib, daemon, fake, link  # noqa: F401 (fixtures)
from wait_helpers import free_port, stop, wait_for, wait_listening


def tool(daemon, *args, timeout=120):
    r = subprocess.run([sys.executable, "-m", "softrdma", *args], env=daemon.env, capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def two(daemon):
    assert add_ib(daemon.run_dir, "mlx5_0", "fab", "h1")["errno"] == 0
    assert add_ib(daemon.run_dir, "mlx5_1", "fab", "h2")["errno"] == 0


def test_ibstat_and_rdma_link_show_an_ib_port(daemon, fake):
    two(daemon)
    rc, out, err = tool(daemon, "ibstat", "mlx5_0")
    assert rc == 0 and err == ""
    assert out == ("CA 'mlx5_0'\n\tCA type: \n\tNumber of ports: 1\n\tFirmware version: \n\tHardware version: \n"
                   "\tNode GUID: 0x0002c90300000003\n\tSystem image GUID: 0x0002c90300000003\n\tPort 1:\n"
                   "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 40\n\t\tBase lid: 3\n\t\tLMC: 0\n"
                   "\t\tSM lid: 1\n\t\tCapability mask: 0x02510868\n\t\tPort GUID: 0x0002c90300000003\n"
                   "\t\tLink layer: InfiniBand\n")
    rc, out, _ = tool(daemon, "ibstat", "-p")
    assert out.split() == ["0x0002c90300000003", "0x0002c90300000004", "0x020000fffe000000"]
    rc, out, _ = tool(daemon, "ibstat", "-l")
    assert out.split() == ["mlx5_0", "mlx5_1", "rxe0"]
    rc, out, err = tool(daemon, "rdma", "link", "show")
    assert rc == 0 and out.splitlines() == [
        "link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo ",
        "link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 3 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP ",
        "link mlx5_1/1 subnet_prefix fe80:0000:0000:0000 lid 4 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP "]
    rc, out, _ = tool(daemon, "rdma", "-j", "link", "show", "mlx5_1/1")
    assert out == ('[{"ifindex":2,"ifname":"mlx5_1","port":1,"subnet_prefix":"fe80:0000:0000:0000","lid":4,'
                   '"sm_lid":1,"lmc":0,"state":"ACTIVE","physical_state":"LINK_UP"}]\n')
    # the port goes to Initialize (an SM's sweep): every tool shows it
    fake.set("h1", state=2)
    wait_for(lambda: link(daemon.run_dir, "mlx5_0")["port_attr"]["state"] == 2, 10, "the port to follow")
    assert "\t\tState: Initializing\n" in tool(daemon, "ibstat", "mlx5_0")[1]
    assert "state INIT physical_state LINK_UP" in tool(daemon, "rdma", "link", "show", "mlx5_0/1")[1]


def test_ibv_devinfo_of_an_ib_port(daemon, fake):
    two(daemon)
    fake.set("h2", lmc=2, sm_sl=3, ext=2, pkeys=(0xFFFF, 0x8002))       # 4X EDR
    wait_for(lambda: link(daemon.run_dir, "mlx5_1")["port_attr"]["lmc"] == 2, 10, "the port to follow")
    rc, out, err = tool(daemon, "ibv_devinfo", "-v", "-d", "mlx5_1")
    assert rc == 0, err
    port = out[out.index("\t\tport:\t1\n"):]
    for line in ("\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "\t\t\tsm_lid:\t\t\t1\n", "\t\t\tport_lid:\t\t4\n",
                 "\t\t\tport_lmc:\t\t0x02\n", "\t\t\tlink_layer:\t\tInfiniBand\n", "\t\t\tsm_sl:\t\t\t3\n",
                 "\t\t\tpkey_tbl_len:\t\t2\n", "\t\t\tactive_width:\t\t4X (2)\n",
                 "\t\t\tactive_speed:\t\t25.0 Gbps (32)\n", "\t\t\tphys_state:\t\tLINK_UP (5)\n",
                 "\t\t\tport_cap_flags:\t\t0x02510868\n",
                 "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0002:c903:0000:0004\n"):
        assert line in port, line
    sysfs = daemon.run_dir + "/sys/class/infiniband/mlx5_1/ports/1/"
    assert open(sysfs + "rate").read() == "100 Gb/sec (4X EDR)\n"
    assert open(sysfs + "lid_mask_count").read() == "2\n" and open(sysfs + "pkeys/1").read() == "0x8002\n"


def _pair(daemon, server_args, client_args, timeout=120):
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", *server_args, "-p", str(port)], env=daemon.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, srv)
        cli = subprocess.run([sys.executable, "-m", "softrdma", *client_args, "-p", str(port), "localhost"],
                             env=daemon.env, capture_output=True, text=True, timeout=timeout)
        out, err = srv.communicate(timeout=timeout)
    finally:
        stop(srv)
    return (srv.returncode, out, err), (cli.returncode, cli.stdout, cli.stderr)


def test_pingpongs_by_lid(daemon, fake):
    two(daemon)
    for prog in ("ibv_rc_pingpong", "ibv_ud_pingpong"):
        (src, sout, serr), (crc, cout, cerr) = _pair(daemon, [prog, "-d", "mlx5_0", "-n", "200", "-c"],
                                                      [prog, "-d", "mlx5_1", "-n", "200", "-c"])
        assert (src, crc) == (0, 0), serr + cerr
        sep = ":" if prog == "ibv_ud_pingpong" else ","
        assert re.search(rf"  local address:  LID 0x0003, QPN 0x[0-9a-f]{{6}}, PSN 0x[0-9a-f]{{6}}{sep} GID ::\n",
                         sout), sout
        assert re.search(r"  remote address: LID 0x0003, QPN", cout) and re.search(r"  local address:  LID 0x0004",
                                                                                    cout)
        assert re.search(r"\d+ iters in [\d.]+ seconds", cout) and re.search(r"\d+ iters in", sout)


def test_perftest_by_lid_with_an_sl(daemon, fake):
    two(daemon)
    (src, sout, serr), (crc, cout, cerr) = _pair(
        daemon, ["ib_write_bw", "-d", "mlx5_0", "-s", "65536", "-n", "300", "--sl", "2"],
        ["ib_write_bw", "-d", "mlx5_1", "-s", "65536", "-n", "300", "--sl", "2"])
    assert (src, crc) == (0, 0), serr + cerr
    assert " Link type       : IB\n" in cout
    assert re.search(r" local address: LID 0x04 QPN 0x[0-9a-f]{4} PSN", cout)
    assert re.search(r" remote address: LID 0x03 QPN", cout)
    assert re.search(r"^ 65536      300 +[\d.]+ +[\d.]+ ", cout, re.M), cout
    (src, sout, serr), (crc, cout, cerr) = _pair(daemon, ["ib_send_lat", "-d", "mlx5_0", "-n", "200"],
                                                 ["ib_send_lat", "-d", "mlx5_1", "-n", "200"])
    assert (src, crc) == (0, 0), serr + cerr
    assert re.search(r"^ 2       200 +[\d.]+ ", cout, re.M), cout


def test_ibping_through_the_device_qp1(daemon, fake):
    two(daemon)
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", "ibping", "-S", "-C", "mlx5_0", "-P", "1"],
                           env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: link(daemon.run_dir, "mlx5_0")["ib"]["umad_files"] == 1, 60, "ibping -S to open its port",
                 proc=srv)
        rc, out, err = tool(daemon, "ibping", "-C", "mlx5_1", "-P", "1", "-c", "3", "-f", "-L", "3")
        assert rc == 0 and err == ""
        assert re.fullmatch(r"\n--- \S+ \(Lid 3\) ibping statistics ---\n3 packets transmitted, 3 received, "
                            r"0% packet loss, time \d+ ms\nrtt min/avg/max = [\d./]+ ms\n", out), out
        # without -C and the ibsim environment: the first active IB device
        rc, out, err = tool(daemon, "ibping", "-c", "1", "-L", "3")
        assert rc == 0 and re.match(r"Pong from \S+ \(Lid 3\): time [\d.]+ ms\n", out), out + err
        # nobody at LID 5's QP1 (h3 has no device): a lost ping, as the real one
        rc, out, err = tool(daemon, "ibping", "-C", "mlx5_1", "-c", "1", "-f", "-t", "200", "-L", "5")
        assert rc == 0 and "1 packets transmitted, 0 received, 100% packet loss" in out
        assert "_do_madrpc failed; dport (Lid 5)" in err
    finally:
        stop(srv)
    wait_for(lambda: link(daemon.run_dir, "mlx5_0")["ib"]["umad_files"] == 0, 30, "the umad file to close")


# --- end to end: the seed's admin flow on a live fabric ---------------------------------------

import pytest  # noqa: E402

from ib_helpers import two_hosts  # noqa: E402




@pytest.fixture(scope="module", params=["softrdma", "opensm"])
def hosts(tmp_path_factory, shm_path_module, request):
    h = two_hosts(tmp_path_factory, shm_path_module, request.param, "ibtools")
    yield h
    h.close()


@pytest.mark.slow
def test_e2e_ibstat_on_each_host(hosts):
    for h, d in hosts.daemons.items():
        rc, out, err = tool(d, "ibstat", "mlx5_0", "1")
        assert rc == 0, err
        lines = out.splitlines()
        assert lines[:3] == ["CA: 'mlx5_0'", "Port 1:", "State: Active"]
        assert "Physical state: LinkUp" in lines and f"Base lid: {hosts.lid[h]}" in lines
        assert "Link layer: InfiniBand" in lines
        sm = [ln for ln in lines if ln.startswith("SM lid: ")]
        assert sm and sm[0] != "SM lid: 0"
        guid = tool(d, "ibstat", "-p")[1].split()[0]
        assert f"Port GUID: {guid}" in lines
        rc, out, _ = tool(d, "rdma", "link", "show", "mlx5_0/1")
        assert re.fullmatch(rf"link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid {hosts.lid[h]} sm_lid \d+ lmc 0 "
                            r"state ACTIVE physical_state LINK_UP \n", out), out


@pytest.mark.slow
def test_e2e_ibping_by_lid_and_by_guid(hosts):
    s, c = hosts.daemons["h1"], hosts.daemons["h4"]
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", "ibping", "-S", "-C", "mlx5_0", "-P", "1"],
                           env=s.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: link(s.run_dir, "mlx5_0")["ib"]["umad_files"] == 1, 60, "ibping -S to open its port",
                 proc=srv)
        rc, out, err = tool(c, "ibping", "-C", "mlx5_0", "-P", "1", "-c", "5", "-f", "-L", str(hosts.lid["h1"]))
        assert rc == 0 and err == "", err
        assert f"5 packets transmitted, 5 received, 0% packet loss" in out
        guid = tool(s, "ibstat", "-p")[1].split()[0]
        rc, out, err = tool(c, "ibping", "-C", "mlx5_0", "-c", "2", "-f", "-G", guid)
        assert rc == 0 and err == "", err                          # the GUID through the SA's PathRecord
        assert f"(Lid {hosts.lid['h1']}) ibping statistics ---\n2 packets transmitted, 2 received" in out
    finally:
        stop(srv)


@pytest.mark.slow
def _rcv_words(hosts, d, lid: int) -> int:
    """PortRcvData of port 1 at ``lid`` (the fabric's PMA), asked through ``d``'s device."""
    rc, out, err = tool(d, "perfquery", "-C", "mlx5_0", "-P", "1", str(lid), "1")
    assert rc == 0, err
    return int(re.search(r"PortRcvData:\.+(\d+)", out).group(1))


def test_e2e_ib_write_bw_between_hosts(hosts):
    s, c = hosts.daemons["h1"], hosts.daemons["h4"]
    before = _rcv_words(hosts, c, hosts.lid["h1"])
    port = free_port()
    args = ["ib_write_bw", "-d", "mlx5_0", "-s", "65536", "-n", "500", "--sl", "1", "-p", str(port)]
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", *args], env=s.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, srv)
        cli = subprocess.run([sys.executable, "-m", "softrdma", *args, "localhost"], env=c.env,
                             capture_output=True, text=True, timeout=120)
        out, err = srv.communicate(timeout=120)
    finally:
        stop(srv)
    assert cli.returncode == 0 and srv.returncode == 0, cli.stderr + err
    assert f" local address: LID {hosts.lid['h4']:#04x} QPN" in cli.stdout
    assert f" remote address: LID {hosts.lid['h1']:#04x} QPN" in cli.stdout
    m = re.search(r"^ 65536      500 +([\d.]+) +([\d.]+)\s", cli.stdout, re.M)   # (a tab after 7 digits)
    assert m and float(m.group(2)) > 0, cli.stdout
    # the fabric counted what it delivered to h1's port (32-bit words; PortRcvData saturates, as the PMA's)
    words = 500 * 65536 // 4
    assert _rcv_words(hosts, c, hosts.lid["h1"]) - before >= min(words, 0xFFFFFFFF - before)


@pytest.mark.slow
def test_e2e_the_diags_through_the_device_qp0_and_qp1(hosts):
    """smpquery, sminfo, perfquery, saquery, ibnetdiscover with -C mlx5_0:
    SMPs from the device's QP0, GMPs from its QP1, answered by the
    fabric's agents and the SM's SA."""
    d = hosts.daemons["h1"]
    lid4 = hosts.lid["h4"]
    rc, out, err = tool(d, "smpquery", "-C", "mlx5_0", "-P", "1", "nodeinfo", str(lid4))
    assert rc == 0 and err == "", err
    assert f"# Node info: Lid {lid4}\n" in out and "NodeType:........................Channel Adapter\n" in out
    rc, out, err = tool(d, "smpquery", "-C", "mlx5_0", "-D", "nodedesc", "0,1")     # directed route
    assert rc == 0 and out == "Node Description:.............................sw1\n", out + err
    rc, out, err = tool(d, "sminfo", "-C", "mlx5_0")
    assert rc == 0 and re.fullmatch(r"sminfo: sm lid \d+ sm guid 0x[0-9a-f]+, activity count \d+ priority \d+ "
                                    r"state 3 SMINFO_MASTER\n", out), out + err
    rc, out, err = tool(d, "perfquery", "-C", "mlx5_0", "-P", "1")
    assert rc == 0 and f"# Port counters: Lid {hosts.lid['h1']} port 1" in out, out + err
    assert int(re.search(r"PortXmitPkts:\.+(\d+)", out).group(1)) > 0
    rc, out, err = tool(d, "saquery", "-C", "mlx5_0")
    assert rc == 0 and err == "", err
    # what an ibsim client of the fabric gets from the same SA (the real opensm under
    # umad2sim answers a GetTable with one MAD: its first record)
    sim = subprocess.run([sys.executable, "-m", "softrdma", "saquery"], env=hosts.fabric.env(SIM_HOST="h2"),
                         capture_output=True, text=True, timeout=120).stdout
    assert out == sim and out.count("NodeRecord dump:") >= 1
    if hosts.sm == "softrdma":
        assert out.count("NodeRecord dump:") == 6
        for name in ("sw1", "sw2", "h1", "h2", "h3", "h4"):
            assert f"\t\tNodeDescription.........{name}\n" in out
    rc, out, err = tool(d, "ibnetdiscover", "-C", "mlx5_0")
    assert rc == 0 and out.count("\nSwitch\t") == 2 and out.count("\nCa\t") == 4, out + err


@pytest.mark.slow
def test_e2e_ibdiagnet_from_the_device(hosts, tmp_path):
    """ibdiagnet -i mlx5_0: discovery, the checks and the report files from an
    IB device's QP0/QP1, as from a host of a real cluster."""
    d = hosts.daemons["h1"]
    rc, out, err = tool(d, "ibdiagnet", "-i", "mlx5_0", "-p", "1", "-o", str(tmp_path), timeout=300)
    assert rc == 0 and err == "", out + err
    assert "-I- Discovering ... 6 nodes (2 Switches & 4 CA-s) discovered." in out, out
    assert "-E-" not in out
    assert "SM - master" in (tmp_path / "ibdiagnet2.sm").read_text()
    rc, out, err = tool(d, "ibdiagnet", "-i", "mlx5_9", "-o", str(tmp_path))
    assert rc == 2 and err == "-E- Device mlx5_9 not found\n", out + err


@pytest.mark.slow
def test_e2e_an_issm_file_holds_issm_and_takes_the_sms_smps(hosts):
    """A umad file opened as the kernel's issm device (an SM bound to the
    port): the port has IsSM while it is open -- every SM's sweep sees it
    (another SM's port: an SMInfo Get comes to the file through the device's
    QP0) -- and loses it when the file closes."""
    from softrdma.tools.ibdiag.devport import DevicePort
    from softrdma.wire.smp import CAP_IS_SM, SmpAttr
    d = hosts.daemons["h4"]
    with softrdma_run(d.run_dir):
        port = DevicePort("mlx5_0", 1, classes=(0x01, 0x81), issm=True)
    try:
        wait_for(lambda: link(d.run_dir, "mlx5_0")["port_attr"]["port_cap_flags"] & CAP_IS_SM, 30, "IsSM")
        rc, out, err = tool(hosts.daemons["h1"], "smpquery", "-C", "mlx5_0", "portinfo", str(hosts.lid["h4"]))
        assert rc == 0 and re.search(r"CapMask:\.+0x[0-9a-f]+\n\s+IsSM\n", out), out + err
        got = []

        def sminfo_get():
            if port.wait(0.5):
                got.extend(r for r in port.recv_all() if r.mad[1] in (0x01, 0x81))
            return any(int.from_bytes(r.mad[16:18], "big") == SmpAttr.SM_INFO for r in got)
        wait_for(sminfo_get, 60, "the master SM's SMInfo Get")
    finally:
        port.close()
    wait_for(lambda: not link(d.run_dir, "mlx5_0")["port_attr"]["port_cap_flags"] & CAP_IS_SM, 30, "IsSM cleared")
