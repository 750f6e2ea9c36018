"""LFTs from hop tables: opensm's ucast_mgr_build_lfts and osm_switch_recommend_path (LMC 0).

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
