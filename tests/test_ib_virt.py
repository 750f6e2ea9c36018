"""SR-IOV VFs of an InfiniBand PF without virtualization, end to end on a
live fabric with softrdma's SM, as the IB virtualization procedure goes:
SRIOV_EN / NUM_OF_VFS with mlxconfig and a firmware reset, VFs through
``mlx5_num_vfs``, ``policy`` Follow, the VFs' port and node GUIDs written
to ``sriov/N/port`` and ``node`` (00:...:00 until then).  Each VF is an
IB device on the PF's port: the PF's LID, its own GID; its port GUID is an
alias GUID of the PF's port at the SA (GUIDInfoRecord), a PathRecord to
its GID gives the PF's LID; RC traffic with a host one switch away goes
with a GRH to the VF's GID; policy Down takes the VF's port down.  Then
the SM again with ``virt_enabled 2``: the VFs become virtual ports with
LIDs of their own.  (ibsim and the distributions' opensm have no
virtualization: only softrdma's SM is run here.)"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys

import pytest

from ib_helpers import IbHosts, link
from ibfabric_helpers import NET_2SW
from sm_helpers import have_ibsim
from test_fw_tools import ok, tool
from test_ib_device import ACC, Host
from test_vpi import rc_lid_routed, rc_send, two_hosts
from wait_helpers import stop, wait_for

from softrdma.enums import IBV_MTU_1024, IBV_QPT_RC
from softrdma.verbs import addr as addr_m, qp as qp_m

PREFIX = "fe80000000000000"
VF_PORT = ("11:11:11:11:11:11:01:00", "11:11:11:11:11:11:01:10")
VF_NODE = ("11:11:11:11:11:11:01:01", "11:11:11:11:11:11:01:11")


def _hosts(factory, shm, sm: str) -> IbHosts:
    """The fabric, ``sm``'s sweep, daemons on h1 (the PF) and h3 (one switch away)."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    return IbHosts(factory.mktemp(f"ibvirt-{sm}"), shm / sm, NET_2SW, ("h1", "h3"), sm)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, shm_path_module):
    h = _hosts(tmp_path_factory, shm_path_module, "softrdma")
    yield h
    h.close()


def sysdev(rd: str, *parts: str) -> str:
    return os.path.join(rd, "sys", "class", "infiniband", "mlx5_0", "device", *parts)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def rc_with_grh(a: Host, b: Host, a_gid: bytes, b_gid: bytes) -> None:
    """RC SEND a -> b, byte-exact, each side's AH with a GRH to the other's GID."""
    def rts(q, peer_qpn, dlid, dgid):
        at = qp_m.QPAttr()
        at.qp_access_flags = ACC
        at.path_mtu = IBV_MTU_1024
        at.dest_qp_num = peer_qpn
        at.max_dest_rd_atomic = at.max_rd_atomic = 4
        at.min_rnr_timer, at.timeout, at.retry_cnt, at.rnr_retry = 12, 14, 7, 7
        at.ah_attr = addr_m.AHAttr(gr=addr_m.GlobalRoute(dgid=addr_m.GID(dgid), sgid_index=0, hop_limit=64),
                                   port_num=1, dlid=dlid)
        q.to_rts(at)
    qa, qb = a.qp(IBV_QPT_RC), b.qp(IBV_QPT_RC)
    rts(qa, qb.qp_num, b.lid, b_gid)
    rts(qb, qa.qp_num, a.lid, a_gid)
    rc_send(a, b, qa, qb, 50_000)


def test_ib_vfs_alias_guids_path_records_and_traffic(hosts):
    rd, peer = hosts.daemons["h1"].run_dir, hosts.daemons["h3"].run_dir
    pf_lid = hosts.lid["h1"]
    # the firmware first: SR-IOV with 2 VFs, applied at the reset
    ok(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "SRIOV_EN=1", "NUM_OF_VFS=2")
    ok(rd, "mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    assert read(sysdev(rd, "sriov_totalvfs")) == "2\n"
    ok(rd, "sysfs-write", "/sys/class/infiniband/mlx5_0/device/mlx5_num_vfs", "2")
    assert read(sysdev(rd, "sriov_numvfs")) == "2\n"
    for i in (0, 1):                                  # no GUIDs until written
        assert read(sysdev(rd, "sriov", str(i), "node")) == "00:00:00:00:00:00:00:00\n"
        assert read(sysdev(rd, "sriov", str(i), "port")) == "00:00:00:00:00:00:00:00\n"
    vf = link(rd, "mlx5_1")
    assert vf["port_attr"]["link_layer"] == 1 and vf["gids"] == []
    # the seed's procedure: policy, then the port and node GUIDs of each VF
    base = "/sys/class/infiniband/mlx5_0/device/sriov"
    for i in (0, 1):
        ok(rd, "sysfs-write", f"{base}/{i}/policy", "Follow")
        ok(rd, "sysfs-write", f"{base}/{i}/port", VF_PORT[i])
        ok(rd, "sysfs-write", f"{base}/{i}/node", VF_NODE[i])
    r = tool(rd, "sysfs-write", f"{base}/0/port", "11:22:zz")
    assert r.returncode == 1 and "Invalid argument" in r.stderr
    assert read(sysdev(rd, "sriov", "0", "port")) == VF_PORT[0] + "\n"
    assert read(sysdev(rd, "sriov", "1", "policy")) == "Follow\n"
    gid = {i: PREFIX + VF_PORT[i].replace(":", "") for i in (0, 1)}
    for i, name in ((0, "mlx5_1"), (1, "mlx5_2")):
        d = link(rd, name)
        pa = d["port_attr"]
        sm_lid = link(rd, "mlx5_0")["port_attr"]["sm_lid"]
        assert (pa["state"], pa["lid"], pa["sm_lid"], d["gids"]) == (4, pf_lid, sm_lid, [gid[i]])
        assert d["node_guid"] == VF_NODE[i].replace(":", "")[:4] + ":" + ":".join(
            VF_NODE[i].replace(":", "")[k:k + 4] for k in (4, 8, 12))
    # the SA knows the VFs' GUIDs as the PF port's alias GUIDs; a PathRecord to a VF's GID: the PF's LID
    def gir():
        rc, out = (lambda r: (r.returncode, r.stdout))(tool(peer, "saquery", "-C", "mlx5_0", "GIR", str(pf_lid)))
        return out if rc == 0 and VF_PORT[1].replace(":", "") in out else None
    out = wait_for(gir, 20, "the VFs' alias GUIDs at the SA")
    assert re.search(rf"GUID 1\.+0x{VF_PORT[0].replace(':', '')}", out) and \
        re.search(rf"GUID 2\.+0x{VF_PORT[1].replace(':', '')}", out), out
    peer_gid = link(peer, "mlx5_0")["gids"][0]
    colon = lambda g: ":".join(g[k:k + 4] for k in range(0, 32, 4))      # noqa: E731
    r = tool(peer, "saquery", "-C", "mlx5_0", "--sgid-to-dgid", f"{colon(peer_gid)}-{colon(gid[0])}")
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^\s+dlid\.+{pf_lid}$", r.stdout, re.M), r.stdout
    assert re.search(rf"^\s+dgid\.+{ipaddress.IPv6Address(bytes.fromhex(gid[0]))}$", r.stdout, re.M), r.stdout
    # RC between VF 0 and the host one switch away: the PF's LID, the VF's GID
    with two_hosts(rd, "mlx5_1", peer, "mlx5_0") as (a, b):
        assert a.lid == pf_lid
        rc_with_grh(a, b, bytes.fromhex(gid[0]), bytes.fromhex(peer_gid))
    # policy Down: the VF's port goes down, the other VF's stays
    ok(rd, "sysfs-write", f"{base}/0/policy", "Down")
    assert link(rd, "mlx5_1")["port_attr"]["state"] == 1 and link(rd, "mlx5_2")["port_attr"]["state"] == 4
    # the VFs go with numvfs 0
    ok(rd, "sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov_numvfs", "0")
    assert [d["ifname"] for d in __import__("ib_helpers").control(rd, "links")["links"]] == ["rxe0", "mlx5_0"]


def test_virt_enabled_2_gives_the_vfs_lids_of_their_own(hosts, tmp_path):
    """The SM again with ``virt_enabled 2``: the PF's port announces its
    vports (VirtualizationInfo, VPortInfo); the SM enables virtualization,
    gives each VF's vport a LID and makes it Active; the switches forward
    it, a PathRecord to the VF's GID gives that LID, and LID-routed RC
    traffic (no GRH) reaches the VF."""
    rd, peer = hosts.daemons["h1"].run_dir, hosts.daemons["h3"].run_dir
    base = "/sys/class/infiniband/mlx5_0/device/sriov"
    ok(rd, "sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov_numvfs", "2")
    for i in (0, 1):
        ok(rd, "sysfs-write", f"{base}/{i}/port", VF_PORT[i])
        ok(rd, "sysfs-write", f"{base}/{i}/node", VF_NODE[i])
    fab = hosts.fabric
    stop(fab.sm)
    fab.procs.remove(fab.sm)
    conf = tmp_path / "opensm.conf"
    conf.write_text("virt_enabled 2\n")
    log = tmp_path / "virt-osm.log"
    fab.sm = subprocess.Popen([sys.executable, "-m", "softrdma", "opensm", "-s", "1", "-F", str(conf), "-f", str(log)],
                              cwd=fab.tmp, env=fab.env(), stdout=open(tmp_path / "sm.out", "w"),
                              stderr=subprocess.STDOUT)
    fab.procs.append(fab.sm)
    wait_for(lambda: log.exists() and "SUBNET UP" in log.read_text(), 60, "SUBNET UP", proc=fab.sm)
    pf_lid = fab.wait_active(rd)
    vlid = wait_for(lambda: (lambda pa: pa["lid"] if pa["state"] == 4 and pa["lid"] not in (0, pf_lid) else None)(
        link(rd, "mlx5_1")["port_attr"]), 30, "VF 0's own LID")
    assert link(rd, "mlx5_2")["port_attr"]["lid"] not in (0, pf_lid, vlid)
    peer_gid = link(peer, "mlx5_0")["gids"][0]
    colon = lambda g: ":".join(g[k:k + 4] for k in range(0, 32, 4))      # noqa: E731
    vgid = PREFIX + VF_PORT[0].replace(":", "")
    r = tool(peer, "saquery", "-C", "mlx5_0", "--sgid-to-dgid", f"{colon(peer_gid)}-{colon(vgid)}")
    assert r.returncode == 0 and re.search(rf"^\s+dlid\.+{vlid}$", r.stdout, re.M), r.stdout + r.stderr
    # LID-routed RC between the VF (its own LID) and the host one switch away
    with two_hosts(rd, "mlx5_1", peer, "mlx5_0") as (a, b):
        assert a.lid == vlid
        rc_lid_routed(a, b, 30_000)


@pytest.fixture(scope="module")
def opensm_hosts(tmp_path_factory, shm_path_module):
    h = _hosts(tmp_path_factory, shm_path_module, "opensm")
    yield h
    h.close()


def test_the_real_opensm_takes_the_alias_guids(opensm_hosts):
    """The real opensm (through libumad2sim) as the SA: the VF's port GUID
    registered as an alias GUID of the PF's port, and a PathRecord to the
    VF's GID giving the PF's LID -- the same answers as softrdma's SA."""
    hosts = opensm_hosts
    rd, peer = hosts.daemons["h1"].run_dir, hosts.daemons["h3"].run_dir
    pf_lid = hosts.lid["h1"]
    ok(rd, "mlxconfig", "-d", "mlx5_0", "-y", "set", "SRIOV_EN=1", "NUM_OF_VFS=1")
    ok(rd, "mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    ok(rd, "sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov_numvfs", "1")
    ok(rd, "sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov/0/port", VF_PORT[0])

    def gir():
        r = tool(peer, "saquery", "-C", "mlx5_0", "GIR", str(pf_lid))
        return r.stdout if r.returncode == 0 and VF_PORT[0].replace(":", "") in r.stdout else None
    out = wait_for(gir, 20, "the VF's alias GUID at opensm's SA")
    assert re.search(rf"GUID 1\.+0x{VF_PORT[0].replace(':', '')}", out), out
    peer_gid = link(peer, "mlx5_0")["gids"][0]
    colon = lambda g: ":".join(g[k:k + 4] for k in range(0, 32, 4))      # noqa: E731
    vgid = PREFIX + VF_PORT[0].replace(":", "")
    r = tool(peer, "saquery", "-C", "mlx5_0", "--sgid-to-dgid", f"{colon(peer_gid)}-{colon(vgid)}")
    assert r.returncode == 0 and re.search(rf"^\s+dlid\.+{pf_lid}$", r.stdout, re.M), r.stdout + r.stderr


def test_guidinfo_record_set_rules_and_vport_state_codec():
    """The SA's GUIDInfoRecord Set as opensm's: LID and BlockNum required,
    GUID 0 of block 0 read-only, an alias another port holds refused at
    that index (0 in the answer), Delete frees it; VPortState nibbles."""
    from types import SimpleNamespace

    from softrdma.sm.sa_guidinfo import GIR_COMP_BLOCKNUM, GIR_COMP_GID0, GIR_COMP_LID, GuidInfo
    from softrdma.wire.sa import SA_STATUS_INSUFFICIENT_COMPONENTS, SA_STATUS_REQ_INVALID, SaMethod
    from softrdma.wire.smp import PORT_INFO, decode_guid_info, encode_guid_info
    from softrdma.wire.smp_virt import decode_vport_states, encode_vport_states

    pi = bytes(PORT_INFO.encode(GuidCap=32))
    a = SimpleNamespace(guid=0xA, lid=2, port_info=pi)
    b = SimpleNamespace(guid=0xB, lid=3, port_info=pi)
    by_lid = {2: a, 3: b}

    def rec(lid, guids):
        return lid.to_bytes(2, "big") + bytes(6) + encode_guid_info(guids)
    t = GuidInfo()
    key = GIR_COMP_LID | GIR_COMP_BLOCKNUM
    assert t.set_or_delete(0x02, GIR_COMP_LID, rec(2, [0] * 8), by_lid)[0] == SA_STATUS_INSUFFICIENT_COMPONENTS
    assert t.set_or_delete(0x02, key | GIR_COMP_GID0, rec(2, [7] + [0] * 7), by_lid)[0] == SA_STATUS_REQ_INVALID
    st, out = t.set_or_delete(0x02, key | GIR_COMP_GID0 << 1, rec(2, [0, 0x1111] + [0] * 6), by_lid)
    assert st == 0 and decode_guid_info(out[8:])[:2] == (0xA, 0x1111) and t.port_guid_of(0x1111) == 0xA
    st, out = t.set_or_delete(0x02, key | GIR_COMP_GID0 << 1, rec(3, [0, 0x1111] + [0] * 6), by_lid)
    assert st == 0 and decode_guid_info(out[8:])[1] == 0                # held by the other port
    assert [r[:3] for r in t.records(key, rec(2, [0] * 8), by_lid, [2, 3])] == [b"\x00\x02\x00"]
    t.set_or_delete(SaMethod.DELETE, key | GIR_COMP_GID0 << 1, rec(2, [0] * 8), by_lid)
    assert t.port_guid_of(0x1111) is None
    states = [4, 1] + [0] * 125 + [2]
    assert decode_vport_states(encode_vport_states(states)) == states
    assert encode_vport_states([0, 4])[:1] == b"\x04"
