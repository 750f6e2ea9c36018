"""minhop: every switch's hop count to every switch through each of its ports (osm_ucast_mgr.c).

opensm relaxes the tables Bellman-Ford style (each switch learns from its
neighbours until nothing changes); the fixed point is hops[s][t][p] =
1 + dist(remote(p), t) for every switch-to-switch port p, which a BFS from
each target gives directly.  Port selection is ``lfts.build_lfts``.
"""

from __future__ import annotations

from collections import deque

from ..subnet import NO_PATH, Node, Subnet
from .lfts import HopTables, build_lfts


def switch_links(sw: Node) -> list[tuple[int, Node]]:
    """(port, remote switch) for every healthy link from ``sw`` to another switch."""
    out = []
    for n in range(1, sw.num_ports + 1):
        ph = sw.ports.get(n)
        if ph is not None and ph.remote is not None and ph.remote.node.is_switch \
                and ph.remote.node is not sw and ph.healthy():
            out.append((n, ph.remote.node))
    return out


def min_hop_tables(subnet: Subnet) -> HopTables:
    sws = subnet.switches()
    links = {sw: switch_links(sw) for sw in sws}
    hops: HopTables = {sw: {} for sw in sws}
    for t in sws:
        lid = t.base_lid()
        dist = {t: 0}
        q = deque([t])
        while q:
            s = q.popleft()
            for _, r in links[s]:
                if r not in dist:
                    dist[r] = dist[s] + 1
                    q.append(r)
        for s in sws:
            if s not in dist:
                continue
            row = [NO_PATH] * (s.num_ports + 1)
            for n, r in links[s]:
                if r in dist:
                    row[n] = min(NO_PATH, dist[r] + 1)
            row[0] = dist[s]
            hops[s][lid] = row
    return hops


def route(subnet: Subnet, roots=None, existing=None) -> dict[Node, bytearray]:
    return build_lfts(subnet, min_hop_tables(subnet), existing)
