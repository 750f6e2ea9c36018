"""ibv_devices, ibv_devinfo and ibstat: byte for byte what rdma-core 44 /
infiniband-diags 44 print (docs/formats/ibv_devices.md, ibv_devinfo.md,
ibstat.md).

Two kinds of check:

* against a real softrdmad: the expected text is written out here from the
  real tools' format strings, with the values that vary (GUIDs, GIDs, MTU,
  the Context's attributes) read from the daemon's ``links`` reply;
* against the formats docs' worked examples (rxe0 in the rxe-vm guest): a
  fake device with the documented rxe0 values must reproduce the docs'
  example blocks exactly, so every format detail the docs pin down (flag
  lines, GID forms, ``Rate: 2.5``, trailing spaces) is checked.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

from daemon_helpers import RunningDaemon
from softrdma.tools import ibstat, ibv_devices, ibv_devinfo

DOCS = Path(__file__).resolve().parent.parent / "docs" / "formats"

#: devinfo.c's mtu_str()
MTU = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}

DEVINFO_USAGE = (
    "Usage: {}             print the ca attributes\n"
    "\n"
    "Options:\n"
    "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
    "  -i, --ib-port=<port>   use port <port> of IB device (default all ports)\n"
    "  -l, --list             print only the IB devices names\n"
    "  -v, --verbose          print all the attributes of the IB device(s)\n"
)

IBSTAT_USAGE = (
    "\n"
    "Usage: {0} [options] <ca_name> [portnum]\n"
    "\n"
    "Options:\n"
    "  --list_of_cas, -l       list all IB devices\n"
    "  --short, -s             short output\n"
    "  --port_list, -p         show port list\n"
    "  --config, -z <config>   use config file, default: /etc/infiniband-diags/ibdiag.conf\n"
    "  --verbose, -v           increase verbosity level\n"
    "  --debug, -d             raise debug level\n"
    "  --help, -h              help message\n"
    "  --version, -V           show version\n"
    "\n"
    "Examples:\n"
    "  {0} -l       # list all IB devices\n"
    "  {0} mthca0 2 # stat port 2 of 'mthca0'\n"
    "\n"
)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def _rxe0_daemon(shm_path_module):
    """One softrdmad with rxe0 on lo for the whole module: the tools only read."""
    d = RunningDaemon(str(shm_path_module))
    yield d
    d.stop()


@pytest.fixture
def daemon(_rxe0_daemon, monkeypatch):
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    monkeypatch.setenv("SOFTRDMA_RUN", _rxe0_daemon.run_dir)
    return _rxe0_daemon


def _second_netdev() -> str | None:
    """A netdev other than lo with an IPv4 address, for a second device."""
    from softrdma.device.netdev import netdev_info
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        try:
            info = netdev_info(name)
        except Exception:
            continue
        if info.up and any(":" not in a for a in info.addresses):
            return name
    return None


@pytest.fixture
def two_daemon(shm_path, monkeypatch):
    tmp_path = shm_path
    nd = _second_netdev()
    if nd is None:
        pytest.skip("no second netdev with an IPv4 address")
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    # rxe1 first: the tools print in the daemon's order (ibv_*) or sorted (ibstat)
    d = RunningDaemon(str(tmp_path), devices=(f"rxe1:{nd}", "rxe0:lo"))
    monkeypatch.setenv("SOFTRDMA_RUN", str(tmp_path))
    yield d
    d.stop()


@pytest.fixture
def no_daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("SOFTRDMA_RUN", str(tmp_path / "nothing-runs-here"))
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")


def run(capsys, tool, *argv, prog):
    rc = tool.main(list(argv), prog=prog)
    out, err = capsys.readouterr()
    return rc, out, err


def links() -> list[dict]:
    from softrdma.verbs.device import management
    conn = management()
    try:
        return conn.call("links")[0]["links"]
    finally:
        conn.close()


def link(name: str = "rxe0") -> dict:
    return next(x for x in links() if x["ifname"] == name)


def device_attr(name: str = "rxe0"):
    from softrdma.verbs.device import Context
    with Context(name=name) as ctx:
        return ctx.query_device(), ctx.num_comp_vectors


def gid_lines(lk: dict) -> str:
    """devinfo.c's RoCE v2 GID lines: every GID with a non-zero interface id,
    as glibc's inet_ntop prints it."""
    out = ""
    for i, g in enumerate(lk["gids"]):
        raw = bytes.fromhex(g)
        if any(raw[8:]):
            out += f"\t\t\tGID[{i:3d}]:\t\t{socket.inet_ntop(socket.AF_INET6, raw)}, RoCE v2\n"
    return out


# ------------------------------------------------------------------ expected text (real format strings)
def devices_expected(lks: list[dict]) -> str:
    out = "    device          \t   node GUID\n" \
          "    ------          \t----------------\n"
    for lk in lks:
        out += f"    {lk['ifname']:<16}\t{lk['node_guid'].replace(':', '')}\n"
    return out


def devinfo_expected(lk: dict, fw_ver: str) -> str:
    return (f"hca_id:\t{lk['ifname']}\n"
            "\ttransport:\t\t\tInfiniBand (0)\n"
            f"\tfw_ver:\t\t\t\t{fw_ver}\n"
            f"\tnode_guid:\t\t\t{lk['node_guid']}\n"
            f"\tsys_image_guid:\t\t\t{lk['sys_image_guid']}\n"
            "\tvendor_id:\t\t\t0xffffff\n"
            "\tvendor_part_id:\t\t\t0\n"
            "\thw_ver:\t\t\t\t0x0\n"
            "\tphys_port_cnt:\t\t\t1\n"
            + devinfo_port(lk)
            + "\n")


def devinfo_port(lk: dict) -> str:
    pa = lk["port_attr"]
    return ("\t\tport:\t1\n"
            "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
            f"\t\t\tmax_mtu:\t\t{MTU[pa['max_mtu']]} ({pa['max_mtu']})\n"
            f"\t\t\tactive_mtu:\t\t{MTU[pa['active_mtu']]} ({pa['active_mtu']})\n"
            "\t\t\tsm_lid:\t\t\t0\n"
            "\t\t\tport_lid:\t\t0\n"
            "\t\t\tport_lmc:\t\t0x00\n"
            "\t\t\tlink_layer:\t\tEthernet\n")


def devinfo_verbose_expected(lk: dict, a, ncomp: int) -> str:
    pa = lk["port_attr"]
    head, _, _ = devinfo_expected(lk, a.fw_version).partition("\t\tport:")
    return (head
            + f"\tmax_mr_size:\t\t\t0x{a.max_mr_size:x}\n"
            f"\tpage_size_cap:\t\t\t0x{a.page_size_cap:x}\n"
            f"\tmax_qp:\t\t\t\t{a.max_qp}\n"
            f"\tmax_qp_wr:\t\t\t{a.max_qp_wr}\n"
            "\tdevice_cap_flags:\t\t0x21323c06\n"              # (verbs.device.DEVICE_CAP_FLAGS)
            "\t\t\t\t\tBAD_PKEY_CNTR\n\t\t\t\t\tBAD_QKEY_CNTR\n\t\t\t\t\tPORT_ACTIVE_EVENT\n"
            "\t\t\t\t\tSYS_IMAGE_GUID\n\t\t\t\t\tRC_RNR_NAK_GEN\n\t\t\t\t\tSRQ_RESIZE\n\t\t\t\t\tMEM_WINDOW\n"
            "\t\t\t\t\tXRC\n\t\t\t\t\tMEM_MGT_EXTENSIONS\n\t\t\t\t\tMEM_WINDOW_TYPE_2B\n"
            "\t\t\t\t\tMANAGED_FLOW_STEERING\n"
            f"\tmax_sge:\t\t\t{a.max_sge}\n"
            f"\tmax_sge_rd:\t\t\t{a.max_sge_rd}\n"
            f"\tmax_cq:\t\t\t\t{a.max_cq}\n"
            f"\tmax_cqe:\t\t\t{a.max_cqe}\n"
            f"\tmax_mr:\t\t\t\t{a.max_mr}\n"
            f"\tmax_pd:\t\t\t\t{a.max_pd}\n"
            f"\tmax_qp_rd_atom:\t\t\t{a.max_qp_rd_atom}\n"
            f"\tmax_ee_rd_atom:\t\t\t{a.max_ee_rd_atom}\n"
            f"\tmax_res_rd_atom:\t\t{a.max_res_rd_atom}\n"
            f"\tmax_qp_init_rd_atom:\t\t{a.max_qp_init_rd_atom}\n"
            f"\tmax_ee_init_rd_atom:\t\t{a.max_ee_init_rd_atom}\n"
            "\tatomic_cap:\t\t\tATOMIC_HCA (1)\n"
            f"\tmax_ee:\t\t\t\t{a.max_ee}\n"
            f"\tmax_rdd:\t\t\t{a.max_rdd}\n"
            f"\tmax_mw:\t\t\t\t{a.max_mw}\n"
            f"\tmax_raw_ipv6_qp:\t\t{a.max_raw_ipv6_qp}\n"
            f"\tmax_raw_ethy_qp:\t\t{a.max_raw_ethy_qp}\n"
            f"\tmax_mcast_grp:\t\t\t{a.max_mcast_grp}\n"
            f"\tmax_mcast_qp_attach:\t\t{a.max_mcast_qp_attach}\n"
            f"\tmax_total_mcast_qp_attach:\t{a.max_total_mcast_qp_attach}\n"
            f"\tmax_ah:\t\t\t\t{a.max_ah}\n"
            "\tmax_fmr:\t\t\t0\n"
            f"\tmax_srq:\t\t\t{a.max_srq}\n"
            f"\tmax_srq_wr:\t\t\t{a.max_srq_wr}\n"
            f"\tmax_srq_sge:\t\t\t{a.max_srq_sge}\n"
            f"\tmax_pkeys:\t\t\t{a.max_pkeys}\n"
            f"\tlocal_ca_ack_delay:\t\t{a.local_ca_ack_delay}\n"
            "\tgeneral_odp_caps:\n"          # (the daemon may reach this process's memory: ODP)
            "\t\t\t\t\tODP_SUPPORT\n\t\t\t\t\tODP_SUPPORT_IMPLICIT\n"
            "\trc_odp_caps:\n"
            "\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_RECV\n\t\t\t\t\tSUPPORT_WRITE\n"
            "\t\t\t\t\tSUPPORT_READ\n\t\t\t\t\tSUPPORT_ATOMIC\n\t\t\t\t\tSUPPORT_SRQ\n"
            "\t\t\t\t\tUnknown flags: 0xC0\n"            # FLUSH and ATOMIC_WRITE, which devinfo.c v44 does not name
            "\tuc_odp_caps:\n"
            "\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_RECV\n\t\t\t\t\tSUPPORT_WRITE\n"
            "\t\t\t\t\tSUPPORT_SRQ\n"
            "\tud_odp_caps:\n"
            "\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_RECV\n\t\t\t\t\tSUPPORT_SRQ\n"
            "\txrc_odp_caps:\n"
            "\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_WRITE\n\t\t\t\t\tSUPPORT_READ\n"
            "\t\t\t\t\tSUPPORT_ATOMIC\n\t\t\t\t\tSUPPORT_SRQ\n"
            "\tcompletion timestamp_mask:\t\t\t0x7fffffffffffffff\n"     # completion timestamps (uapi.clock)
            "\thca_core_clock:\t\t\t156250kHZ\n"                  # the free-running clock (uapi.clock)
            "\tdevice_cap_flags_ex:\t\t0x1C021323C06\n"        # FLUSH_GLOBAL/PERSISTENT, ATOMIC_WRITE,
            "\t\t\t\t\tUnknown flags: 0x1C000000000\n"                # which devinfo.c v44 does not name
            "\ttso_caps:\n"
            "\t\tmax_tso:\t\t\t0\n"
            "\trss_caps:\n"
            "\t\tmax_rwq_indirection_tables:\t\t\t1024\n"       # RSS on raw packet QPs (uapi.raw)
            "\t\tmax_rwq_indirection_table_size:\t\t\t4096\n"
            "\t\trx_hash_function:\t\t\t\t0x1\n"
            "\t\trx_hash_fields_mask:\t\t\t\t0xFF\n"
            "\t\tsupported_qp:\n"
            "\t\t\t\t\tSUPPORT_RAW_PACKET\n"
            "\tmax_wq_type_rq:\t\t\t16384\n"
            "\tpacket_pacing_caps:\n"
            "\t\tqp_rate_limit_min:\t0kbps\n"
            "\t\tqp_rate_limit_max:\t0kbps\n"
            "\tmax_rndv_hdr_size:\t\t64\n"                  # tag matching on RC (uapi.limits)
            "\tmax_num_tags:\t\t\t1023\n"
            "\tmax_ops:\t\t\t1024\n"
            "\tmax_sge:\t\t\t1\n"
            "\tflags:\n"
            "\t\t\t\t\tIBV_TM_CAP_RC\n"
            "\tmaximum available device memory:\t262144Bytes\n\n"       # the device-memory pool
            f"\tnum_comp_vectors:\t\t{ncomp}\n"
            + devinfo_port(lk)
            + f"\t\t\tmax_msg_sz:\t\t0x{pa['max_msg_sz']:x}\n"
            "\t\t\tport_cap_flags:\t\t0x00010000\n"
            "\t\t\tport_cap_flags2:\t0x0000\n"
            "\t\t\tmax_vl_num:\t\t1 (1)\n"
            "\t\t\tbad_pkey_cntr:\t\t0x0\n"
            "\t\t\tqkey_viol_cntr:\t\t0x0\n"
            "\t\t\tsm_sl:\t\t\t0\n"
            "\t\t\tpkey_tbl_len:\t\t1\n"
            "\t\t\tgid_tbl_len:\t\t1024\n"
            "\t\t\tsubnet_timeout:\t\t0\n"
            "\t\t\tinit_type_reply:\t0\n"
            "\t\t\tactive_width:\t\t1X (1)\n"
            "\t\t\tactive_speed:\t\t2.5 Gbps (1)\n"
            "\t\t\tphys_state:\t\tLINK_UP (5)\n"
            + gid_lines(lk)
            + "\n")


def ibstat_ca(lk: dict) -> str:
    return (f"CA '{lk['ifname']}'\n"
            "\tCA type: \n"
            "\tNumber of ports: 1\n"
            "\tFirmware version: \n"
            "\tHardware version: \n"
            f"\tNode GUID: 0x{lk['node_guid'].replace(':', '')}\n"
            f"\tSystem image GUID: 0x{lk['sys_image_guid'].replace(':', '')}\n")


def port_guid(lk: dict) -> str:
    """ibstat's Port GUID: the interface id of GID 0 (sysfs gids/0)."""
    return lk["gids"][0][16:] if lk["gids"] else "0" * 16


def ibstat_port(lk: dict, pre: str, hdrpre: str) -> str:
    return (f"{hdrpre}Port 1:\n"
            f"{pre}State: Active\n"
            f"{pre}Physical state: LinkUp\n"
            f"{pre}Rate: 2.5\n"
            f"{pre}Base lid: 0\n"
            f"{pre}LMC: 0\n"
            f"{pre}SM lid: 0\n"
            f"{pre}Capability mask: 0x00010000\n"
            f"{pre}Port GUID: 0x{port_guid(lk)}\n"
            f"{pre}Link layer: Ethernet\n")


def ibstat_full(lk: dict) -> str:
    return ibstat_ca(lk) + ibstat_port(lk, "\t\t", "\t")


def ibstat_alone(lk: dict) -> str:
    return f"CA: '{lk['ifname']}'\n" + ibstat_port(lk, "", "")


def _port_facts(lk: dict) -> None:
    """The values the literal lines above take as given (rxe's)."""
    pa = lk["port_attr"]
    assert (pa["state"], pa["phys_state"], pa["link_layer"], pa["active_width"], pa["active_speed"]) == \
        (4, 5, 2, 1, 1)
    assert (pa["lid"], pa["sm_lid"], pa["lmc"], pa["port_cap_flags"], pa["gid_tbl_len"]) == (0, 0, 0, 0x10000, 1024)


# ------------------------------------------------------------------ ibv_devices
def test_ibv_devices(daemon, capsys):
    lks = links()
    assert [x["ifname"] for x in lks] == ["rxe0"]
    rc, out, err = run(capsys, ibv_devices, prog="ibv_devices")
    guid = lks[0]["node_guid"].replace(":", "")
    assert (rc, err) == (0, "")
    assert out == ("    device          \t   node GUID\n"
                   "    ------          \t----------------\n"
                   f"    rxe0            \t{guid}\n")
    # no option parsing at all: anything is ignored
    assert run(capsys, ibv_devices, "--foo", "-x", "bar", prog="ibv_devices") == (0, out, "")


def test_ibv_devices_no_daemon(no_daemon, capsys):
    assert run(capsys, ibv_devices, prog="ibv_devices") == \
        (0, "    device          \t   node GUID\n    ------          \t----------------\n", "")


# ------------------------------------------------------------------ ibv_devinfo
def test_ibv_devinfo_default(daemon, capsys):
    lk = link()
    _port_facts(lk)
    a, _ = device_attr()
    expected = devinfo_expected(lk, a.fw_version)
    for argv in ([], ["-d", "rxe0"], ["-d", "rxe0", "-i", "1"], ["--ib-dev=rxe0", "--ib-port=0x1"],
                 ["--ib-d", "rxe0", "--ib-p", "1"], ["-drxe0", "-i1"], ["-i", "257"],   # uint8_t port: 257 -> 1
                 ["-i", "256"], ["extra", "-d", "rxe0", "operands"]):                   # 256 -> 0: all ports
        assert run(capsys, ibv_devinfo, *argv, prog="ibv_devinfo") == (0, expected, ""), argv


def test_ibv_devinfo_verbose(daemon, capsys):
    lk = link()
    _port_facts(lk)
    a, ncomp = device_attr()
    assert a.device_cap_flags == 0x21323C06 and a.max_fmr == 0 and a.atomic_caps == 1 and a.max_srq
    # the GID table: the default GID (from the MAC) and lo's 127.0.0.1, IPv4-mapped
    lo_index = lk["gids"].index("00000000000000000000ffff7f000001")
    out_gids = gid_lines(lk)
    assert f"\t\t\tGID[{lo_index:3d}]:\t\t::ffff:127.0.0.1, RoCE v2\n" in out_gids
    expected = devinfo_verbose_expected(lk, a, ncomp)
    rc, out, err = run(capsys, ibv_devinfo, "-v", prog="ibv_devinfo")
    assert (rc, err) == (0, "")
    assert out == expected
    assert run(capsys, ibv_devinfo, "--verbose", "-d", "rxe0", "-i", "1", prog="ibv_devinfo") == (0, expected, "")


def test_ibv_devinfo_list_and_errors(daemon, capsys):
    assert run(capsys, ibv_devinfo, "-l", prog="ibv_devinfo") == (0, "1 HCA found:\n\trxe0\n\n", "")
    # -l acts inside the getopt loop: what follows is never parsed
    assert run(capsys, ibv_devinfo, "-v", "--list", "-x", "-i", "0", prog="ibv_devinfo") == \
        (0, "1 HCA found:\n\trxe0\n\n", "")
    assert run(capsys, ibv_devinfo, "-d", "mlx5_0", prog="ibv_devinfo") == \
        (255, "", "IB device 'mlx5_0' wasn't found\n")
    assert run(capsys, ibv_devinfo, "-d", "rxe", prog="ibv_devinfo") == (255, "", "IB device 'rxe' wasn't found\n")
    # a port past phys_port_cnt: nothing on stdout, exit 4
    assert run(capsys, ibv_devinfo, "-i", "2", prog="ibv_devinfo") == (4, "", "Invalid port requested for device\n")
    assert run(capsys, ibv_devinfo, "-d", "rxe0", "-v", "-i", "0x2", prog="ibv_devinfo") == \
        (4, "", "Invalid port requested for device\n")


@pytest.mark.parametrize("argv, stderr, rc", [
    (["-x"], "{p}: invalid option -- 'x'\n", 255),
    (["-b"], "{p}: invalid option -- 'b'\n", 255),                     # v44 has no -b
    (["-vx"], "{p}: invalid option -- 'x'\n", 255),
    (["-x", "-l"], "{p}: invalid option -- 'x'\n", 255),
    (["-d"], "{p}: option requires an argument -- 'd'\n", 255),
    (["-v", "-i"], "{p}: option requires an argument -- 'i'\n", 255),
    (["--ib-dev"], "{p}: option '--ib-dev' requires an argument\n", 255),
    (["--ib"], "{p}: option '--ib' is ambiguous; possibilities: '--ib-dev' '--ib-port'\n", 255),
    (["--ib=3"], "{p}: option '--ib=3' is ambiguous; possibilities: '--ib-dev' '--ib-port'\n", 255),
    (["--list=yes"], "{p}: option '--list' doesn't allow an argument\n", 255),
    (["--foo=bar"], "{p}: unrecognized option '--foo=bar'\n", 255),
    (["-i", "0"], "", 1),
    (["-i", "-3"], "", 1),
    (["-i", "foo"], "", 1),
    (["--ib-port=0"], "", 1),
    (["-i", "4294967296"], "", 1),                                      # strtol, then int: 2^32 -> 0
])
def test_ibv_devinfo_bad_options(no_daemon, capsys, argv, stderr, rc):
    for prog in ("ibv_devinfo", "./ibv_devinfo"):
        assert run(capsys, ibv_devinfo, *argv, prog=prog) == (rc, DEVINFO_USAGE.format(prog), stderr.format(p=prog))


def test_ibv_devinfo_no_daemon(no_daemon, capsys):
    assert run(capsys, ibv_devinfo, prog="ibv_devinfo") == (255, "", "No IB devices found\n")
    assert run(capsys, ibv_devinfo, "-v", "-i", "1", prog="ibv_devinfo") == (255, "", "No IB devices found\n")
    assert run(capsys, ibv_devinfo, "-l", prog="ibv_devinfo") == (0, "0 HCAs found:\n\n", "")
    assert run(capsys, ibv_devinfo, "-d", "rxe0", prog="ibv_devinfo") == (255, "", "IB device 'rxe0' wasn't found\n")


# ------------------------------------------------------------------ ibstat
def test_ibstat(daemon, capsys):
    lk = link()
    _port_facts(lk)
    full = ibstat_full(lk)
    for argv in ([], ["rxe0"], ["-d", "rxe0"], ["-v", "rxe0"], ["rxe0", "-v", "-d"], ["-z", "/nonexistent", "rxe0"],
                 ["--config=/nonexistent"], ["rxe0", "--", "-1"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, full, ""), argv
    alone = ibstat_alone(lk)
    for argv in (["rxe0", "1"], ["-v", "rxe0", "1"], ["rxe0", "0x1"], ["rxe0", "1", "extra", "args"],
                 ["rxe0", "4294967297"]):                      # strtol, then int: 2^32 + 1 -> 1
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, alone, ""), argv
    short = ibstat_ca(lk)
    for argv in (["-s"], ["-s", "rxe0", "1"], ["--short", "rxe0"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, short, ""), argv
    for argv in (["-l"], ["-l", "rxe0"], ["--list"], ["-l", "-s", "rxe0", "1"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, "rxe0\n", ""), argv
    for argv in (["-p"], ["-p", "rxe0"], ["--port_list", "-l"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, f"0x{port_guid(lk)}\n", ""), argv


def test_ibstat_port_guid_is_gid0(daemon):
    """rxe's Port GUID (the interface id of GID 0, the default GID made from
    the MAC) is its node GUID."""
    lk = link()
    assert ipaddress.IPv6Address(bytes.fromhex(lk["gids"][0])).is_link_local
    assert port_guid(lk) == lk["node_guid"].replace(":", "")


def test_ibstat_errors(daemon, capsys):
    pid = os.getpid()
    for port in ("2", "0", "abc"):
        n = {"2": 2, "0": 0, "abc": 0}[port]
        assert run(capsys, ibstat, "rxe0", port, prog="ibstat") == (
            255, "",
            f"ibwarn: [{pid}] ca_stat: CA: 'rxe0' has no port number {n} - max (1)\n"
            f"ibpanic: [{pid}] main: stat of IB device 'rxe0' failed: No such file or directory\n")
    for name in ("mlx5_0", "rxe", "rxe0x"):
        assert run(capsys, ibstat, name, prog="ibstat") == \
            (255, "", f"ibpanic: [{pid}] main: '{name}' IB device can't be found: Success\n")
    assert run(capsys, ibstat, "-p", "mlx5_0", prog="ibstat") == \
        (255, "", f"ibpanic: [{pid}] main: 'mlx5_0' IB device can't be found: Success\n")


@pytest.mark.parametrize("argv, diag", [
    (["-h"], ""),
    (["--help", "rxe0"], ""),
    (["-x"], "{p}: invalid option -- 'x'\n"),
    (["-e"], "{p}: invalid option -- 'e'\n"),                  # a common option ibstat excludes
    (["-z"], "{p}: option requires an argument -- 'z'\n"),
    (["--ver"], "{p}: option '--ver' is ambiguous; possibilities: '--verbose' '--version'\n"),
    (["--short=1"], "{p}: option '--short' doesn't allow an argument\n"),
    (["--Ca=rxe0"], "{p}: unrecognized option '--Ca=rxe0'\n"),
    (["rxe0", "-1"], "{p}: invalid option -- '1'\n"),
])
def test_ibstat_usage(no_daemon, capsys, argv, diag):
    for prog in ("ibstat", "/usr/sbin/ibstat"):
        assert run(capsys, ibstat, *argv, prog=prog) == (2, "", diag.format(p=prog) + IBSTAT_USAGE.format(prog))


def test_ibstat_version(no_daemon, capsys):
    assert run(capsys, ibstat, "-V", prog="ibstat") == (0, "", "ibstat BUILD VERSION: 44.0\n")
    assert run(capsys, ibstat, "-l", "--version", prog="ibstat") == (0, "", "ibstat BUILD VERSION: 44.0\n")


def test_ibstat_no_daemon(no_daemon, capsys):
    for argv in ([], ["-l"], ["-p"], ["-s"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, "", ""), argv
    assert run(capsys, ibstat, "rxe0", prog="ibstat") == \
        (255, "", f"ibpanic: [{os.getpid()}] main: 'rxe0' IB device can't be found: Success\n")


# ------------------------------------------------------------------ two devices
def test_two_devices(two_daemon, capsys):
    lks = links()
    assert [x["ifname"] for x in lks] == ["rxe1", "rxe0"]           # the daemon's order
    by = {x["ifname"]: x for x in lks}
    assert run(capsys, ibv_devices, prog="ibv_devices") == (0, devices_expected(lks), "")
    assert run(capsys, ibv_devinfo, "-l", prog="ibv_devinfo") == (0, "2 HCAs found:\n\trxe1\n\trxe0\n\n", "")
    fw = {n: device_attr(n)[0].fw_version for n in by}
    assert run(capsys, ibv_devinfo, prog="ibv_devinfo") == \
        (0, devinfo_expected(by["rxe1"], fw["rxe1"]) + devinfo_expected(by["rxe0"], fw["rxe0"]), "")
    assert run(capsys, ibv_devinfo, "-d", "rxe1", prog="ibv_devinfo") == \
        (0, devinfo_expected(by["rxe1"], fw["rxe1"]), "")
    # each device fails the port check; the return codes are OR-ed
    assert run(capsys, ibv_devinfo, "-i", "3", prog="ibv_devinfo") == \
        (4, "", "Invalid port requested for device\n" * 2)
    # ibstat sorts the CAs by name
    assert run(capsys, ibstat, prog="ibstat") == (0, ibstat_full(by["rxe0"]) + ibstat_full(by["rxe1"]), "")
    assert run(capsys, ibstat, "rxe1", prog="ibstat") == (0, ibstat_full(by["rxe1"]), "")
    assert run(capsys, ibstat, "-l", prog="ibstat") == (0, "rxe0\nrxe1\n", "")
    assert run(capsys, ibstat, "-p", prog="ibstat") == \
        (0, f"0x{port_guid(by['rxe0'])}\n0x{port_guid(by['rxe1'])}\n", "")
    assert run(capsys, ibstat, "rxe1", "1", prog="ibstat") == (0, ibstat_alone(by["rxe1"]), "")


# ------------------------------------------------------------------ the CLI path
def test_cli(daemon):
    lk = link()
    a, _ = device_attr()
    env = {**daemon.env, "SOFTRDMA_AUTOSTART": "0"}

    def cli(*argv):
        return subprocess.run([sys.executable, "-m", "softrdma", *argv], env=env, capture_output=True, text=True,
                              timeout=60)

    r = cli("ibv_devinfo", "-d", "rxe0")
    assert (r.returncode, r.stdout, r.stderr) == (0, devinfo_expected(lk, a.fw_version), "")
    r = cli("ibv_devinfo", "-b")
    assert (r.returncode, r.stdout, r.stderr) == \
        (255, DEVINFO_USAGE.format("ibv_devinfo"), "ibv_devinfo: invalid option -- 'b'\n")
    r = cli("ibv_devices")
    assert (r.returncode, r.stdout, r.stderr) == (0, devices_expected([lk]), "")
    r = cli("ibstat", "rxe0", "1")
    assert (r.returncode, r.stdout, r.stderr) == (0, ibstat_alone(lk), "")
    r = cli("ibstat", "rxe0", "2")
    assert r.returncode == 255 and r.stdout == "" and "Traceback" not in r.stderr
    assert re.fullmatch(r"ibwarn: \[\d+\] ca_stat: CA: 'rxe0' has no port number 2 - max \(1\)\n"
                        r"ibpanic: \[\d+\] main: stat of IB device 'rxe0' failed: No such file or directory\n",
                        r.stderr)
    off = {**env, "SOFTRDMA_RUN": env["SOFTRDMA_RUN"] + "/none"}
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibv_devinfo"], env=off, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (255, "", "No IB devices found\n")


# ------------------------------------------------------------------ the formats docs' worked examples
def doc_block(doc: str, marker: str, nth: int = 0) -> str:
    """The ``nth`` fenced block after ``marker`` in docs/formats/<doc>, as
    the text a program printing it writes (every line ends in a newline)."""
    text = (DOCS / doc).read_text()
    pos = text.index(marker)
    for _ in range(nth + 1):
        start = text.index("```\n", pos) + 4
        end = text.index("\n```", start)
        pos = end + 4
    return text[start:end] + "\n"


#: rxe0 in the rxe-vm guest, as docs/formats/ibv_devinfo.md lists it
RXE0_DEVICE = dict(
    fw_version="0.0.0", node_guid="5054:00ff:fe77:0002", sys_image_guid="5054:00ff:fe77:0002",
    max_mr_size=2**64 - 1, page_size_cap=0xFFFFF000, vendor_id=0xFFFFFF, vendor_part_id=0, hw_ver=0,
    max_qp=1048560, max_qp_wr=1048576, device_cap_flags=0x01A23C76, max_sge=32, max_sge_rd=32, max_cq=1048576,
    max_cqe=32767, max_mr=1048575, max_pd=1048576, max_qp_rd_atom=128, max_ee_rd_atom=0, max_res_rd_atom=258048,
    max_qp_init_rd_atom=128, max_ee_init_rd_atom=0, atomic_caps=1, max_ee=0, max_rdd=0, max_mw=4096,
    max_raw_ipv6_qp=0, max_raw_ethy_qp=0, max_mcast_grp=8192, max_mcast_qp_attach=56,
    max_total_mcast_qp_attach=458752, max_ah=32767, max_fmr=0, max_map_per_fmr=0, max_srq=917503,
    max_srq_wr=1048576, max_srq_sge=27, max_pkeys=64, local_ca_ack_delay=15, phys_port_cnt=1)
RXE0_PORT = dict(
    state=4, max_mtu=5, active_mtu=3, gid_tbl_len=1024, port_cap_flags=0x00010000, max_msg_sz=0x800000,
    pkey_tbl_len=1, lid=0, sm_lid=0, lmc=0, max_vl_num=1, sm_sl=0, subnet_timeout=0, init_type_reply=0,
    active_width=1, active_speed=1, phys_state=5, link_layer=2, bad_pkey_cntr=0, qkey_viol_cntr=0)
RXE0_GIDS = [ipaddress.IPv6Address("fe80::5054:ff:fe77:2").packed, ipaddress.IPv6Address("::ffff:10.77.0.2").packed]


class _FakeContext:
    """A Context on the documented rxe0 (2 vCPUs: num_comp_vectors 2)."""

    num_comp_vectors = 2

    def __init__(self, name=None):
        if name != "rxe0":
            raise ibv_devinfo.PyverbsError("no such device", 19)

    def close(self):
        pass

    def query_device_ex(self):
        return types.SimpleNamespace(**RXE0_DEVICE)

    def query_port(self, port):
        return types.SimpleNamespace(**RXE0_PORT)

    def query_gid(self, port, index):
        return types.SimpleNamespace(raw=RXE0_GIDS[index] if index < len(RXE0_GIDS) else bytes(16))

    def query_gid_type(self, port, index):
        if index >= len(RXE0_GIDS):
            raise ibv_devinfo.PyverbsError("free slot", 61)
        return 1                                    # IBV_GID_TYPE_SYSFS_ROCE_V2


class _FakeConn:
    def call(self, op, **kw):
        assert op == "links"
        return {"links": [{"ifname": "rxe0", "port": 1, "node_guid": "5054:00ff:fe77:0002",
                           "sys_image_guid": "5054:00ff:fe77:0002", "gids": [g.hex() for g in RXE0_GIDS],
                           "port_attr": RXE0_PORT}]}, []

    def close(self):
        pass


@pytest.fixture
def doc_rxe0(monkeypatch):
    fake = types.SimpleNamespace(
        Context=_FakeContext, management=_FakeConn,
        get_device_list=lambda: [types.SimpleNamespace(name=b"rxe0", node_guid="5054:00ff:fe77:0002")])
    monkeypatch.setattr(ibv_devinfo, "verbs_device", fake)
    monkeypatch.setattr(ibstat, "verbs_device", fake)


def test_docs_ibv_devices(doc_rxe0, capsys):
    assert run(capsys, ibv_devices, prog="ibv_devices") == \
        (0, doc_block("ibv_devices.md", "## Worked examples"), "")


def test_docs_ibv_devinfo(doc_rxe0, capsys):
    ex1 = doc_block("ibv_devinfo.md", "## Worked example 1")
    for argv in ([], ["-d", "rxe0"], ["-d", "rxe0", "-i", "1"]):
        assert run(capsys, ibv_devinfo, *argv, prog="ibv_devinfo") == (0, ex1, "")
    assert run(capsys, ibv_devinfo, "-v", "-d", "rxe0", prog="ibv_devinfo") == \
        (0, doc_block("ibv_devinfo.md", "## Worked example 2"), "")
    assert run(capsys, ibv_devinfo, "-l", prog="ibv_devinfo") == \
        (0, doc_block("ibv_devinfo.md", "`-l` output (v44)"), "")
    usage = doc_block("ibv_devinfo.md", "usage() — printed to **stdout**").replace("%s", "ibv_devinfo")
    assert run(capsys, ibv_devinfo, "-b", prog="ibv_devinfo") == \
        (255, usage, "ibv_devinfo: invalid option -- 'b'\n")


def test_docs_ibstat(doc_rxe0, capsys):
    full = doc_block("ibstat.md", "`ibstat` and `ibstat rxe0` and `ibstat -d rxe0`")
    for argv in ([], ["rxe0"], ["-d", "rxe0"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, full, "")
    for argv in (["rxe0", "1"], ["-v", "rxe0", "1"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, doc_block("ibstat.md", "`ibstat rxe0 1`:"), "")
    for argv in (["-s"], ["-s", "rxe0", "1"]):
        assert run(capsys, ibstat, *argv, prog="ibstat") == (0, doc_block("ibstat.md", "`ibstat -s`"), "")
    assert run(capsys, ibstat, "-l", prog="ibstat") == (0, doc_block("ibstat.md", "`ibstat -l`:"), "")
    assert run(capsys, ibstat, "-p", prog="ibstat") == (0, doc_block("ibstat.md", "`ibstat -p`:"), "")
    assert run(capsys, ibstat, "-h", prog="ibstat") == (2, "", doc_block("ibstat.md", "## Options (v44"))


def test_devinfo_failures(monkeypatch, capsys):
    """Open, query and list failures: the real messages and return codes,
    never a traceback."""
    class NoPort(_FakeContext):
        def query_port(self, port):
            raise ibv_devinfo.PyverbsError("port query failed", 22)

    class NoQuery(_FakeContext):
        def query_device_ex(self):
            raise ibv_devinfo.PyverbsError("device query failed", 5)

    class NoGid(_FakeContext):
        def query_gid(self, port, index):
            if index == 1:
                raise ibv_devinfo.PyverbsError("gid query failed", 22)
            return super().query_gid(port, index)

    def no_list():
        raise ibv_devinfo.PyverbsError("lost the daemon", 19)

    dev = types.SimpleNamespace(name=b"rxe0", node_guid="5054:00ff:fe77:0002")
    fake = types.SimpleNamespace(Context=_FakeContext, get_device_list=lambda: [dev])
    monkeypatch.setattr(ibv_devinfo, "verbs_device", fake)
    head = doc_block("ibv_devinfo.md", "## Worked example 1").partition("\t\tport:")[0]
    fake.Context = NoPort
    assert run(capsys, ibv_devinfo, prog="ibv_devinfo") == (22, head, "Failed to query port 1 props\n")
    fake.Context = NoQuery
    assert run(capsys, ibv_devinfo, prog="ibv_devinfo") == (2, "", "Failed to query device props\n")
    fake.Context = NoGid
    rc, out, err = run(capsys, ibv_devinfo, "-v", prog="ibv_devinfo")
    assert (rc, err) == (22, "Failed to query gid to port 1, index 1\n")
    assert out.endswith("\t\t\tphys_state:\t\tLINK_UP (5)\n\t\t\tGID[  0]:\t\tfe80::5054:ff:fe77:2, RoCE v2\n")
    fake.Context = _FakeContext
    fake.get_device_list = lambda: [types.SimpleNamespace(name=b"mlx5_0", node_guid="0"), dev]
    rc, out, err = run(capsys, ibv_devinfo, prog="ibv_devinfo")      # the next device is still printed
    assert (rc, out, err) == (1, doc_block("ibv_devinfo.md", "## Worked example 1"), "Failed to open device\n")
    fake.get_device_list = no_list
    assert run(capsys, ibv_devinfo, prog="ibv_devinfo") == \
        (255, "", "Failed to get IB devices list: No such device\n")
    assert run(capsys, ibv_devinfo, "-l", prog="ibv_devinfo") == \
        (255, "", "Failed to get IB devices list: No such device\n")
    assert run(capsys, ibv_devices, prog="ibv_devices") == (1, "", "Failed to get IB devices list: No such device\n")


def test_ibstat_rate_strings():
    """Rate: the integer part of the kernel's rate text, 2.5 for 1X SDR,
    ``(FDR10)`` for FDR10 (docs/formats/ibstat.md, "Rate" values)."""
    def rate(speed, width):
        port = ibstat._port({"port": 1, "gids": [], "port_attr": {**RXE0_PORT, "active_speed": speed,
                                                                   "active_width": width}})
        lines = []
        ibstat.port_dump(port, True, lines.append)
        return lines[3]
    assert rate(1, 1) == "Rate: 2.5\n"          # 2.5 Gb/sec (1X SDR)
    assert rate(1, 2) == "Rate: 10\n"           # 10 Gb/sec (4X SDR)
    assert rate(16, 2) == "Rate: 56\n"          # 56 Gb/sec (4X FDR)
    assert rate(32, 2) == "Rate: 100\n"         # 100 Gb/sec (4X EDR)
    assert rate(16, 1) == "Rate: 14\n"          # 14 Gb/sec (1X FDR)
    assert rate(8, 2) == "Rate: 40 (FDR10)\n"   # 40 Gb/sec (4X FDR10)
    assert rate(1, 3) == "Rate: 0\n"            # rate_show fails: no rate
