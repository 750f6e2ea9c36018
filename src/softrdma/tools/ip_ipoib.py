"""``softrdma ip`` on the IPoIB interfaces of the softrdma daemon
(``device.ipoib_host``), as iproute2 shows a kernel ipoib interface:

* ``ip [-s] [-d] link show DEV``: the real ``ip`` output with the
  interface's ``link/infiniband`` 20-byte address and broadcast address in
  place of the TUN device's ``link/none``; ``-d`` adds iproute2's ipoib
  line (``ipoib pkey 0x8001 mode datagram umcast 0000``); ``-s`` adds the
  IPoIB counters the kernel's statistics do not have (ARP and neighbour
  discovery, path queries, multicast joins, drops by reason) -- the
  interface's own RX/TX counters are the kernel's;
* ``ip link add link ib0 name ib0.8001 type ipoib pkey 0x8001 [mode
  datagram|connected]`` and ``ip link del ib0.8001``: P_Key child interfaces;
* ``ip link set [dev] ib0 type ipoib mode connected|datagram [umcast 0|1]``:
  the interface's mode (``echo connected > /sys/class/net/ib0/mode``);
* ``ip neigh show [dev DEV]``: the neighbours the daemon resolved (ARP,
  neighbour discovery), with their IPoIB hardware addresses -- a TUN
  device has no neighbour table of its own.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

from ..verbs.device import management
from ..verbs.errors import PyverbsError


class IpoibError(Exception):
    def __init__(self, msg: str, status: int = 2):
        super().__init__(msg)
        self.status = status


def interfaces(name: str = "") -> tuple[object, list[dict]] | None:
    """(connection, the daemon's IPoIB interfaces) -- None when no daemon
    runs or it has none of that name."""
    try:
        conn = management()
        got = conn.call("ipoib", action="show", ifname=name)[0]["interfaces"]
    except PyverbsError:
        return None
    return (conn, got) if got else None


def _call(conn, **kw) -> list[dict]:
    try:
        return conn.call("ipoib", **kw)[0]["interfaces"]
    except PyverbsError as e:
        code = getattr(e, "error_code", 0) or errno.EIO
        raise IpoibError(f"RTNETLINK answers: {os.strerror(code)}") from None


COUNTER_ROWS = (("ARP", ("arp_tx", "arp_rx")), ("ND", ("nd_tx", "nd_rx")),
                ("paths", ("path_queries", "path_failures")), ("mcast", ("mcast_joins", "mcast_join_failures")),
                ("drop", ("rx_drop_qkey", "rx_drop_pkey", "rx_drop_other", "tx_drop_no_carrier",
                          "tx_drop_unresolved", "tx_dropped_queue", "tx_too_big")),
                ("CM", ("cm_tx_packets", "cm_tx_bytes", "cm_rx_packets", "cm_rx_bytes")),
                ("CM connections", ("cm_tx_connects", "cm_tx_established", "cm_tx_rejects", "cm_tx_failures",
                                    "cm_rx_accepts", "cm_rx_rejects", "cm_tx_idle_teardowns",
                                    "cm_rx_idle_teardowns", "cm_disconnects")))


def show(real_ip: str, argv: list[str], ifc: dict, stats: bool, details: bool, out) -> int:
    r = subprocess.run([real_ip, *argv], capture_output=True, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode:
        return r.returncode
    for line in r.stdout.splitlines(True):
        if line.strip().startswith("tun type tun"):
            continue                              # (-d: the TUN device's own details; ipoib's line is above)
        if line.strip().startswith("link/none"):
            out.write(f"    link/infiniband {ifc['address']} brd {ifc['broadcast']}\n")
            if details:
                out.write(f"    ipoib pkey  {ifc['pkey']:#06x} mode  {ifc['mode']} umcast  {ifc['umcast']:04x} \n")
            continue
        out.write(line)
    if stats:
        c = ifc["counters"]
        for title, names in COUNTER_ROWS:
            out.write(f"    IPoIB {title}: " + "  ".join(f"{n} {c[n]}" for n in names) + "\n")
    return 0


def link_add(words: list[str], conn) -> int:
    """``link add link PARENT name NAME type ipoib pkey PKEY [mode datagram|connected] [umcast 0|1]``."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(words):
        k = words[i]
        if k in ("link", "name", "type", "pkey", "mode", "umcast", "dev") and i + 1 < len(words):
            opts["name" if k == "dev" else k] = words[i + 1]
            i += 2
            continue
        raise IpoibError(f'Error: argument "{k}" is wrong: unknown ipoib option' if k not in
                         ("link", "name", "type", "pkey", "mode", "umcast")
                         else 'Command line is not complete. Try option "help"', 255)
    if "pkey" not in opts:
        raise IpoibError('Error: "pkey" is required for an ipoib child.', 255)
    try:
        pkey = int(opts["pkey"], 0)
        if not 0 < pkey <= 0xFFFF:
            raise ValueError
    except ValueError:
        raise IpoibError(f'Error: argument "{opts["pkey"]}" is wrong: invalid pkey', 255) from None
    made = _call(conn, action="create_child", parent=opts["link"], ifname=opts.get("name", ""), pkey=pkey)
    name = made[0]["ifname"]
    for attr in ("mode", "umcast"):
        if attr in opts:
            _call(conn, action="set", ifname=name, attr=attr, value=opts[attr])
    return 0


def link_set(words: list[str], name: str, conn) -> int:
    """``link set DEV type ipoib [mode datagram|connected] [umcast 0|1]``."""
    if len(words) % 2 or not words:
        raise IpoibError('Command line is not complete. Try option "help"', 255)
    for k, v in zip(words[::2], words[1::2]):
        if k == "mode" and v not in ("datagram", "connected"):
            raise IpoibError(f'Error: argument "{v}" is wrong: invalid mode', 255)
        if k not in ("mode", "umcast"):
            raise IpoibError(f'Error: argument "{k}" is wrong: unknown ipoib option', 255)
        _call(conn, action="set", ifname=name, attr=k, value=v)
    return 0


def neigh_show(dev: str | None, ifs: list[dict], out) -> None:
    for ifc in ifs:
        if dev is not None and ifc["ifname"] != dev:
            continue
        for n in ifc["neighbours"]:
            where = "" if dev is not None else f" dev {ifc['ifname']}"
            ll = f" lladdr {n['lladdr']}" if n["lladdr"] else ""
            out.write(f"{n['dst']}{where}{ll} {n['state']}\n")


def main(args: list[str], argv: list[str], stats: bool, details: bool, real_ip: str | None) -> int | None:
    """The IPoIB forms of ``args`` (after the -s/-d options); None when
    ``args`` is not about an IPoIB interface (the real ip takes it)."""
    if len(args) >= 2 and args[0] in ("neigh", "neighbour", "neighbor", "n") and args[1] in ("show", "list", "ls"):
        rest = args[2:]
        dev = rest[rest.index("dev") + 1] if "dev" in rest and rest.index("dev") + 1 < len(rest) else None
        found = interfaces(dev or "")
        if found is None:
            return None
        if dev is None and real_ip is not None:               # the kernel's neighbours first
            r = subprocess.run([real_ip, *argv], capture_output=True, text=True)
            sys.stdout.write(r.stdout)
        neigh_show(dev, found[1], sys.stdout)
        return 0
    if len(args) >= 3 and args[0] == "link" and args[1] == "add" and "type" in args and \
            args[args.index("type") + 1:args.index("type") + 2] == ["ipoib"]:
        try:
            conn = management()
        except PyverbsError:
            raise IpoibError("RTNETLINK answers: Operation not supported (no softrdma daemon)") from None
        return link_add(args[2:], conn)
    if len(args) >= 3 and args[0] == "link" and args[1] == "set" and "type" in args and \
            args[args.index("type") + 1:args.index("type") + 2] == ["ipoib"]:
        rest = args[2:args.index("type")]
        name = rest[1] if rest[:1] == ["dev"] and len(rest) > 1 else (rest[0] if rest else "")
        found = interfaces(name) if name else None
        if found is None:
            return None
        return link_set(args[args.index("type") + 2:], name, found[0])
    if len(args) >= 3 and args[0] == "link" and args[1] in ("del", "delete"):
        rest = args[2:]
        name = rest[1] if rest[0] == "dev" and len(rest) > 1 else rest[0]
        found = interfaces(name)
        if found is None:
            return None
        _call(found[0], action="delete_child", ifname=name)
        return 0
    if len(args) >= 3 and args[0] == "link" and args[1] in ("show", "list", "sh", "ls"):
        rest = args[2:]
        if rest[:1] == ["dev"]:
            rest = rest[1:]
        if len(rest) != 1 or real_ip is None:
            return None
        found = interfaces(rest[0])
        if found is None:
            return None
        return show(real_ip, argv, found[1][0], stats, details, sys.stdout)
    return None


__all__ = ["main", "IpoibError"]
