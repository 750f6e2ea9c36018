"""UD multicast to and from the SR-IOV VFs of an InfiniBand PF (no
virtualization: each VF's port GUID an alias GUID of the PF's port), end to
end on a live fabric with softrdma's SM: ``mckey -M MGID -b GID`` joins the
group through the SA under the VF's GID (or the PF's), the SM spans the
group's tree to the PF's port for a member known only by its alias GUID,
and the PF's port hands a multicast packet to the PF and to every VF, each
function's attached QPs receiving it; a VF's send reaches a host one switch
away.  Only softrdma's SM: the real opensm writes the alias GUIDs into the
PF port's GUIDInfo, where they show as GIDs of the PF too, so an AF_IB bind
to a VF's GID finds the PF first and the case would not exercise the VF."""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys

import pytest

from ib_helpers import link
from test_sm_sa_sminfo import mcmr, sa_set, subnet
from test_fw_tools import ok, tool
from test_ib_cma_gid import mckey
from test_ib_virt import PREFIX, VF_NODE, VF_PORT, _hosts
from wait_helpers import stop, wait_for

from softrdma.sm.mcast import mft
from softrdma.sm.sa import SubnetAdmin
from softrdma.wire.mad import Method
from softrdma.wire.sa import MCR_COMP, SaAttr

SYS = "/sys/class/infiniband/mlx5_0/device"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, shm_path_module):
    """h1 (the PF, 2 VFs with their GUIDs, policy Follow) and h3, one switch away."""
    h = _hosts(tmp_path_factory, shm_path_module, "softrdma")
    try:
        rd, pf_lid = h.run_dir("h1"), h.lid["h1"]
        ok(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "SRIOV_EN=1", "NUM_OF_VFS=2")
        ok(rd, "mlxfwreset", "-d", "mlx5_0", "-y", "reset")
        ok(rd, "sysfs-write", f"{SYS}/mlx5_num_vfs", "2")
        for i in (0, 1):
            for attr, val in (("policy", "Follow"), ("port", VF_PORT[i]), ("node", VF_NODE[i])):
                ok(rd, "sysfs-write", f"{SYS}/sriov/{i}/{attr}", val)

        def aliased():
            r = tool(h.run_dir("h3"), "saquery", "-C", "mlx5_0", "GIR", str(pf_lid))
            return r.returncode == 0 and all(g.replace(":", "") in r.stdout for g in VF_PORT)
        wait_for(aliased, 30, "the VFs' alias GUIDs at the SA")
        yield h
    finally:
        h.close()


def gid(rd: str, dev: str) -> str:
    return str(ipaddress.IPv6Address(bytes.fromhex(link(rd, dev)["gids"][0])))


def receivers(h, mgid: str, *members: tuple[str, str]) -> list:
    """An ``mckey`` receiver (-C 4) per (host, GID), each waited for until joined."""
    procs = []
    for host, g in members:
        p = mckey(h, host, "-M", mgid, "-b", g, "-C", "4")
        procs.append(p)
        lines = []

        def joined(p=p, lines=lines):
            ln = p.stdout.readline()
            lines.append(ln)
            return p.poll() is not None or ln.startswith("mckey: joined")
        wait_for(joined, 60, f"{host} {g}'s join", proc=p)
        assert re.match(r"mckey: joined dgid: \S+ mlid 0x[0-9a-f]+", lines[-1]), "".join(lines)
    return procs


def send_and_receive(h, mgid: str, sender: tuple[str, str], procs: list) -> None:
    """``sender`` sends 4 datagrams to the group: every receiver gets them all."""
    host, g = sender
    try:
        cli = subprocess.run([sys.executable, "-m", "softrdma", "mckey", "-M", mgid, "-b", g, "-s", "-C", "4"],
                             env={**h.daemons[host].env, "SOFTRDMA_AUTOSTART": "0"}, capture_output=True,
                             text=True, timeout=120)
        assert cli.returncode == 0 and cli.stdout.endswith("data transfers complete\ntest complete\n"
                                                           "return status 0\n"), cli.stdout + cli.stderr
        for p in procs:
            out, _ = p.communicate(timeout=30)
            assert out.endswith("receiving data transfers\ndata transfers complete\ntest complete\n"
                                "return status 0\n"), out
    finally:
        for p in procs:
            stop(p)


def test_multicast_to_and_from_ib_vfs(hosts):
    rd, peer = hosts.run_dir("h1"), hosts.run_dir("h3")
    vf, pf, other = gid(rd, "mlx5_1"), gid(rd, "mlx5_0"), gid(peer, "mlx5_0")
    assert link(rd, "mlx5_0")["gids"] == [link(rd, "mlx5_0")["gids"][0]]     # the VF's GID is the VF's only
    assert bytes.fromhex(link(rd, "mlx5_1")["gids"][0]) == bytes.fromhex(PREFIX + VF_PORT[0].replace(":", ""))
    # a group whose only member on the PF's port is the VF (known to the SM by its alias GUID)
    send_and_receive(hosts, "ff12:4d43::2:1", ("h3", other), receivers(hosts, "ff12:4d43::2:1", ("h1", vf)))
    # the VF and the PF in one group: each function's QP gets every packet
    g = "ff12:4d43::2:2"
    send_and_receive(hosts, g, ("h3", other), receivers(hosts, g, ("h1", vf), ("h1", pf)))
    # a VF's send reaches the host one switch away
    g = "ff12:4d43::2:3"
    send_and_receive(hosts, g, ("h1", vf), receivers(hosts, g, ("h3", other)))


def test_the_sm_spans_a_group_to_the_port_of_an_alias_member():
    """A member joined under an alias GUID: the MFTs reach its base port's
    switch port, and a sweep keeps it (the base port is still there)."""
    s = subnet()
    sa = SubnetAdmin(s)
    ph = next(p for p in s.end_ports() if not p.node.is_switch)
    alias = 0x1111111111110100
    sa.guidinfo.tables[ph.guid] = [ph.guid, alias]
    sa.guidinfo.alias[alias] = ph.guid
    create = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "JoinState", "QKey", "TClass", "PKey", "FlowLabel",
                                       "SL"))
    st, _ = sa_set(sa, Method.SET, SaAttr.MCMEMBER_RECORD, create,
                   mcmr(0xFF124D43 << 96 | 5, 0xFE80000000000000 << 64 | alias))
    assert st == 0
    sw, num = ph.remote.node, ph.remote.num
    assert mft(s, sa.groups, sa.port_by_gid)[sw][0xC001] >> num & 1
    assert 0xC001 not in mft(s, sa.groups)[sw]                 # by port GUIDs alone: no member here
    sa.mcast_members_present()
    assert len(sa.groups.by_mgid[(0xFF124D43 << 96 | 5).to_bytes(16, "big")].members) == 1
