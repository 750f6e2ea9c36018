"""minhop: every switch's hop count to every switch through each of its ports (osm_ucast_mgr.c).

opensm relaxes the tables Bellman-Ford style (each switch learns from its
neighbours until nothing changes); the fixed point is hops[s][t][p] =
1 + dist(remote(p), t) for every switch-to-switch port p, which a BFS from
each target gives directly.  Port selection is ``lfts.build_lfts``.

With LMC 0 the same tables are arrays: the distances of all switch pairs
at once (a relaxation over every link, numpy column blocks, until nothing
changes -- the diameter plus one rounds), each switch's candidate exits to
every target switch derived from them, and ``vector.build_lfts`` picks the
ports.  The dict-of-lists tables stay for the LMC > 0 port choice.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..subnet import NO_PATH, Node, Subnet
from . import vector
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


def distances(lay: vector.Layout, links: list[list[tuple[int, int]]], block: int = 256) -> np.ndarray:
    """``d[x, t]``: hops from switch ``t`` to switch ``x`` over ``links`` (NO_PATH: none), as a BFS
    from every ``t`` finds them: ``d[x] = min(d[x], d[y] + 1)`` over the links y -> x, to the fixed point."""
    n = len(lay.sws)
    preds: list[list[int]] = [[] for _ in range(n)]
    for y, out in enumerate(links):
        for _, x in out:
            preds[x].append(y)
    xs = np.array([x for x in range(n) if preds[x]], dtype=np.int64)
    flat = np.array([y for x in xs.tolist() for y in preds[x]], dtype=np.int64)
    offs = np.cumsum([0] + [len(preds[x]) for x in xs.tolist()])[:-1]
    d = np.full((n, n), NO_PATH, dtype=np.uint16)
    np.fill_diagonal(d, 0)
    changed = len(xs) > 0
    while changed:
        changed = False
        for c0 in range(0, n, block):
            c1 = min(n, c0 + block)
            via = np.minimum.reduceat(d[flat, c0:c1], offs, axis=0) + 1
            cur = d[xs, c0:c1]
            new = np.minimum(cur, np.minimum(via, NO_PATH))
            if (new != cur).any():
                changed = True
                d[xs, c0:c1] = new
    return d


def candidate_masks(lay: vector.Layout) -> tuple[np.ndarray, np.ndarray]:
    """Per switch and target switch: the packed least-hop exits, and whether there is a path."""
    n = len(lay.sws)
    links = [[(p, lay.index[r]) for p, r in switch_links(sw)] for sw in lay.sws]
    d = distances(lay, links)
    reach = d != NO_PATH
    masks = np.zeros((n, n, lay.nbytes), dtype=np.uint8)
    for s, out in enumerate(links):
        if not out:
            continue
        ports = np.array([p for p, _ in out], dtype=np.int64)
        eq = d[[x for _, x in out]] + 1 == d[s]          # (links, targets): this exit is least-hop
        m = np.zeros((n, lay.width), dtype=bool)
        m[:, ports] = eq.T
        m &= reach[s][:, None]
        masks[s] = np.packbits(m, axis=1)
    return masks, reach


def route(subnet: Subnet, roots=None, existing=None) -> dict[Node, bytearray]:
    if subnet.lmc:
        return build_lfts(subnet, min_hop_tables(subnet), existing)
    lay = vector.Layout(subnet)
    masks, reach = candidate_masks(lay)
    return vector.build_lfts(subnet, lay, masks, reach, existing)
