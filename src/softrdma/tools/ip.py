"""``softrdma ip [-s] link show DEV`` and ``softrdma ip link set DEV vf N
...``: iproute2's ``ip link`` for the SR-IOV VFs of a softrdma ConnectX
device whose PF netdev is DEV (``device.sriov``).

``show`` prints the netdev's two lines as ``ip link show`` does, then a
``vf N`` line per VF (MAC, spoof checking, link-state, trust: iproute2's
print_vfinfo) and, with ``-s``, each VF's counters as the PF sees them
(print_vf_stats64).  ``set ... vf N`` takes ``mac LLADDR``, ``spoofchk
on|off``, ``trust on|off``, ``state auto|enable|disable`` in any number;
``vlan``, ``qos``, ``rate``, ``max_tx_rate``, ``min_tx_rate`` are
refused (EOPNOTSUPP), as a device without them answers.  Anything else
about links is the real ``ip``'s.
"""

from __future__ import annotations

import errno
import os
import sys

from ..verbs.device import management
from ..verbs.errors import PyverbsError

USAGE = """Usage: ip [ -s ] link show DEV
       ip link set DEV vf NUM [ mac LLADDR ] [ spoofchk { on | off } ] [ trust { on | off } ]
                              [ state { auto | enable | disable } ]
"""
STATE_NAMES = {"Follow": "auto", "Up": "enable", "Down": "disable"}
VF_KEYS = {"mac": "mac", "spoofchk": "spoofchk", "trust": "trust", "state": "state", "vlan": "vlan",
           "qos": "qos", "rate": "rate", "max_tx_rate": "max_tx_rate", "min_tx_rate": "min_tx_rate"}


class IpError(Exception):
    def __init__(self, msg: str, status: int = 255):
        super().__init__(msg)
        self.status = status


def _pf_of(netdev: str, conn) -> dict | None:
    for fn in conn.call("pci_functions")[0]["functions"]:
        if fn["netdev"] == netdev and fn["vf"] is None:
            return fn
    return None


def _link_lines(netdev: str) -> str:
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=netdev)
        if not idx:
            raise IpError(f'Device "{netdev}" does not exist.', 1)
        link = ipr.get_links(idx[0])[0]
    flags = link["flags"]
    names = [n for bit, n in ((0x2, "BROADCAST"), (0x1000, "MULTICAST"), (0x1, "UP"), (0x10000, "LOWER_UP"))
             if flags & bit]
    state = link.get_attr("IFLA_OPERSTATE") or "UNKNOWN"
    qdisc = link.get_attr("IFLA_QDISC") or "noop"
    return (f"{idx[0]}: {netdev}: <{','.join(names)}> mtu {link.get_attr('IFLA_MTU')} qdisc {qdisc} state {state}"
            f" mode DEFAULT group default qlen {link.get_attr('IFLA_TXQLEN') or 0}\n"
            f"    link/ether {link.get_attr('IFLA_ADDRESS')} brd ff:ff:ff:ff:ff:ff\n")


def show(netdev: str, stats: bool, out) -> int:
    text = _link_lines(netdev)
    conn = management()
    pf = _pf_of(netdev, conn)
    out.write(text)
    for vf in (pf or {}).get("vfs", []):
        out.write(f"    vf {vf['vf']}     link/ether {vf['mac']} brd ff:ff:ff:ff:ff:ff,"
                  f" spoof checking {'on' if vf['spoofchk'] else 'off'},"
                  f" link-state {STATE_NAMES[vf['policy']]}, trust {'on' if vf['trust'] else 'off'},"
                  f" query_rss off\n")
        if stats:
            s = vf["stats"]
            out.write("    RX: bytes  packets  mcast   bcast   dropped \n")
            out.write(f"    {s['rx_bytes']:<10} {s['rx_packets']:<8} {s['multicast']:<7} {s['broadcast']:<7}"
                      f" {s['rx_dropped']:<7} \n")
            out.write("    TX: bytes  packets  dropped \n")
            out.write(f"    {s['tx_bytes']:<10} {s['tx_packets']:<8} {s['tx_dropped']:<7} \n")
    return 0


def set_vf(netdev: str, words: list[str]) -> int:
    if len(words) < 2 or words[0] != "vf":
        raise IpError(f'Error: either "dev" is duplicate, or "{words[0] if words else ""}" is a garbage.')
    try:
        vf = int(words[1], 0)
        if vf < 0 or vf > 0xFFFFFFFF:
            raise ValueError
    except ValueError:
        raise IpError(f'Error: argument "{words[1]}" is wrong: Invalid "vf" value') from None
    changes: dict = {}
    i = 2
    if i >= len(words):
        raise IpError('Error: "vf" requires at least one setting.')
    while i < len(words):
        key = words[i]
        if key not in VF_KEYS or i + 1 >= len(words):
            raise IpError(f'Error: argument "{key}" is wrong: unknown vf setting' if key not in VF_KEYS
                          else f'Command line is not complete. Try option "help"')
        value = words[i + 1]
        if key in ("spoofchk", "trust") and value not in ("on", "off"):
            raise IpError(f'Error: argument "{value}" is wrong: Invalid "{key}" value')
        if key == "state" and value not in ("auto", "enable", "disable"):
            raise IpError(f'Error: argument "{value}" is wrong: Invalid "state" value')
        if key in ("vlan", "qos", "rate", "max_tx_rate", "min_tx_rate"):
            try:
                if int(value, 0) < 0:
                    raise ValueError
            except ValueError:
                raise IpError(f'Error: argument "{value}" is wrong: Invalid "{key}" value') from None
        changes[VF_KEYS[key]] = value
        i += 2
    conn = management()
    pf = _pf_of(netdev, conn)
    if pf is None:
        _link_lines(netdev)                        # "does not exist" for an unknown netdev
        raise IpError(f"RTNETLINK answers: {os.strerror(errno.EOPNOTSUPP)}", 2)
    try:
        conn.call("vf_set", name=pf["name"], vf=vf, set=changes)
    except PyverbsError as e:
        raise IpError(f"RTNETLINK answers: {os.strerror(getattr(e, 'error_code', 0) or errno.EIO)}", 2) from None
    return 0


def main(argv: list[str], prog: str = "ip") -> int:
    stats = False
    args = list(argv)
    while args and args[0] in ("-s", "-stats", "-statistics"):
        stats = True
        args.pop(0)
    try:
        if len(args) >= 3 and args[0] == "link" and args[1] in ("show", "list", "sh", "ls"):
            rest = args[2:]
            if rest[:1] == ["dev"]:
                rest = rest[1:]
            if len(rest) != 1:
                raise IpError(USAGE.rstrip())
            return show(rest[0], stats, sys.stdout)
        if len(args) >= 4 and args[0] == "link" and args[1] == "set":
            rest = args[2:]
            if rest[:1] == ["dev"]:
                rest = rest[1:]
            return set_vf(rest[0], rest[1:])
        raise IpError(USAGE.rstrip())
    except IpError as e:
        sys.stderr.write(f"{e}\n")
        return e.status
    except PyverbsError as e:
        sys.stderr.write(f"{e}\n")
        return 1
