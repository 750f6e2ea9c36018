"""``softrdma ecn-switch``: a congested link to study RoCE congestion
control on one machine (root): network namespaces for N sender hosts and
one receiver, joined through a "switch" namespace that routes between them
and, on the port towards the receiver, behaves as an ECN-marking switch
with a shallow buffer -- built from nftables, since this needs no netem or
RED qdisc::

    traffic to the receiver above --drop-rate      dropped (the buffer overflows)
    ECN-capable traffic above --mark-rate          CE-marked (ip ecn set ce)
    not-ECN-capable traffic above --mark-rate      dropped (RED without ECN)

Each rule is an nftables ``limit rate over`` token bucket on RoCEv2 (UDP
4791) packets leaving the switch towards the receiver; the counters of
the rules say how many packets were marked and dropped, and how many
CNPs (DSCP 48, Not-ECT) came back from the receiver (``status``).

    softrdma ecn-switch up --senders 2 --mark-rate 30 --drop-rate 45
    softrdma ecn-switch status
    softrdma ecn-switch down

Names: namespaces ``<prefix>-s1`` .. ``-sN`` (senders, 10.77.<i>.2/24),
``<prefix>-r`` (receiver, 10.77.100.2/24) and ``<prefix>-sw`` (the switch,
10.77.<i>.1 and 10.77.100.1); ``up`` prints them with each host's netdev
and address, one per line (``host NS NETDEV ADDRESS``).  Rates are in
MB/s (10^6 bytes per second).  Start a softrdmad in each host namespace
(``ip netns exec NS softrdmad --device rxe0:NETDEV``) and run the
applications there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from ..cliargs import Parser, int_range

TABLE = "softrdma_ecnswitch"
RX_NET = 100                      # the receiver's subnet: 10.77.100.0/24


class EcnSwitch:
    """The namespaces, links and nftables rules of one congested switch."""

    def __init__(self, prefix: str = "ecnsw", senders: int = 2, mark_rate: float = 30.0,
                 drop_rate: float = 45.0, burst_kb: int = 64, mtu: int = 1500, subnet: int = 77):
        self.prefix = prefix
        self.n = senders
        self.mark_rate = mark_rate
        self.drop_rate = drop_rate
        self.burst_kb = burst_kb
        self.mtu = mtu
        self.net = subnet
        self.switch = f"{prefix}-sw"
        self.receiver = f"{prefix}-r"
        self.senders = [f"{prefix}-s{i}" for i in range(1, senders + 1)]
        # (namespace, its netdev, its address, the switch's port, the switch's address)
        self.hosts = [(ns, f"{prefix}{i}h", f"10.{subnet}.{i}.2", f"{prefix}{i}s", f"10.{subnet}.{i}.1")
                      for i, ns in enumerate(self.senders, 1)]
        self.hosts.append((self.receiver, f"{prefix}rh", f"10.{subnet}.{RX_NET}.2", f"{prefix}rs",
                           f"10.{subnet}.{RX_NET}.1"))

    @property
    def receiver_ip(self) -> str:
        return self.hosts[-1][2]

    def _ip(self, *args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if check and r.returncode:
            raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.returncode}")
        return r

    def rules(self) -> str:
        """The switch's nftables ruleset (``nft -f``)."""
        port = self.hosts[-1][3]
        burst = f"burst {self.burst_kb} kbytes"
        m, d = _rate(self.mark_rate), _rate(self.drop_rate)
        return (f"table inet {TABLE} {{\n"
                f"  chain forward {{\n"
                f"    type filter hook forward priority 0; policy accept;\n"
                f"    oifname \"{port}\" udp dport 4791 limit rate over {d} {burst} counter drop comment \"buffer\"\n"
                f"    oifname \"{port}\" udp dport 4791 ip ecn not-ect limit rate over {m} {burst} counter drop"
                f" comment \"red\"\n"
                f"    oifname \"{port}\" udp dport 4791 ip ecn != not-ect limit rate over {m} {burst} counter"
                f" ip ecn set ce comment \"mark\"\n"
                f"    oifname \"{port}\" udp dport 4791 counter comment \"forwarded\"\n"
                f"    iifname \"{port}\" udp dport 4791 ip dscp cs6 ip ecn not-ect counter comment \"cnp\"\n"
                f"  }}\n}}\n")

    def up(self) -> None:
        self.down()
        try:
            self._ip("ip", "netns", "add", self.switch)
            self._ip("ip", "link", "set", "lo", "up", ns=self.switch)
            self._ip("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.switch)
            for ns, dev, addr, port, gw in self.hosts:
                self._ip("ip", "netns", "add", ns)
                self._ip("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns",
                         self.switch)
                self._ip("ip", "link", "set", "lo", "up", ns=ns)
                self._ip("ip", "link", "set", dev, "mtu", str(self.mtu), "up", ns=ns)
                self._ip("ip", "addr", "add", f"{addr}/24", "dev", dev, ns=ns)
                self._ip("ip", "route", "add", "default", "via", gw, ns=ns)
                self._ip("ip", "link", "set", port, "mtu", str(self.mtu), "up", ns=self.switch)
                self._ip("ip", "addr", "add", f"{gw}/24", "dev", port, ns=self.switch)
            r = subprocess.run(["ip", "netns", "exec", self.switch, "nft", "-f", "-"], input=self.rules(),
                               capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"nft: {r.stderr.strip()}")
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        for ns in [self.switch, *(h[0] for h in self.hosts)]:
            self._ip("ip", "netns", "del", ns, check=False)

    def counters(self) -> dict[str, dict[str, int]]:
        """Packets and bytes through each rule: buffer (dropped), red
        (dropped, not ECN-capable), mark (CE-marked), forwarded; cnp: what
        the receiver sent back with DSCP 48 (CS6) and Not-ECT, as CNPs go."""
        r = self._ip("nft", "-j", "list", "table", "inet", TABLE, ns=self.switch)
        out = {}
        for item in json.loads(r.stdout)["nftables"]:
            rule = item.get("rule")
            if rule is None:
                continue
            cnt = next((e["counter"] for e in rule["expr"] if "counter" in e), None)
            if cnt is not None:
                out[rule.get("comment", "?")] = {"packets": cnt["packets"], "bytes": cnt["bytes"]}
        return out


def _mb_s(text: str) -> float:
    """An argparse type: a rate in MB/s, more than 0 and at most 100,000."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid rate: {text!r}") from None
    if not 0 < v <= 100_000:
        raise argparse.ArgumentTypeError(f"{text} is out of range (more than 0, at most 100000 MB/s)")
    return v


def _rate(mb_per_s: float) -> str:
    return f"{int(mb_per_s * 1000)} kbytes/second"


def main(argv: list[str], prog: str = "ecn-switch") -> int:
    p = Parser(prog=f"softrdma {prog}", description="an ECN-marking switch between network namespaces"
                                                    " (nftables), to study RoCE congestion control")
    p.add_argument("action", choices=("up", "down", "status", "rules"))
    p.add_argument("--prefix", default="ecnsw", help="namespace and netdev name prefix (default ecnsw)")
    p.add_argument("--senders", type=int_range(1, 8), default=2, help="sender hosts (default 2)")
    p.add_argument("--mark-rate", type=_mb_s, default=30.0, help="MB/s above which ECN-capable packets"
                                                                 " are CE-marked (default 30)")
    p.add_argument("--drop-rate", type=_mb_s, default=45.0, help="MB/s above which packets are dropped"
                                                                 " (default 45)")
    p.add_argument("--burst", type=int_range(1, 1 << 20), default=64, help="the buffer, KB (default 64)")
    p.add_argument("--mtu", type=int_range(1280, 9000), default=1500, help="the links' MTU (default 1500)")
    a = p.parse_args(argv)
    if a.mark_rate > a.drop_rate:
        p.error("--mark-rate must not exceed --drop-rate")
    if len(a.prefix) > 8 or not a.prefix.isalnum():
        p.error("--prefix: up to 8 letters and digits")
    sw = EcnSwitch(a.prefix, a.senders, a.mark_rate, a.drop_rate, a.burst, a.mtu)
    try:
        if a.action == "rules":
            sys.stdout.write(sw.rules())
        elif a.action == "up":
            sw.up()
            for ns, dev, addr, _, _ in sw.hosts:
                print(f"host {ns} {dev} {addr}")
            print(f"switch {sw.switch}")
        elif a.action == "down":
            sw.down()
        else:
            for name, c in sw.counters().items():
                print(f"{name:10} {c['packets']:>12} packets {c['bytes']:>15} bytes")
    except (RuntimeError, OSError) as e:
        print(f"softrdma {prog}: {e}", file=sys.stderr)
        return 1
    return 0
