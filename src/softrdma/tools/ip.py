"""``softrdma ip``: iproute2's ``ip``, with the SR-IOV VFs of a softrdma
ConnectX device whose PF netdev is DEV (``device.sriov``): ``ip [-s] link
show DEV`` and ``ip link set DEV vf N ...``.  Everything else -- and these
for a netdev that is not a softrdma PF -- is the real ``ip`` (exec'd), so
the name can lead PATH under ``softrdma run``.

``show`` prints what the real ``ip [-s] link show DEV`` prints, then a
``vf N`` line per VF (MAC, spoof checking, link-state, trust: iproute2's
print_vfinfo) and, with ``-s``, each VF's counters as the PF sees them
(print_vf_stats64).  ``set ... vf N`` takes ``mac LLADDR``, ``spoofchk
on|off``, ``trust on|off``, ``state auto|enable|disable``,
``rate``/``max_tx_rate``/``min_tx_rate`` Mbit/s and ``vlan VID [qos Q]
[proto 802.1Q|802.1ad]``, parsed and checked as iproute2 does; what the
device refuses is ``RTNETLINK answers: <strerror>``.

The daemon's IPoIB interfaces (``ib0``, its P_Key children) are
``tools.ip_ipoib``'s: ``link show`` with their InfiniBand addresses,
``link add ... type ipoib pkey P``, ``link del``, ``neigh show``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

from ..device.vf_vlan import PROTOS as VLAN_PROTOS
from ..verbs.device import management
from ..verbs.errors import PyverbsError
from . import ip_ipoib

STATE_NAMES = {"Follow": "auto", "Up": "enable", "Down": "disable"}
VF_KEYS = {"mac": "mac", "spoofchk": "spoofchk", "trust": "trust", "state": "state", "vlan": "vlan",
           "rate": "rate", "max_tx_rate": "max_tx_rate", "min_tx_rate": "min_tx_rate"}


class IpError(Exception):
    def __init__(self, msg: str, status: int = 255):
        super().__init__(msg)
        self.status = status


def _pf_of(netdev: str, conn) -> dict | None:
    for fn in conn.call("pci_functions")[0]["functions"]:
        if fn["netdev"] == netdev and fn["vf"] is None:
            return fn
    return None


#: where iproute2's ip is (not PATH: under softrdma run this tool leads it)
REAL_IP = ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip")


def real_ip() -> str | None:
    return next((p for p in REAL_IP if os.access(p, os.X_OK)), None)


def delegate(argv: list[str]) -> int:
    """Run the real ip with ``argv`` (this process becomes it)."""
    path = real_ip()
    if path is None:
        raise IpError("softrdma ip: iproute2's ip is not installed (only the VF commands of softrdma PFs are"
                      " built in)", 1)
    sys.stdout.flush()
    os.execv(path, ["ip", *argv])
    return 1                                    # (not reached)


def _pf_or_none(netdev: str):
    """(connection, the PF row) if ``netdev`` is a softrdma PF's, else None
    (also when no daemon runs)."""
    try:
        conn = management()
        pf = _pf_of(netdev, conn)
    except PyverbsError:
        return None
    return (conn, pf) if pf is not None else None


def show(argv: list[str], netdev: str, stats: bool, conn, pf: dict, out) -> int:
    path = real_ip()
    if path is None:
        raise IpError("softrdma ip: iproute2's ip is not installed", 1)
    r = subprocess.run([path, *argv], capture_output=True, text=True)
    out.write(r.stdout)
    sys.stderr.write(r.stderr)
    if r.returncode:
        return r.returncode
    for vf in pf.get("vfs", []):
        # print_vfinfo's order: vlan, qos, the legacy tx rate, max/min rates
        rate = "".join((f", vlan {vf['vlan']}" if vf.get("vlan") else "",
                        f", qos {vf['qos']}" if vf.get("qos") else "",
                        f", tx rate {vf['max_tx_rate']} (Mbps)" if vf["max_tx_rate"] else "",
                        f", max_tx_rate {vf['max_tx_rate']}Mbps" if vf["max_tx_rate"] else "",
                        f", min_tx_rate {vf['min_tx_rate']}Mbps" if vf.get("min_tx_rate") else ""))
        out.write(f"    vf {vf['vf']}     link/ether {vf['mac']} brd ff:ff:ff:ff:ff:ff{rate},"
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


def _vlan_words(words: list[str], i: int, changes: dict) -> int:
    """``vlan VID [qos Q] [proto P]`` at ``words[i]`` (iproute2's
    iplink_parse_vf_vlan_info); the index after it."""
    vid = words[i + 1]
    v = _unsigned(vid)
    if v is None or v > 4095:
        raise IpError(f'Error: argument "{vid}" is wrong: Invalid "vlan" value')
    changes["vlan"] = v
    i += 2
    if words[i:] in (["qos"], ["proto"]):
        raise IpError('Command line is not complete. Try option "help"')
    if i + 1 < len(words) and words[i] == "qos":
        if _unsigned(words[i + 1]) is None:
            raise IpError(f'Error: argument "{words[i + 1]}" is wrong: Invalid "qos" value')
        changes["qos"] = _unsigned(words[i + 1])
        i += 2
    if words[i:] == ["proto"]:
        raise IpError('Command line is not complete. Try option "help"')
    if i + 1 < len(words) and words[i] == "proto":
        name = words[i + 1]
        proto = VLAN_PROTOS.get(name.lower(), _unsigned(name))
        if proto is None or proto > 0xFFFF:
            raise IpError(f'Error: argument "{name}" is wrong: protocol is invalid')
        if proto not in VLAN_PROTOS.values():
            raise IpError(f'Error: argument "{name}" is wrong: Invalid "vlan protocol" value - supported'
                          f' 802.1Q, 802.1ad')
        changes["proto"] = "802.1Q" if proto == VLAN_PROTOS["802.1q"] else "802.1ad"
        i += 2
    return i


def _unsigned(text: str) -> int | None:
    """get_unsigned: a C number (0x.., 0..) of 32 bits, else None."""
    try:
        v = int(text, 16) if text.lower().startswith("0x") else int(text, 8) if text.startswith("0") else int(text)
    except ValueError:
        return None
    return v if 0 <= v <= 0xFFFFFFFF else None


def set_vf(netdev: str, words: list[str], conn, pf: dict) -> int:
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
        if key not in VF_KEYS:                  # (iproute2: back to the link's words, where it is garbage)
            raise IpError(f'Error: either "dev" is duplicate, or "{key}" is a garbage.')
        if i + 1 >= len(words):
            raise IpError('Command line is not complete. Try option "help"')
        value = words[i + 1]
        if key == "vlan":
            i = _vlan_words(words, i, changes)
            continue
        if key in ("spoofchk", "trust") and value not in ("on", "off"):
            raise IpError(f'Error: argument "{value}" is wrong: Invalid "{key}" value')
        if key == "state" and value not in ("auto", "enable", "disable"):
            raise IpError(f'Error: argument "{value}" is wrong: Invalid "state" value')
        if key in ("rate", "max_tx_rate", "min_tx_rate"):
            if _unsigned(value) is None:
                what = {"rate": "rate", "max_tx_rate": "max tx rate", "min_tx_rate": "min tx rate"}[key]
                raise IpError(f'Error: argument "{value}" is wrong: Invalid "{what}" value')
            value = _unsigned(value)
        changes[VF_KEYS[key]] = value
        i += 2
    if "max_tx_rate" in changes or "min_tx_rate" in changes:       # iproute2 checks the pair it will send
        cur = next((v for v in pf.get("vfs", []) if v["vf"] == vf), {})
        low = changes.get("min_tx_rate", cur.get("min_tx_rate", 0))
        high = changes.get("max_tx_rate", changes.get("rate", cur.get("max_tx_rate", 0)))
        if high and low > high:
            raise IpError(f"Invalid min_tx_rate {low} - must be <= max_tx_rate {high}")
    try:
        conn.call("vf_set", name=pf["name"], vf=vf, set=changes)
    except PyverbsError as e:
        raise IpError(f"RTNETLINK answers: {os.strerror(getattr(e, 'error_code', 0) or errno.EIO)}", 2) from None
    return 0


def main(argv: list[str], prog: str = "ip") -> int:
    stats = details = False
    args = list(argv)
    while args and args[0] in ("-s", "-stats", "-statistics", "-d", "-details"):
        if args[0].startswith("-s"):
            stats = True
        else:
            details = True
        args.pop(0)
    try:
        done = ip_ipoib.main(args, argv, stats, details, real_ip())
        if done is not None:
            return done
    except ip_ipoib.IpoibError as e:
        sys.stderr.write(f"{e}\n")
        return e.status
    try:
        if len(args) >= 3 and args[0] == "link" and args[1] in ("show", "list", "sh", "ls", "set"):
            rest = args[2:]
            if rest[:1] == ["dev"]:
                rest = rest[1:]
            found = _pf_or_none(rest[0]) if rest else None
            if found is not None:
                if args[1] == "set":
                    if rest[1:2] == ["vf"]:
                        return set_vf(rest[0], rest[1:], *found)
                elif len(rest) == 1:
                    return show(argv, rest[0], stats, *found, sys.stdout)
        return delegate(argv)
    except IpError as e:
        sys.stderr.write(f"{e}\n")
        return e.status
