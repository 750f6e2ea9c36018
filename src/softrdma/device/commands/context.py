"""Commands on the device and its port: list the devices, open one (the
uverbs context: get_context with the process's limits, and whether the
daemon may reach its memory: ODP), query the port, a GID and the GID table."""

from __future__ import annotations

import errno
import socket

from ...enums import (IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V2, IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_ATOMIC_WRITE,
                      IBV_ODP_SUPPORT_FLUSH, IBV_ODP_SUPPORT_IMPLICIT, IBV_ODP_SUPPORT_READ, IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_SRQ_RECV,
                      IBV_ODP_SUPPORT_WRITE)
from ...errors import VerbsError
from ...uapi import request as rq
from ...uapi.commands import PROTOCOL_VERSION
from ..ib import LINK_LAYER_IB
from ..odp import ProcessPages, may_access
from ..session import CAP_IPC_LOCK, CAP_SYS_RESOURCE, OBJECT_LIMITS, caps_of, memlock_limit
from ..sysfs import guid_str


def cmd_devices(daemon, c, m, fds):
    return {"version": PROTOCOL_VERSION,
            "devices": [{"name": d.name, "netdev": d.netdev, "node_guid": guid_str(d.node_guid)}
                        for d in daemon.devices.values()]}, []


def cmd_open(daemon, c, m, fds):
    name = rq.string(m, "device")
    dev = daemon.devices.get(name)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    if c.device is not None and c.device is not dev:
        # a uverbs file belongs to one device for its whole life
        raise VerbsError(errno.EINVAL, f"this connection has {c.device.name} open")
    if c.device is None:
        # a process's limits, read when it opens the device: contexts per
        # user (an rlimit: CAP_SYS_RESOURCE is exempt), and the pages its
        # MRs pin (ib_umem_get charges RLIMIT_MEMLOCK unless CAP_IPC_LOCK)
        caps = caps_of(c.pid)
        if not caps >> CAP_SYS_RESOURCE & 1:
            mine = sum(1 for cl in daemon.clients.values() if cl.uid == c.uid and cl.device is not None)
            if mine >= daemon.max_contexts_per_user:
                raise VerbsError(errno.EMFILE, f"user {c.uid} has {mine} contexts open, the most"
                                               f" softrdmad allows one user ({daemon.max_contexts_per_user})")
        c.memlock = None if caps >> CAP_IPC_LOCK & 1 else memlock_limit(c.pid)
        # ODP and MRs on the process's own memory: only if the daemon may
        # reach it (else the device has no ODP for this process)
        c.pages = ProcessPages(c.pid) if may_access(c.pid) == 0 else None
    c.device = dev
    caps = dev.caps
    return {"version": PROTOCOL_VERSION, "device": dev.name, "node_guid": guid_str(dev.node_guid), "attr": {
        "max_qp_wr": caps.max_qp_wr, "max_sge": caps.max_sge,
        "max_qp_rd_atom": caps.max_qp_rd_atom, "max_qp_init_rd_atom": caps.max_qp_init_rd_atom,
        "max_inline_data": caps.max_inline_data, "max_mtu": caps.max_mtu,
        "active_mtu": caps.active_mtu, "max_msg_sz": caps.max_msg_sz, "max_cqe": caps.max_cqe,
        "max_mr_size": caps.max_mr_size, "phys_port_cnt": caps.phys_port_cnt, "odp_caps": odp_caps(c.pages is not None),
        **{a: getattr(caps, a) for a in OBJECT_LIMITS.values()}, **daemon.pci.verbs_attrs(dev.name)}}, []


def odp_caps(reachable: bool) -> dict:
    """ibv_odp_caps as this device gives them to a process whose memory the
    daemon may (``reachable``) or may not reach: exactly what works -- an
    ODP MR is reached the same way by every engine, so each transport's
    operations on it are those the transport has (no atomics on UC, no
    RDMA on UD; XRC receives only through its SRQ; IBA 1.5's FLUSH and
    ATOMIC WRITE on RC, as rxe_odp.c has them)."""
    if not reachable:
        return {"general_caps": 0, "rc_odp_caps": 0, "uc_odp_caps": 0, "ud_odp_caps": 0, "xrc_odp_caps": 0}
    return {"general_caps": IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
            "rc_odp_caps": (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE
                            | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV
                            | IBV_ODP_SUPPORT_FLUSH | IBV_ODP_SUPPORT_ATOMIC_WRITE),
            "uc_odp_caps": IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE
            | IBV_ODP_SUPPORT_SRQ_RECV,
            "ud_odp_caps": IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV,
            "xrc_odp_caps": (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ
                             | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV)}


def _port(c, m):
    """The port ``m["port"]`` names: an IB device's port N, a RoCE
    device's one port (EINVAL for any other number)."""
    n = m.get("port", 1)
    dev = c.device
    if dev.link_layer == LINK_LAYER_IB:
        return dev.port(n)
    if n != 1:
        raise VerbsError(errno.EINVAL, "port must be 1")
    return dev


def cmd_query_port(daemon, c, m, fds):
    return {"attr": _port(c, m).port_attrs()}, []


def cmd_query_gid(daemon, c, m, fds):
    idx = m.get("index", 0)
    p = _port(c, m)
    if type(idx) is not int or not 0 <= idx < p.gid_table.capacity:
        raise VerbsError(errno.EINVAL, "GID index out of range")
    gid = p.gid(idx)
    kind = "IB" if c.device.link_layer == LINK_LAYER_IB else "RoCE v2"
    return {"gid": (gid or bytes(16)).hex(), "type": kind if gid is not None else None}, []


def cmd_query_pkey(daemon, c, m, fds):
    """ibv_query_pkey: entry ``index`` of the port's P_Key table (an IB
    port's as its SM programmed it; a RoCE port's one default entry);
    EINVAL past the table, as ib_query_pkey."""
    p = _port(c, m)
    idx = rq.uint(m, "index", rq.U16)
    table = p.pkey_table if c.device.link_layer == LINK_LAYER_IB else c.device.caps.pkey_table
    if idx >= len(table):
        raise VerbsError(errno.EINVAL, f"P_Key index {idx} past the table ({len(table)} entries)")
    return {"pkey": table[idx]}, []


def cmd_query_gid_table(daemon, c, m, fds):
    """ibv_query_gid_table / ibv_query_gid_ex (the kernel's
    rdma_query_gid_table): the valid entries of the port's GID table, at
    most ``max_entries`` -- EINVAL when they do not all fit, as the kernel."""
    max_entries = rq.uint(m, "max_entries", rq.U32)
    dev = c.device
    try:                                            # the netdev's index (the GID's ndev), 0 for none
        ifindex = socket.if_nametoindex(dev.netdev)
    except OSError:
        ifindex = 0
    entries = []
    gid_type = IBV_GID_TYPE_IB if dev.link_layer == LINK_LAYER_IB else IBV_GID_TYPE_ROCE_V2
    for p in getattr(dev, "ib_ports", (dev,)):
        for idx in range(p.gid_table.capacity):
            gid = p.gid(idx)
            if gid is not None:
                entries.append({"gid": gid.hex(), "gid_index": idx, "port_num": getattr(p, "num", 1),
                                "gid_type": gid_type, "ndev_ifindex": ifindex})
    if len(entries) > max_entries:
        raise VerbsError(errno.EINVAL, f"{len(entries)} GID entries, room for {max_entries}")
    return {"entries": entries}, []
