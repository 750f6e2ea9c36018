"""Checks of a routing: every end port reaches every end port, and no credit loop.

``unreachable`` walks the LFTs hop by hop from switches to end ports' LIDs,
every LID of an LMC range (memoised per destination LID, so it is switches x
LIDs, not pairs x hops); every CA sits on a switch, so that covers every CA
pair.  ``credit_loop`` builds the channel dependency graph (Dally & Seitz):
one vertex per directed switch-to-switch link, an edge from the channel a
packet arrives on to the channel it leaves on, for every destination LID
(every LID of every range) and every switch a packet to it can pass; one VL,
as opensm's minhop/updn/ftree use.  A cycle there is a possible deadlock; ``credit_loop`` returns one.
``link_loads`` counts, per directed link, how many (source CA, destination
CA) routes to base LIDs use it, so two routings can be compared on their worst link.
"""

from __future__ import annotations

from .subnet import NO_PATH, Node, Physp, Subnet


def _next(sw: Node, lft: bytes, lid: int) -> Physp | None:
    if lid >= len(lft) or lft[lid] == NO_PATH:
        return None
    ph = sw.ports.get(lft[lid])
    return ph


def _lids(p: Physp) -> range:
    """Every LID of an end port's range (base .. base + 2^LMC - 1)."""
    return range(p.lid, p.lid + (1 << p.lmc)) if p.lid else range(0)


def unreachable(subnet: Subnet, lfts: dict[Node, bytes], limit: int = 64,
                cas_only: bool = True) -> list[tuple[Node, Physp]]:
    """(switch, destination end port) pairs the LFTs do not deliver.

    ``cas_only``: from the switches CAs hang off to every CA port, i.e. every
    CA-to-CA pair.  (Up/down routing leaves root-to-root switch traffic
    unrouted by design, as opensm's updn does.)
    """
    bad = []
    sws = subnet.switches()
    dsts = subnet.end_ports()
    if cas_only:
        dsts = [p for p in dsts if not p.node.is_switch]
        sws = [sw for sw in sws if any((r := sw.remote(n)) is not None and not r.node.is_switch
                                       for n in range(1, sw.num_ports + 1))]
    for dst, lid in ((d, lid) for d in dsts for lid in _lids(d)):
        ok: dict[Node, bool] = {}
        for start in sws:
            path = []
            sw = start
            res = False
            while sw not in ok and len(path) < limit:
                path.append(sw)
                ph = _next(sw, lfts.get(sw, b""), lid)
                if ph is None:
                    break
                if ph.num == 0:
                    res = sw is dst.node
                    break
                r = ph.remote
                if r is None:
                    break
                if r is dst:
                    res = True
                    break
                if not r.node.is_switch:
                    break
                sw = r.node
            else:
                if sw in ok:
                    res = ok[sw]
            for s in path:
                ok[s] = res
            if not res and (start, dst) not in bad:
                bad.append((start, dst))
    return bad


def credit_loop(subnet: Subnet, lfts: dict[Node, bytes]) -> list[tuple[int, int]] | None:
    """A cycle of the channel dependency graph as [(switch GUID, out port)], or None."""
    deps: dict[tuple, set] = {}
    sws = subnet.switches()
    for dst, lid in ((d, lid) for d in subnet.end_ports() for lid in _lids(d)):
        nxt = {}
        for sw in sws:
            ph = _next(sw, lfts.get(sw, b""), lid)
            if ph is not None and ph.num and ph.remote is not None and ph.remote.node.is_switch:
                nxt[sw] = ph
        for sw, ph in nxt.items():
            r = ph.remote.node
            out = nxt.get(r)
            if out is not None:
                deps.setdefault((sw.guid, ph.num), set()).add((r.guid, out.num))
    # iterative DFS, three colours
    colour: dict[tuple, int] = {}
    for root in deps:
        if colour.get(root):
            continue
        stack = [(root, iter(deps.get(root, ())))]
        colour[root] = 1
        while stack:
            v, it = stack[-1]
            for w in it:
                c = colour.get(w, 0)
                if c == 1:
                    cyc = [s[0] for s in stack]
                    return cyc[cyc.index(w):]
                if c == 0:
                    colour[w] = 1
                    stack.append((w, iter(deps.get(w, ()))))
                    break
            else:
                colour[v] = 2
                stack.pop()
    return None


def link_loads(subnet: Subnet, lfts: dict[Node, bytes]) -> dict[tuple[int, int], int]:
    """Directed link (switch GUID, out port) -> number of CA-to-CA routes over it."""
    cas = [p for p in subnet.end_ports() if not p.node.is_switch and p.remote is not None]
    src_count: dict[Node, int] = {}
    for p in cas:
        src_count[p.remote.node] = src_count.get(p.remote.node, 0) + 1
    load: dict[tuple[int, int], int] = {}
    for dst in cas:
        # flows into each switch toward dst, summed along the tree the LFTs form
        for start, n in src_count.items():
            sw = start
            for _ in range(64):
                ph = _next(sw, lfts[sw], dst.lid)
                if ph is None or ph.remote is None:
                    break
                if ph.remote is dst:
                    break
                key = (sw.guid, ph.num)
                load[key] = load.get(key, 0) + n
                sw = ph.remote.node
    return load
