"""``softrdma ip``: iproute2's ``ip``, with the SR-IOV VFs of a softrdma
ConnectX device whose PF netdev is DEV (``device.sriov``): ``ip [-s] link
show DEV`` and ``ip link set DEV vf N ...``.  Everything else -- and these
for a netdev that is not a softrdma PF -- is the real ``ip`` (exec'd), so
the name can lead PATH under ``softrdma run``.

``show`` prints what the real ``ip [-s] link show DEV`` prints, then a
``vf N`` line per VF (MAC, spoof checking, link-state, trust: iproute2's
print_vfinfo) and, with ``-s``, each VF's counters as the PF sees them
(print_vf_stats64).  ``set ... vf N`` takes ``mac LLADDR``, ``spoofchk
on|off``, ``trust on|off``, ``state auto|enable|disable``, ``rate``/``max_tx_rate`` Mbit/s in any
number; ``vlan``, ``qos``, ``min_tx_rate`` are refused (EOPNOTSUPP), as a
device without them answers.

The daemon's IPoIB interfaces (``ib0``, its P_Key children) are
``tools.ip_ipoib``'s: ``link show`` with their InfiniBand addresses,
``link add ... type ipoib pkey P``, ``link del``, ``neigh show``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

from ..verbs.device import management
from ..verbs.errors import PyverbsError
from . import ip_ipoib

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
        rate = f", max_tx_rate {vf['max_tx_rate']}Mbps" if vf["max_tx_rate"] else ""
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
