"""VPI: one ConnectX-like PF switched between InfiniBand and Ethernet by
``mlxconfig set LINK_TYPE_P1`` and a firmware reset (``mlxfwreset``, or
the daemon starting again), on a live fabric with softrdma's SM.

The PF ``mlx5_0`` of one daemon starts as a RoCE device on lo; its IB
cable (``mlxconfig cable P1 ib ...``) goes to CA h2.  ETH -> IB at
mlxfwreset: the same name and bus address, link layer InfiniBand, Active
with a LID from the SM, RC traffic with another daemon's IB device on h1;
the daemon restarts: still IB; IB -> ETH at mlxfwreset: RoCE on lo again,
RC traffic; ibv_devinfo, ibstat and rdma link show follow each switch."""

from __future__ import annotations

import contextlib
import os
import re

import pytest

from daemon_helpers import RunningDaemon, softrdma_run
from ib_helpers import IbHosts, control, link
from ibfabric_helpers import NET_2SW
from rc_pair import RcPair
from sm_helpers import have_ibsim
from test_fw_tools import config_rows, ok, tool
from test_ib_device import Host, connect, wait
from test_sriov import _exchange

from softrdma.enums import IBV_QPT_RC, IBV_WC_SUCCESS, IBV_WR_SEND
from softrdma.verbs import qp as qp_m, addr as addr_m, wr as wr_m
from softrdma.verbs.device import Context


class Vpi:
    """A fabric with the SM's sweep done and a peer daemon's IB device on
    h1 (``IbHosts``); the daemon under test with its PF mlx5_0 on lo."""

    def __init__(self, tmp, shm):
        self.ib = IbHosts(tmp, shm, NET_2SW, ("h1",))
        self.fabric, self.peer, self.peer_lid = self.ib.fabric, self.ib.daemons["h1"], self.ib.lid["h1"]
        self.run_dir = str(shm / "vpi")
        os.makedirs(self.run_dir)
        self.daemon = None
        try:
            self.start()
        except BaseException:
            self.ib.close()
            raise

    def start(self):
        self.daemon = RunningDaemon(self.run_dir, devices=("mlx5_0:lo",))

    def restart(self):
        self.daemon.stop()
        self.start()

    def close(self):
        self.daemon.stop()
        self.ib.close()


@pytest.fixture(scope="module")
def vpi(tmp_path_factory, shm_path_module):
    assert have_ibsim(), "opensm/ibsim-utils/infiniband-diags missing"
    v = Vpi(tmp_path_factory.mktemp("vpi"), shm_path_module)
    yield v
    v.close()


def fn_row(run_dir: str) -> dict:
    return next(f for f in control(run_dir, "pci_functions")["functions"] if f["name"] == "mlx5_0")


def shows(run_dir: str, layer: str) -> None:
    """ibv_devinfo, ibstat and rdma link show say ``layer``."""
    out = ok(run_dir, "ibv_devinfo", "-d", "mlx5_0")
    assert re.search(rf"^\s+link_layer:\s+{layer}$", out, re.M), out
    assert re.search(r"^\s+vendor_part_id:\s+4119$", out, re.M), out
    out = ok(run_dir, "ibstat", "mlx5_0")
    assert f"Link layer: {layer}" in out, out
    out = ok(run_dir, "rdma", "link", "show", "mlx5_0/1")
    assert ("netdev lo" in out) == (layer == "Ethernet"), out


def rc_send(a: Host, b: Host, qa, qb, size: int) -> None:
    """SEND ``size`` random bytes from ``a`` to ``b`` on their connected RC
    QPs: both complete, the bytes arrive as sent."""
    data = os.urandom(size)
    a.mr.write(data, size)
    qb.post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(b.mr.buf, size, b.mr.lkey)]))
    qa.post_send(wr_m.SendWR(2, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, size, a.mr.lkey)]))
    assert [(w.status, w.byte_len) for w in wait(b.cq, 1)] == [(IBV_WC_SUCCESS, size)]
    assert [w.status for w in wait(a.cq, 1)] == [IBV_WC_SUCCESS]
    assert b.mr.read(size) == data


@contextlib.contextmanager
def two_hosts(a_run: str, a_name: str, b_run: str, b_name: str):
    """``Host`` on device ``a_name`` of the daemon in ``a_run``, and on ``b_name`` of ``b_run``."""
    with softrdma_run(a_run):
        a = Host(a_name)
    try:
        with softrdma_run(b_run):
            b = Host(b_name)
    except BaseException:
        a.close()
        raise
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def rc_lid_routed(a: Host, b: Host, size: int) -> None:
    """RC QPs connected LID to LID (no GRH), then ``rc_send``."""
    qa, qb = a.qp(IBV_QPT_RC), b.qp(IBV_QPT_RC)
    connect(qp_m, addr_m, qa, qb.qp_num, b.lid)
    connect(qp_m, addr_m, qb, qa.qp_num, a.lid)
    rc_send(a, b, qa, qb, size)


def rc_over_ib(v: Vpi) -> None:
    """RC SEND, byte-exact, from the PF (IB) to the peer's device on h1."""
    with two_hosts(v.run_dir, "mlx5_0", v.peer.run_dir, "mlx5_0") as (a, b):
        rc_lid_routed(a, b, 100_000)


def rc_over_roce(v: Vpi) -> None:
    with softrdma_run(v.run_dir):
        ctx = Context(name="mlx5_0")
    try:
        pair = RcPair(ctx)
        try:
            _exchange(pair)
        finally:
            pair.close()
    finally:
        ctx.close()


def test_link_type_eth_ib_eth_across_resets(vpi):
    rd = vpi.run_dir
    before = fn_row(rd)
    assert (before["bdf"], before["link_layer"], before["link_types"]["1"]) == ("0000:5e:00.0", "Ethernet", 2)
    assert config_rows(ok(rd, "mlxconfig", "-d", "mlx5_0", "q"))["LINK_TYPE_P1"] == ["ETH(2)"]
    # no IB cable yet: a switch to IB is refused at the reset, and nothing changes
    ok(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "LINK_TYPE_P1=IB")
    r = tool(rd, "mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    assert r.returncode == 1 and "no ib cable" in r.stderr, r.stderr
    assert link(rd, "mlx5_0")["port_attr"]["link_layer"] == 2
    out = ok(rd, "mlxconfig", "-d", "mlx5_0", "cable", "P1", "ib", "fabric", vpi.fabric.base, "node", "h2")
    assert re.search(rf"^P1 +IB +fabric {vpi.fabric.base} node h2 port 1$", out, re.M), out
    assert re.search(r"^P1 +ETH +lo$", out, re.M), out                  # recorded when it came up on lo
    r = tool(rd, "mlxconfig", "-d", "mlx5_0", "cable", "P1", "ib", "node", "h2")
    assert r.returncode == 3 and "Bad cable" in r.stderr
    # ETH -> IB at the firmware reset
    rows = config_rows(ok(rd, "mlxconfig", "-d", "mlx5_0", "-e", "q"))
    assert rows["LINK_TYPE_P1"] == ["*", "ETH(2)", "ETH(2)", "IB(1)"]
    ok(rd, "mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    lid = vpi.fabric.wait_active(rd)
    d = link(rd, "mlx5_0")
    assert d["port_attr"]["link_layer"] == 1 and lid not in (0, vpi.peer_lid) and d["ib"]["node"] == "h2"
    row = fn_row(rd)
    assert (row["bdf"], row["link_layer"], row["link_types"]["1"], row["psid"]) == \
        ("0000:5e:00.0", "InfiniBand", 1, before["psid"])
    assert row["node_guid"] == d["node_guid"] != before["node_guid"]     # the CA's GUID on the fabric
    with open(os.path.join(rd, "sys", "class", "infiniband", "mlx5_0", "device", "class")) as f:
        assert f.read() == "0x020700\n"
    assert config_rows(ok(rd, "mlxconfig", "-d", "mlx5_0", "q"))["LINK_TYPE_P1"] == ["IB(1)"]
    shows(rd, "InfiniBand")
    rc_over_ib(vpi)
    # the daemon starting again is a firmware boot: still IB, on its cable
    vpi.restart()
    assert vpi.fabric.wait_active(rd) == lid
    assert fn_row(rd)["link_layer"] == "InfiniBand"
    # IB -> ETH at the next reset: RoCE on lo again
    ok(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "LINK_TYPE_P1=ETH")
    assert link(rd, "mlx5_0")["port_attr"]["link_layer"] == 1          # not before the reset
    ok(rd, "mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    d = link(rd, "mlx5_0")
    assert (d["port_attr"]["link_layer"], d["netdev"], d["node_guid"]) == (2, "lo", before["node_guid"])
    assert fn_row(rd)["bdf"] == "0000:5e:00.0"
    shows(rd, "Ethernet")
    rc_over_roce(vpi)


def test_an_ib_link_add_is_an_ib_pf_and_vpi_is_refused(vpi):
    rd = vpi.peer.run_dir               # its mlx5_0 was added as an IB link: a PF configured IB
    assert config_rows(ok(rd, "mlxconfig", "-d", "mlx5_0", "q"))["LINK_TYPE_P1"] == ["IB(1)"]
    row = fn_row(rd)
    assert (row["link_layer"], row["part_id"]) == ("InfiniBand", 4119)
    r = tool(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "LINK_TYPE_P1=VPI")
    assert r.returncode == 1 and "LINK_TYPE_P1=VPI(3) is not supported" in r.stderr
    # a context open on it: the reset is refused (EBUSY), the port stays
    with softrdma_run(rd):
        ctx = Context(name="mlx5_0")
    try:
        ok(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "LINK_TYPE_P1=ETH")
        r = tool(rd, "mlxfwreset", "-d", "mlx5_0", "-y", "reset")
        assert r.returncode == 1 and "in use" in r.stderr
    finally:
        ctx.close()
    ok(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "LINK_TYPE_P1=IB")
    assert link(rd, "mlx5_0")["port_attr"]["link_layer"] == 1
