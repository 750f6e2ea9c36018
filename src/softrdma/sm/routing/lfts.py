"""LFTs from hop tables: opensm's ucast_mgr_build_lfts and osm_switch_recommend_path.

Engines that only shape the hop tables (minhop, updn) share this port
selection, so their LFTs match opensm's only if every tie-break does:

* targets are routed in opensm's *port order list*: the CA ports hanging off
  switches, switch by switch, the switches sorted by their number of CA links
  (most first; glibc's qsort is a stable merge sort here), each switch's CAs in
  port order; then every other end port in port-GUID order;
* per target, the candidate exits are the ports 1..N whose hop count to the
  target's switch equals the least one, that are healthy and linked;
* among them the one that carries the fewest paths so far wins, the lowest
  port number on a tie (strict ``<``);
* a path counts against its port only if the target is not a switch
  (``port_profile_switch_nodes`` is off by default);
* with ``existing`` LFTs (not the first master sweep), an existing entry that
  is still a least-hop, healthy, linked exit is kept.

``hops[sw][lid]`` is a list indexed by port; index 0 holds the least count.

With an LMC > 0 (``subnet.lmc``, opensm's ``opt.lmc``) every LID of every
port's range gets an entry (ucast_mgr_process_tbl): the base LIDs of all
targets first, in the port order above, then all base+1 LIDs, and so on.
For LID base+k (k > 0) the candidate exits are scanned cyclically from the
port after the one LID base+k-1 got, and opensm's "LMC-aware" choice applies
(recommend_path with routing_for_lmc): per switch and target, the remote
nodes already used by the target's earlier LIDs are remembered with how many
of its LIDs went there (``forwarded_to``); a least-loaded exit to a not yet
used remote *system* (system image GUID) wins, else one to a not yet used
remote *node*, else the least-loaded exit (on a tie of counts, the one whose
remote node carried fewer of the target's LIDs).
"""

from __future__ import annotations

from ..subnet import NO_PATH, Node, Physp, Subnet

HopTables = dict[Node, dict[int, list[int]]]


def port_order(subnet: Subnet) -> list[Physp]:
    sws = subnet.switches()

    def endport_links(sw: Node) -> int:
        return sum(1 for n in range(1, sw.num_ports + 1)
                   if (r := sw.remote(n)) is not None and not r.node.is_switch)

    order: list[Physp] = []
    seen = set()
    for sw in sorted(sws, key=endport_links, reverse=True):
        for n in range(1, sw.num_ports + 1):
            r = sw.remote(n)
            if r is not None and not r.node.is_switch and subnet.ports.get(r.guid) is r:
                order.append(r)
                seen.add(r.guid)
    order.extend(p for p in subnet.end_ports() if p.guid not in seen)
    return order


def build_lfts(subnet: Subnet, hops: HopTables,
               existing: dict[Node, bytes] | None = None) -> dict[Node, bytearray]:
    if subnet.lmc:
        return _build_lfts_lmc(subnet, hops, existing)
    max_lid = subnet.max_lid()
    # per target, once: (LID, is a CA, the switch it is on / is, port there, that switch's LID)
    targets = []
    for p in port_order(subnet):
        if not p.lid:
            continue
        if p.node.is_switch:
            targets.append((p.lid, False, p.node, 0, p.node.base_lid()))
        else:
            r = p.remote
            if r is not None and r.node.is_switch:
                targets.append((p.lid, True, r.node, r.num, r.node.base_lid()))
    lfts = {}
    for sw in subnet.switches():
        lft = bytearray([NO_PATH]) * (max_lid + 1)
        counts = [0] * (sw.num_ports + 1)
        table = hops.get(sw, {})
        old = existing.get(sw) if existing else None
        cands: dict[int, list[int]] = {}
        for lid, is_ca, tsw, tport, base in targets:
            if tsw is sw:
                lft[lid] = tport
                if is_ca:
                    counts[tport] += 1
                continue
            row = table.get(base)
            if row is None or row[0] == NO_PATH:
                continue
            least = row[0]
            port = NO_PATH
            if old is not None and lid < len(old):
                e = old[lid]
                if 0 < e <= sw.num_ports and row[e] == least and (ph := sw.ports.get(e)) \
                        and ph.remote is not None and ph.healthy():
                    port = e
            if port == NO_PATH:
                c = cands.get(base)
                if c is None:
                    c = cands[base] = [n for n in range(1, sw.num_ports + 1)
                                       if row[n] == least and (ph := sw.ports.get(n)) is not None
                                       and ph.remote is not None and ph.healthy()]
                best = 0xFFFFFFFF
                for n in c:
                    if counts[n] < best:
                        best, port = counts[n], n
                if port == NO_PATH:
                    continue
            lft[lid] = port
            if is_ca:
                counts[port] += 1
        lfts[sw] = lft
    return lfts


def _build_lfts_lmc(subnet: Subnet, hops: HopTables,
                    existing: dict[Node, bytes] | None) -> dict[Node, bytearray]:
    """build_lfts for LMC > 0: every LID of every range, with opensm's LMC-aware port choice."""
    max_lid = subnet.max_lid()
    nlids = 1 << subnet.lmc
    # per target: (base LID, last LID, is a CA, the switch it is on / is, port there, that switch's LID)
    targets = []
    for p in port_order(subnet):
        if not p.lid:
            continue
        last = p.lid + (1 << p.lmc) - 1
        if p.node.is_switch:
            targets.append((p.lid, last, False, p.node, 0, p.node.base_lid()))
        else:
            r = p.remote
            if r is not None and r.node.is_switch:
                targets.append((p.lid, last, True, r.node, r.num, r.node.base_lid()))
    lfts = {}
    for sw in subnet.switches():
        nports = sw.num_ports + 1               # opensm's num_ports counts port 0
        lft = bytearray([NO_PATH]) * (max_lid + 1)
        counts = [0] * nports
        table = hops.get(sw, {})
        old = existing.get(sw) if existing else None
        # remote node and its system GUID behind each linked port
        rnode = [None] * nports
        for n in range(1, nports):
            ph = sw.ports.get(n)
            if ph is not None and ph.remote is not None:
                rnode[n] = ph.remote.node
        cands: dict[int, list[int]] = {}
        # per target: [[remote node, forwarded_to], ...] (opensm's port->priv, reset per switch)
        used: dict[int, list[list]] = {}
        for k in range(nlids):
            for base_lid, last, is_ca, tsw, tport, base in targets:
                lid = base_lid + k
                if lid > last:
                    continue
                if tsw is sw:
                    port = tport
                else:
                    row = table.get(base)
                    if row is None or row[0] == NO_PATH:
                        continue        # lft stays NO_PATH, nothing counted
                    least = row[0]
                    port = NO_PATH
                    if old is not None and lid < len(old):
                        e = old[lid]
                        if 0 < e <= sw.num_ports and row[e] == least and (ph := sw.ports.get(e)) \
                                and ph.remote is not None and ph.healthy():
                            port = e
                    if port == NO_PATH:
                        c = cands.get(base)
                        if c is None:
                            c = cands[base] = [n for n in range(1, nports)
                                               if row[n] == least and (ph := sw.ports.get(n)) is not None
                                               and ph.remote is not None and ph.healthy()]
                        if not c:
                            continue
                        start = (lft[lid - 1] + 1) % nports if k else 1
                        port = _recommend_lmc(c, start, counts, rnode, used.get(base_lid, ()))
                lft[lid] = port
                if is_ca:
                    counts[port] += 1
                    if port:
                        r = used.setdefault(base_lid, [])
                        node = rnode[port]
                        for ent in r:
                            if ent[0] is node:
                                break
                        else:
                            ent = [node, 0]
                            r.append(ent)
                        ent[1] += 1
        lfts[sw] = lft
    return lfts


def _recommend_lmc(cands: list[int], start: int, counts: list[int], rnode: list, used) -> int:
    """osm_switch_recommend_path's choice with routing_for_lmc (no dor, port shifting or scatter)."""
    INF = 0xFFFFFFFF
    least = least_sys = least_node = least_fwd = INF
    best = best_sys = best_node = 0
    order = [n for n in cands if n >= start] + [n for n in cands if n < start] if start > 1 else cands
    for n in order:
        cnt = counts[n]
        node = rnode[n]
        ent = None
        for e in used:                  # switch_find_sys_guid_count
            if e[0].sys_guid == node.sys_guid:
                ent = e
                break
        if ent is None:
            if cnt < least_sys:
                least_sys, best_sys, least_fwd = cnt, n, 0
        else:
            ent = None
            for e in used:              # switch_find_node_guid_count
                if e[0].guid == node.guid:
                    ent = e
                    break
            if ent is None and cnt < least_node:
                least_node, best_node, least_fwd = cnt, n, 0
        if cnt < least:
            best, least = n, cnt
            if ent is not None and ent[1] < least_fwd:
                least_fwd = ent[1]
        elif ent is not None and cnt == least and ent[1] < least_fwd:
            least_fwd, best = ent[1], n
    if best_sys:
        return best_sys
    if best_node:
        return best_node
    return best
