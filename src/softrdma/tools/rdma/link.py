"""``rdma link``: iproute2 6.1's rdma/link.c over softrdmad -- ``link
[show [DEV/PORT]]``, ``link add NAME type rxe netdev NETDEV`` (the daemon's
``link_add`` for RDMA_NLDEV_CMD_NEWLINK), ``link delete NAME``, and
softrdma's ``link set NAME faults ...`` and ``link add NAME type ib fabric
FABRIC node NODE [port N]`` (an InfiniBand device on CA port N, default 1,
of the CA NODE -- its node description, its name in the topology file, or
0x<node GUID> -- of the fabric ``softrdma fabric serve --sock FABRIC``
runs; ``NAME/2`` adds the IB device's second port, on any fabric and CA
port).  An IB port is shown as iproute2 shows one: subnet_prefix, lid,
sm_lid, lmc before the state."""

from __future__ import annotations

import errno
import os
import socket

from .utils import Rd, table_str

LINK_STATES = ("NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER")
PHYS_STATES = ("NOP", "SLEEP", "POLLING", "DISABLED", "ARMED", "LINK_UP", "LINK_ERROR_RECOVER", "PHY_TEST",
               "UNKNOWN", "OPA_OFFLINE", "UNKNOWN", "OPA_TEST")
LINK_HELP = ("Usage: {0} link show [DEV/PORT_INDEX]\n"
             "Usage: {0} link add NAME type TYPE netdev NETDEV\n"
             "Usage: {0} link add NAME type ib fabric FABRIC node NODE [port PORT]\n"
             "Usage: {0} link delete NAME\n")
# softrdma's extensions, left out of the help so that it prints what iproute2 prints:
#   link set NAME faults { off | [loss P%] [dup P%] [reorder P%] [corrupt P%] [delay TIME] }
#   link add NAME type rxe netdev NETDEV [ gso { on | off } ]   (shown by link show when off)


def cmd_link(rd: Rd) -> int:
    def link_help():
        rd.out(LINK_HELP.format(rd.prog))
        return 0

    def link_no_args():
        links = rd.links_now()
        if links is None:
            return -errno.EIO
        d = links.get(rd.dev["ifindex"])
        port = None if d is None else next((p for p in d.get("ports") or [d] if p.get("port", 1) == rd.port_idx),
                                           None)
        if port is None:
            rd.err(f"error: {os.strerror(errno.EINVAL)}")
            return -errno.EINVAL
        pa = port.get("port_attr", {})
        rd.open_obj()
        rd.pj("ifindex", d["ifindex"])
        rd.pr("ifname", d["ifname"], f"link {d['ifname']}/")
        rd.pr("port", rd.port_idx, f"{rd.port_idx} ")
        ib = port.get("ib")
        if ib is not None:                  # RDMA_NLDEV_ATTR_SUBNET_PREFIX, LID, SM_LID, LMC: an IB port's
            p = ib["subnet_prefix"]
            prefix = ":".join(p[i:i + 4] for i in range(0, 16, 4))
            rd.pr("subnet_prefix", prefix, f"subnet_prefix {prefix} ")
            rd.pr("lid", pa["lid"], f"lid {pa['lid']} ")
            rd.pr("sm_lid", pa["sm_lid"], f"sm_lid {pa['sm_lid']} ")
            rd.pr("lmc", pa["lmc"], f"lmc {pa['lmc']} ")
        state = pa.get("state", 4)
        phys = pa.get("phys_state", 5 if state == 4 else 3)
        rd.pr("state", table_str(LINK_STATES, state), f"state {table_str(LINK_STATES, state)} ")
        rd.pr("physical_state", table_str(PHYS_STATES, phys), f"physical_state {table_str(PHYS_STATES, phys)} ")
        if d.get("netdev"):
            rd.pr("netdev", d["netdev"], f"netdev {d['netdev']} ")
            idx = d.get("netdev_index", 0)
            rd.pr("netdev_index", idx, f"netdev_index {idx} " if rd.show_details else "")
        if d.get("gso") is False and ib is None:
            rd.pr("gso", "off", "gso off ")
        rd.newline()
        return 0

    def link_one_show():
        if not rd.port_idx:
            return 0
        return rd.exec_cmd([(None, link_no_args)], "parameter")

    def link_show():
        return rd.exec_link(link_one_show, True)

    def link_add():
        if rd.no_arg():
            rd.err("Please provide a link name to add.")
            return -errno.EINVAL
        name = rd.argv0()
        rd.arg_inc()

        def add_type():
            if rd.no_arg():
                rd.err("Please provide a link type name.")
                return -errno.EINVAL
            ltype = rd.argv0()
            rd.arg_inc()

            def add_netdev():
                if rd.no_arg():
                    rd.err("Please provide a net device name.")
                    return -errno.EINVAL
                netdev = rd.argv0()
                rd.arg_inc()
                gso = True
                if not rd.no_arg():             # softrdma's extension: gso on|off
                    if rd.argv != ["gso", "on"] and rd.argv != ["gso", "off"]:
                        rd.err(f"Unknown parameter '{' '.join(rd.argv)}'.")
                        return -errno.EINVAL
                    gso = rd.argv[1] == "on"
                    rd.argv = []
                return _newlink(rd, name, ltype, netdev, gso)

            def add_fabric():
                if rd.no_arg():
                    rd.err("Please provide a fabric name.")
                    return -errno.EINVAL
                fabric = rd.argv0()
                rd.arg_inc()
                if not rd.argv_match("node") or len(rd.argv) < 2:
                    rd.err("Please provide a node (its description, topology name or 0x<node GUID>).")
                    return -errno.EINVAL
                node = rd.argv[1]
                rest = rd.argv[2:]
                rd.argv = []
                port = 1
                if rest:
                    if len(rest) != 2 or rest[0] != "port" or not rest[1].isdigit():
                        rd.err(f"Unknown parameter '{' '.join(rest)}'.")
                        return -errno.EINVAL
                    port = int(rest[1])
                return _newlink_ib(rd, name, ltype, fabric, node, port)

            return rd.exec_cmd([(None, link_help), ("netdev", add_netdev), ("fabric", add_fabric)], "parameter")

        return rd.exec_cmd([(None, link_help), ("type", add_type)], "parameter")

    def link_del():
        def _del():
            if not rd.no_arg():
                rd.err(f"Unknown parameter {rd.argv0()}")
                return -errno.EINVAL
            return 0 if rd.call("link_delete", name=rd.dev["ifname"]) is not None else -errno.EIO

        def _del_port():                    # NAME/N: port N of a multi-port IB device
            if not rd.no_arg():
                rd.err(f"Unknown parameter {rd.argv0()}")
                return -errno.EINVAL
            if rd.port_idx < 1:
                rd.err("Wrong device name")
                return -errno.ENOENT
            name = f"{rd.dev['ifname']}/{rd.port_idx}"
            return 0 if rd.call("link_delete", name=name) is not None else -errno.EIO

        if not rd.no_arg() and "/" in rd.argv0():
            return rd.exec_link(_del_port, True)
        return rd.exec_require_dev(_del)

    def link_set():
        if rd.no_arg():
            rd.err("Please provide a link name.")
            return -errno.EINVAL
        name = rd.argv0()
        rd.arg_inc()
        if not rd.argv_match("faults"):
            rd.err(f"Unknown parameter '{rd.argv0() if not rd.no_arg() else ''}'.")
            return -errno.EINVAL
        rd.arg_inc()
        try:
            faults = parse_faults(rd.argv)
        except ValueError as e:
            rd.err(f"Error: {e}")
            return -errno.EINVAL
        rd.argv = []
        return 0 if rd.call("link_set", name=name, faults=faults) is not None else -errno.EIO

    return rd.exec_cmd([(None, link_show), ("add", link_add), ("delete", link_del), ("show", link_show),
                        ("list", link_show), ("help", link_help), ("set", link_set)], "link command")


_FAULT_RATES = ("loss", "dup", "reorder", "corrupt")
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "usec": 1e-6, "msec": 1e-3, "sec": 1.0}


def parse_faults(args: list[str]) -> dict:
    """softrdma's extension: ``faults off`` or ``faults [loss P] [dup P]
    [reorder P] [corrupt P] [delay T]``, P as ``10%`` or a fraction, T as
    ``1ms``/``100us``/``0.5s`` (netem's words)."""
    if args == ["off"]:
        return {}
    if not args or len(args) % 2:
        raise ValueError("faults needs KEY VALUE pairs: loss|dup|reorder|corrupt PERCENT, delay TIME, or 'off'")
    out = {}
    for key, val in zip(args[::2], args[1::2]):
        if key in _FAULT_RATES:
            v = float(val[:-1]) / 100 if val.endswith("%") else float(val)
            if not 0 <= v <= 1:
                raise ValueError(f"{key} {val}: a rate is 0..100%")
            out[key] = v
        elif key == "delay":
            num = val.rstrip("abcdefghijklmnopqrstuvwxyz")
            unit = val[len(num):] or "s"
            if unit not in _UNITS:
                raise ValueError(f"delay {val}: unit must be s, ms or us")
            out["delay"] = float(num) * _UNITS[unit]
        else:
            raise ValueError(f"unknown fault '{key}'")
    return out


def _newlink(rd: Rd, name: str, ltype: str, netdev: str, gso: bool = True) -> int:
    """RDMA_NLDEV_CMD_NEWLINK, checked in nldev_newlink()'s order: the name,
    the netdev, the link type (only rxe exists here), then the driver."""
    def fail(code):
        rd.err(f"error: {os.strerror(code)}")
        return -code

    if not name or "%" in name or len(name.encode()) >= 64 or not netdev:
        return fail(errno.EINVAL)
    try:
        socket.if_nametoindex(netdev)
    except OSError:
        return fail(errno.ENODEV)
    if ltype != "rxe":
        return fail(errno.EINVAL)
    extra = {} if gso else {"gso": False}
    return 0 if rd.call("link_add", name=name, netdev=netdev, **extra) is not None else -errno.EIO


def _newlink_ib(rd: Rd, name: str, ltype: str, fabric: str, node: str, port: int) -> int:
    """softrdma's IB link: the name, the type (ib), then the daemon's attach."""
    if not name or "%" in name or len(name.encode()) >= 64 or ltype != "ib" or not 1 <= port <= 254:
        rd.err(f"error: {os.strerror(errno.EINVAL)}")
        return -errno.EINVAL
    return 0 if rd.call("link_add", name=name, type="ib", fabric=fabric, node=node, port=port) is not None \
        else -errno.EIO
