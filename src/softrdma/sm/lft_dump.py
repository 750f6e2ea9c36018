"""opensm-lfts.dump, as osm_dump.c's dump_ucast_lfts writes it (``-D 0x43 --dump_files_dir``)."""

from __future__ import annotations

from .subnet import NODE_TYPE_STR, Node, Subnet


def dumps(subnet: Subnet, lfts: dict[Node, bytes]) -> str:
    by_lid = subnet.port_by_lid()
    max_lid = subnet.max_lid()
    out = []
    for sw in subnet.switches():
        lft = lfts.get(sw)
        if lft is None:
            continue
        out.append("Unicast lids [0-%u] of switch Lid %u guid 0x%016x ('%s'):\n"
                   % (max_lid, sw.base_lid(), sw.guid, sw.desc))
        for lid in range(min(len(lft), max_lid + 1)):
            port = lft[lid]
            if port >= sw.num_ports + 1:
                continue
            p = by_lid.get(lid)
            if p is not None:
                what = "%s portguid 0x%016x: '%s'" % (NODE_TYPE_STR.get(p.node.type, "???"), p.guid,
                                                       p.node.desc)
            else:
                what = "unknown node and type"
            out.append("0x%04x %03u # %s\n" % (lid, port, what))
        out.append("%u lids dumped\n" % max_lid)
    return "".join(out)


def loads(text: str) -> dict[int, dict[int, int]]:
    """switch GUID -> {lid: port}, from a dump (to compare, or to read opensm's)."""
    out: dict[int, dict[int, int]] = {}
    cur: dict[int, int] = {}
    for line in text.splitlines():
        if line.startswith("Unicast lids"):
            guid = int(line.split(" guid ")[1].split()[0], 16)
            cur = out[guid] = {}
        elif line.startswith("0x"):
            lid, port = line.split()[:2]
            cur[int(lid, 16)] = int(port)
    return out
