"""The daemon's statistics commands: RDMA_NLDEV_CMD_STAT_* as control
commands (``rdma statistic``) and the live snapshot ``softrdma top`` reads.

Each ``cmd_stat_*`` is what the kernel's nldev.c handler of the same
netlink command does, with the same checks in the same order and the same
errno:

==================  ==========================================================
stat_get            RDMA_NLDEV_CMD_STAT_GET doit: the port's hw counters
                    (no ``res``); a port's QP counter mode (``res: qp,
                    mode``); one counter (``res: qp, cntn``)
stat_dump           RDMA_NLDEV_CMD_STAT_GET dump with STAT_RES=QP: every
                    counter of a device (of one port if ``port``), paged
stat_set            RDMA_NLDEV_CMD_STAT_SET: auto mode on/off, bind a QP
                    (to a new counter or ``cntn``), optional counters
stat_del            RDMA_NLDEV_CMD_STAT_DEL: unbind a QP from a counter
stat_get_status     RDMA_NLDEV_CMD_STAT_GET_STATUS: the port's counter names
                    and which are optional (rxe: none)
stat_snapshot       softrdma's own: per device its traffic and counter
                    totals, per QP its counters (paged), for ``top``
==================  ==========================================================

STAT_SET and STAT_DEL carry RDMA_NL_ADMIN_PERM: without CAP_NET_ADMIN the
requester gets EPERM.  Devices are named by their index (``dev``), as
netlink does; an unknown index or an invalid port is EINVAL.

Counters are read from the QPs' existing count lists when asked; the data
path never learns that anyone is looking (``rdma_counter``).
"""

from __future__ import annotations

import errno
import json

from ...enums import IBV_QP_PORT, IBV_QP_STATE, IBV_QPS_INIT
from ...transport.counters import QP_COUNTERS, HW_COUNTERS, Counter
from ...uapi.control import MAX_MSG
from ...uapi.rdma_netlink import RDMA_COUNTER_MASK_PID, RDMA_COUNTER_MASK_QP_TYPE, RDMA_COUNTER_MODE_AUTO
from ..rdma_counter import PortCounter, RdmaCounter, nl_error
from ..session import net_admin

#: a reply page stays well under one control message
PAGE_BYTES = MAX_MSG // 2
QP_COUNTER_NAMES = [c.name for c in QP_COUNTERS]
ALL_COUNTER_NAMES = [c.name for c in Counter]


def page(items: list, start: int) -> tuple[list, int | None]:
    """Items from ``start`` that fit one reply, and where the next page
    starts (None: that was the last)."""
    out, size = [], 0
    for i in range(max(0, start), len(items)):
        n = len(json.dumps(items[i], separators=(",", ":"))) + 1
        if out and size + n > PAGE_BYTES:
            return out, i
        out.append(items[i])
        size += n
    return out, None


def counter_entry(c: RdmaCounter) -> dict:
    """fill_res_counter_entry(): the port, the id, the mode (with the auto
    criteria the counter was made for), the bound QPNs and the values."""
    e = {"port": c.port, "cntn": c.id, "mode": c.mode}
    if c.mode == RDMA_COUNTER_MODE_AUTO:
        if c.mask & RDMA_COUNTER_MASK_QP_TYPE:
            e["qp_type"] = int(c.qp_type)
        if c.mask & RDMA_COUNTER_MASK_PID and c.pid is not None:
            e["pid"] = c.pid
    v = c.values()
    e["lqpn"] = c.qpns()
    e["values"] = [v[i] for i in QP_COUNTERS]
    return e


# -- state: the daemon's ``port_counters``, device -> its PortCounter
def port_counter(daemon, dev) -> PortCounter:
    """The device's rdma_port_counter (one port)."""
    pcs = daemon.port_counters
    pc = pcs.get(dev)
    if pc is None:
        pc = pcs[dev] = PortCounter(1)
    return pc


def stat_device_removed(daemon, dev) -> None:
    daemon.port_counters.pop(dev, None)


# -- hooks from the verbs commands
def stat_modify_qp(daemon, dev, dqp, attr: dict, mask: int) -> None:
    """_ib_modify_qp(): a QP going to INIT with a port is bound by the
    auto-mode rule, before the modify itself (its failure does not
    undo the binding, as in the kernel)."""
    if mask & IBV_QP_PORT and mask & IBV_QP_STATE and attr.get("qp_state") == IBV_QPS_INIT \
            and attr.get("port_num") == 1:
        port_counter(daemon, dev).bind_qp_auto(dqp.qp, dqp.owner.pid)


def stat_destroy_qp(daemon, dev, dqp) -> None:
    port_counter(daemon, dev).qp_destroyed(dqp.qp)


# -- helpers
def _stat_dev(daemon, m: dict):
    """ib_device_get_by_index(): EINVAL for an index no device has."""
    idx = m.get("dev")
    dev = next((d for d in daemon.devices.values() if isinstance(idx, int) and d.ifindex == idx), None)
    if dev is None:
        raise nl_error(errno.EINVAL)
    return dev


def _stat_port(m: dict, required: bool = True) -> int:
    """rdma_is_port_valid(): softrdma devices have port 1."""
    port = m.get("port")
    if port is None and not required:
        return 0
    if port != 1:
        raise nl_error(errno.EINVAL)
    return port


def _stat_admin(c) -> None:
    """RDMA_NL_ADMIN_PERM."""
    if not net_admin(c.pid):
        raise nl_error(errno.EPERM)


def _stat_qp(dev, qpn):
    """rdma_counter_get_qp(): the transport QP with that QPN, or None."""
    dqp = dev.qps.get(qpn) if isinstance(qpn, int) else None
    return (dqp.qp, dqp.owner.pid) if dqp is not None else (None, None)


# -- RDMA_NLDEV_CMD_STAT_GET
def cmd_stat_get(daemon, c, m, fds):
    res = m.get("res")
    dev = _stat_dev(daemon, m)
    if res is None:                         # stat_get_doit_default_counter()
        port = _stat_port(m)
        hw = dev.hw_counters()
        return {"ifindex": dev.ifindex, "ifname": dev.name, "port": port,
                "hwcounters": [[cnt.name, hw[cnt.name]] for cnt in HW_COUNTERS]}, []
    if res != "qp":
        raise nl_error(errno.EINVAL)
    if "cntn" in m:                         # nldev_res_get_counter_doit()
        port = _stat_port(m, required=False)
        if not port:                         # counters are per port, not per device
            raise nl_error(errno.EINVAL)
        cnt = port_counter(daemon, dev).counters.get(m["cntn"])
        if cnt is None:
            raise nl_error(errno.ENOENT)
        return {"ifindex": dev.ifindex, "ifname": dev.name, "names": QP_COUNTER_NAMES,
                "counters": [counter_entry(cnt)]}, []
    if not m.get("mode"):                   # stat_get_doit_qp()
        raise nl_error(errno.EINVAL)
    port = _stat_port(m)
    pc = port_counter(daemon, dev)
    out = {"ifindex": dev.ifindex, "ifname": dev.name, "port": port, "mode": pc.mode}
    if pc.mode == RDMA_COUNTER_MODE_AUTO:
        out["mask"] = pc.mask
    return out, []


def cmd_stat_dump(daemon, c, m, fds):
    """nldev_res_get_counter_dumpit(): counters in id order."""
    if m.get("res") != "qp":
        raise nl_error(errno.EINVAL)
    dev = _stat_dev(daemon, m)
    port = _stat_port(m, required=False)
    pc = port_counter(daemon, dev)
    entries = [counter_entry(pc.counters[i]) for i in sorted(pc.counters)
               if not port or pc.counters[i].port == port]
    items, nxt = page(entries, int(m.get("start", 0)))
    return {"ifindex": dev.ifindex, "ifname": dev.name, "names": QP_COUNTER_NAMES, "counters": items,
            "next": nxt}, []


# -- RDMA_NLDEV_CMD_STAT_SET / _DEL
def cmd_stat_set(daemon, c, m, fds):
    _stat_admin(c)
    dev = _stat_dev(daemon, m)
    port = _stat_port(m)
    if "mode" not in m and "hwcounters" not in m:
        raise nl_error(errno.EINVAL)
    out = {"ifindex": dev.ifindex, "ifname": dev.name, "port": port}
    pc = port_counter(daemon, dev)
    if "mode" in m:                          # nldev_stat_set_mode_doit()
        if m.get("res") != "qp":
            raise nl_error(errno.EINVAL)
        if m["mode"] == "auto":
            pc.set_auto_mode(int(m.get("mask", 0)))
        else:
            if "lqpn" not in m:
                raise nl_error(errno.EINVAL)
            qp, pid = _stat_qp(dev, m["lqpn"])
            if "cntn" in m:
                cnt = pc.bind_qpn(qp, int(m["cntn"]))
            else:
                cnt = pc.bind_qpn_alloc(qp, pid)
            out.update(cntn=cnt.id, lqpn=qp.qp_num)
    if "hwcounters" in m:                    # nldev_stat_set_counter_dynamic_doit()
        if not isinstance(m["hwcounters"], list):
            raise nl_error(errno.EINVAL)
        # every index must name an IB_STAT_FLAG_OPTIONAL counter, and rxe has
        # none: any index is EINVAL; the empty set (``unset``) disables all
        if m["hwcounters"]:
            raise nl_error(errno.EINVAL)
    return out, []


def cmd_stat_del(daemon, c, m, fds):
    """nldev_stat_del_doit(): attributes first, then the device and port."""
    _stat_admin(c)
    if m.get("res") is None or "dev" not in m or "port" not in m or "cntn" not in m or "lqpn" not in m:
        raise nl_error(errno.EINVAL)
    if m["res"] != "qp":
        raise nl_error(errno.EINVAL)
    dev = _stat_dev(daemon, m)
    port = _stat_port(m)
    qp, _ = _stat_qp(dev, m["lqpn"])
    port_counter(daemon, dev).unbind_qpn(qp, int(m["cntn"]))
    return {"ifindex": dev.ifindex, "ifname": dev.name, "port": port, "cntn": m["cntn"],
            "lqpn": m["lqpn"]}, []


# -- RDMA_NLDEV_CMD_STAT_GET_STATUS
def cmd_stat_get_status(daemon, c, m, fds):
    """nldev_stat_get_counter_status_doit(): every counter's name and
    index; "dynamic" (enabled) only on optional ones -- rxe has none."""
    dev = _stat_dev(daemon, m)
    port = _stat_port(m)
    return {"ifindex": dev.ifindex, "ifname": dev.name, "port": port,
            "hwcounters": [{"name": cnt.name, "index": i} for i, cnt in enumerate(HW_COUNTERS)]}, []


# -- softrdma top
def cmd_stat_snapshot(daemon, c, m, fds):
    """Every device's port traffic (what crossed the wire or the
    loopback path) and counter totals, then every QP's counters, paged
    from ``start``; the device part comes with the first page only."""
    start = int(m.get("start", 0))
    out = {"names": ALL_COUNTER_NAMES}
    qps = []
    devices = []
    for dev in sorted(daemon.devices.values(), key=lambda d: d.ifindex):
        pc = port_counter(daemon, dev)
        for qpn in sorted(dev.qps):
            dqp = dev.qps[qpn]
            q = dqp.qp
            bound = pc.of_qp.get(qpn)
            qps.append([dev.name, qpn, int(q.qp_type), int(q.state), dqp.owner.pid,
                        bound.id if bound is not None else None, list(q.cnt),
                        int(q.rp.rc) if q.rp is not None else None])     # DCQCN's current rate, Mb/s
        if not start:
            devices.append({"ifindex": dev.ifindex, "ifname": dev.name, "port": 1, "state": dev.state,
                            "netdev": dev.netdev, "traffic": dict(dev.traffic),
                            "totals": dev.counter_totals(), "rx_dropped": dict(dev.rx_dropped),
                            "qps": len(dev.qps), "counters": len(pc.counters)})
    if not start:
        out["devices"] = devices
    out["qps"], out["next"] = page(qps, start)
    return out, []
