"""Topology generators: one switch, 2- and 3-level fat trees, a 2-D torus.

Owns the shapes and their naming: switch and CA GUIDs, names and port
numbering as /work/shared/interop/ibsim/gen_fattree.py makes them
(``0x0002c903`` switches with the level in bits 20..23, ``0x0002c904`` CAs
16 GUIDs apart, hosts on the low leaf ports, uplinks after them, the first
host first in the file) so that the .net files of both are comparable and
ibsim reads ours.  Returns a :class:`~softrdma.fabric.model.Fabric`;
``topo.dump`` writes it.
"""

from __future__ import annotations

from ..wire.smp import NodeType
from .model import Fabric, FabricError, Node

SW_GUID_BASE = 0x0002C90300000000
CA_GUID_BASE = 0x0002C90400000000


class _Builder:
    def __init__(self, width: int, speed: str):
        self.width, self.speed = width, speed
        self.switches: list[tuple[Node, int]] = []     # (node, level)
        self.hosts: list[Node] = []
        self.free: dict[str, int] = {}                 # next free port per switch

    def switch(self, name: str, radix: int, level: int) -> Node:
        n = Node(NodeType.SWITCH, name, radix, SW_GUID_BASE | (level << 20) | len(self.switches))
        self.switches.append((n, level))
        return n

    def host(self) -> Node:
        i = len(self.hosts)
        n = Node(NodeType.CA, f"host{i + 1:04d}", 1, CA_GUID_BASE | (i << 4))
        self.hosts.append(n)
        return n

    def link(self, a: Node, pa: int, b: Node, pb: int) -> None:
        pa_, pb_ = a.ports[pa], b.ports[pb]
        if pa_.remote is not None or pb_.remote is not None:
            raise FabricError(f"port reused: {pa_.name} {pb_.name}")
        pa_.set_width_speed(self.width, self.speed)
        pb_.set_width_speed(self.width, self.speed)
        pa_.remote, pb_.remote = pb_, pa_

    def next_free(self, sw: Node, start: int = 1) -> int:
        p = max(start, self.free.get(sw.nodeid, 1))
        while p <= sw.nports and sw.ports[p].remote is not None:
            p += 1
        if p > sw.nports:
            raise FabricError(f'"{sw.nodeid}": out of ports ({sw.nports})')
        self.free[sw.nodeid] = p
        return p

    def spread(self, lower, uppers, uplinks: int, first_up_port: int) -> None:
        if uplinks % len(uppers):
            raise FabricError(f"{uplinks} uplinks do not divide over {len(uppers)} switches")
        per = uplinks // len(uppers)
        for lo in lower:
            p = first_up_port
            for up in uppers:
                for _ in range(per):
                    if p > lo.nports:
                        raise FabricError(f'"{lo.nodeid}": out of ports for uplinks')
                    self.link(lo, p, up, self.next_free(up))
                    p += 1

    def hosts_on(self, sw: Node, n: int) -> None:
        if n > sw.nports:
            raise FabricError(f'{n} hosts do not fit on "{sw.nodeid}" ({sw.nports} ports)')
        for i in range(n):
            self.link(sw, i + 1, self.host(), 1)

    def fabric(self) -> Fabric:
        """Hosts first (host0001 is the default attach point), then switches."""
        f = Fabric()
        order = self.hosts[:1] + [n for n, _ in self.switches] + self.hosts[1:]
        for n in order:
            f.add_node(n)
        for n in order:
            for p in n.external_ports():
                if p.remote is not None and p.state == 1:
                    f.connect(p, p.remote)
        return f

    def top_guids(self) -> list[int]:
        top = max((lvl for _, lvl in self.switches), default=0)
        return [n.guid for n, lvl in self.switches if lvl == top]


def _check(**kw):
    for k, v in kw.items():
        if v < 1:
            raise FabricError(f"--{k.replace('_', '-')} must be at least 1, not {v}")


def single(hosts: int = 8, radix: int = 36, width: int = 4, speed: str = "EDR"):
    _check(hosts=hosts, radix=radix)
    b = _Builder(width, speed)
    sw = b.switch("sw01", radix, 1)
    b.hosts_on(sw, hosts)
    return b.fabric(), b.top_guids()


def fat_tree2(leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 16, radix: int = 36,
              uplinks: int | None = None, width: int = 4, speed: str = "EDR"):
    _check(leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf, radix=radix)
    b = _Builder(width, speed)
    lvs = [b.switch(f"leaf{i + 1:03d}", radix, 1) for i in range(leaves)]
    sps = [b.switch(f"spine{i + 1:03d}", radix, 2) for i in range(spines)]
    up = uplinks if uplinks is not None else radix - hosts_per_leaf
    up -= up % spines
    up = min(up, (radix // leaves) * spines)
    if up < spines:
        raise FabricError(f"radix {radix} leaves no uplinks to {spines} spines "
                          f"with {hosts_per_leaf} hosts a leaf and {leaves} leaves")
    for lf in lvs:
        b.hosts_on(lf, hosts_per_leaf)
    b.spread(lvs, sps, up, hosts_per_leaf + 1)
    return b.fabric(), b.top_guids()


def fat_tree3(pods: int = 2, leaves_per_pod: int = 4, aggs_per_pod: int = 4, cores: int = 4,
              hosts_per_leaf: int = 16, radix: int = 36, uplinks: int | None = None,
              agg_uplinks: int | None = None, width: int = 4, speed: str = "EDR"):
    _check(pods=pods, leaves_per_pod=leaves_per_pod, aggs_per_pod=aggs_per_pod, cores=cores,
           hosts_per_leaf=hosts_per_leaf, radix=radix)
    if cores % aggs_per_pod:
        raise FabricError("--cores must be a multiple of --aggs-per-pod")
    b = _Builder(width, speed)
    group = cores // aggs_per_pod
    crs = [b.switch(f"core{i + 1:03d}", radix, 3) for i in range(cores)]
    up = uplinks if uplinks is not None else radix - hosts_per_leaf
    up -= up % aggs_per_pod
    down = leaves_per_pod * (up // aggs_per_pod)
    aup = agg_uplinks if agg_uplinks is not None else radix - down
    aup -= aup % group
    aup = min(aup, (radix // pods) * group)
    if up < aggs_per_pod or aup < group:
        raise FabricError(f"radix {radix} is too small for this 3-level tree")
    for p in range(pods):
        lvs = [b.switch(f"p{p + 1:02d}leaf{i + 1:02d}", radix, 1) for i in range(leaves_per_pod)]
        ags = [b.switch(f"p{p + 1:02d}agg{i + 1:02d}", radix, 2) for i in range(aggs_per_pod)]
        for lf in lvs:
            b.hosts_on(lf, hosts_per_leaf)
        b.spread(lvs, ags, up, hosts_per_leaf + 1)
        for j, ag in enumerate(ags):
            b.spread([ag], crs[j * group:(j + 1) * group], aup, down + 1)
    return b.fabric(), b.top_guids()


def torus2d(x: int = 4, y: int = 4, hosts_per_switch: int = 1, width: int = 4,
            speed: str = "EDR"):
    """An x by y torus of switches (wraparound in both dimensions; a ring of
    2 gets one link, not two), each with its hosts on the first ports and
    +x, -x, +y, -y links after them."""
    _check(x=x, y=y, hosts_per_switch=hosts_per_switch)
    b = _Builder(width, speed)
    radix = hosts_per_switch + 4
    grid = [[b.switch(f"sw{i:02d}x{j:02d}", radix, 1) for j in range(y)] for i in range(x)]
    for i in range(x):
        for j in range(y):
            b.hosts_on(grid[i][j], hosts_per_switch)
    h = hosts_per_switch
    for i in range(x):
        for j in range(y):
            if x > 1 and (x > 2 or i == 0):
                b.link(grid[i][j], h + 1, grid[(i + 1) % x][j], h + 2)
            if y > 1 and (y > 2 or j == 0):
                b.link(grid[i][j], h + 3, grid[i][(j + 1) % y], h + 4)
    return b.fabric(), []
