"""updn: up*/down* hop tables (osm_ucast_updn.c); deadlock-free on any topology with roots.

Ranks are BFS distances from the root switches.  A link is UP from the
higher rank to the lower (equal ranks: from the bigger GUID; two roots: UP
both ways).  For each switch, a BFS from it fills every other switch's hop
count toward it, never taking a DOWN step followed by an UP one; the BFS
keeps opensm's quirks (a switch is queued once while it waits, its direction
is the one it was first queued with) because they decide which ports tie.
Port selection is ``lfts.build_lfts``.  Without roots opensm falls back to
minhop: ``route`` raises ``NoRoots`` and the caller falls back.

With LMC 0 the same BFS runs on switch indices and flat byte tables (the
direction of every link worked out once, the links a DOWN-going switch may
take listed apart), and each target's table becomes that target's column of
candidate masks for ``vector.build_lfts``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..subnet import NO_PATH, Node, Subnet
from . import RoutingError, vector
from .lfts import HopTables, build_lfts

UP, DOWN = 1, 2


class NoRoots(RoutingError):
    pass


def ranks(subnet: Subnet, roots: set[int]) -> dict[Node, int]:
    sws = subnet.switches()
    rank = {sw: (0 if sw.guid in roots else 0xFFFFFFFF) for sw in sws}
    q = deque(sw for sw in sws if rank[sw] == 0)
    while q:
        u = q.popleft()
        for n in range(1, u.num_ports + 1):
            r = u.remote(n)
            if r is not None and r.node.is_switch and rank[r.node] > rank[u] + 1:
                rank[r.node] = rank[u] + 1
                q.append(r.node)
    return rank


def _dir(cur_rank: int, rem_rank: int, cur_id: int, rem_id: int) -> int:
    if not cur_rank and not rem_rank:
        return UP
    if cur_rank < rem_rank:
        return DOWN
    if cur_rank > rem_rank:
        return UP
    return UP if cur_id > rem_id else DOWN


def updn_hop_tables(subnet: Subnet, roots: set[int]) -> HopTables:
    sws = subnet.switches()
    if not any(sw.guid in roots for sw in sws):
        raise NoRoots("no root switch found")
    rank = ranks(subnet, roots)
    hops: HopTables = {sw: {} for sw in sws}
    # per switch: (port, remote switch, remote port) of its switch links
    links = {}
    for sw in sws:
        links[sw] = [(n, r.node, r.num) for n in range(1, sw.num_ports + 1)
                     if (r := sw.remote(n)) is not None and r.node.is_switch]
    direction = {sw: 0 for sw in sws}
    visited = {sw: False for sw in sws}
    for src in sws:
        lid = src.base_lid()

        def row(sw: Node) -> list[int]:
            r = hops[sw].get(lid)
            if r is None:
                r = hops[sw][lid] = [NO_PATH] * (sw.num_ports + 1)
            return r

        row(src)[0] = 0
        direction[src] = UP
        q = deque([src])
        while q:
            u = q.popleft()
            visited[u] = False
            cur = direction[u]
            urow = row(u)
            for pn, rsw, pn_rem in links[u]:
                nxt = _dir(rank[u], rank[rsw], u.guid, rsw.guid)
                if cur == DOWN and nxt == UP:
                    continue
                rrow = row(rsw)
                h = urow[0] + 1
                if h < rrow[pn_rem]:
                    rrow[pn_rem] = h
                    if h < rrow[0]:
                        rrow[0] = h
                    if not visited[rsw]:
                        direction[rsw] = nxt
                        visited[rsw] = True
                        q.append(rsw)
    return hops


def candidate_masks(subnet: Subnet, lay: vector.Layout, roots: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """``updn_hop_tables``' BFS per target switch, step for step, into candidate masks."""
    sws = lay.sws
    if not any(sw.guid in roots for sw in sws):
        raise NoRoots("no root switch found")
    rank = ranks(subnet, roots)
    n, w = len(sws), lay.width
    idx = lay.index
    # per switch: (remote index, flat offset of the remote's port, direction) of its switch links,
    # all of them (the switch was reached going UP) and those going DOWN
    every, down = [], []
    for sw in sws:
        out = []
        for pn in range(1, sw.num_ports + 1):
            r = sw.remote(pn)
            if r is not None and r.node.is_switch:
                ri = idx[r.node]
                out.append((ri, ri * w + r.num, _dir(rank[sw], rank[r.node], sw.guid, r.node.guid)))
        every.append(out)
        down.append([e for e in out if e[2] == DOWN])
    masks = np.zeros((n, n, lay.nbytes), dtype=np.uint8)
    reach = np.zeros((n, n), dtype=bool)
    linked = lay.linked
    blank = bytearray([NO_PATH]) * (n * w)
    for t in range(n):
        hops = bytearray(blank)              # hops[s * w + port]
        least = bytearray([NO_PATH]) * n
        direction = [0] * n
        queued = [False] * n
        least[t] = 0
        direction[t] = UP
        q = deque([t])
        pop, push = q.popleft, q.append
        while q:
            u = pop()
            queued[u] = False
            h = least[u] + 1
            for r, off, nxt in (every[u] if direction[u] == UP else down[u]):
                if h < hops[off]:
                    hops[off] = h
                    if h < least[r]:
                        least[r] = h
                    if not queued[r]:
                        direction[r] = nxt
                        queued[r] = True
                        push(r)
        lv = np.frombuffer(least, dtype=np.uint8)
        ok = lv != NO_PATH
        m = (np.frombuffer(hops, dtype=np.uint8).reshape(n, w) == lv[:, None]) & linked & ok[:, None]
        masks[:, t] = np.packbits(m, axis=1)
        reach[:, t] = ok
    return masks, reach


def route(subnet: Subnet, roots=None, existing=None) -> dict[Node, bytearray]:
    if subnet.lmc:
        return build_lfts(subnet, updn_hop_tables(subnet, set(roots or ())), existing)
    lay = vector.Layout(subnet)
    masks, reach = candidate_masks(subnet, lay, set(roots or ()))
    return vector.build_lfts(subnet, lay, masks, reach, existing)
