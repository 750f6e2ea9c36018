"""opensm-lfts.dump, as osm_dump.c's dump_ucast_lfts writes it (``-D 0x43 --dump_files_dir``)."""

from __future__ import annotations

import io

import numpy as np

from .subnet import NODE_TYPE_STR, Node, Subnet

_PORT_AT = 7            # "0x%04x " : the three port digits start here in every line


def dumps(subnet: Subnet, lfts: dict[Node, bytes]) -> str:
    out = io.BytesIO()
    write(out, subnet, lfts)
    return out.getvalue().decode()


def write(f, subnet: Subnet, lfts: dict[Node, bytes]) -> None:
    """The dump into the binary file ``f``, switch by switch.  Every switch's lines differ only
    in the port, so they are one template of all LIDs' lines with the port digits written in
    (and the lines of LIDs without an entry cut out): a fabric of thousands of switches
    and LIDs is dumped in seconds, never held whole in memory."""
    by_lid = subnet.port_by_lid()
    max_lid = subnet.max_lid()
    n = max_lid + 1
    lines = []
    for lid in range(n):
        p = by_lid.get(lid)
        if p is not None:
            what = "%s portguid 0x%016x: '%s'" % (NODE_TYPE_STR.get(p.node.type, "???"), p.guid,
                                                 p.node.desc)
        else:
            what = "unknown node and type"
        lines.append(("0x%04x 000 # %s\n" % (lid, what)).encode())
    lens = np.array([len(x) for x in lines], dtype=np.int64)
    ends = np.cumsum(lens)
    digit = ends - lens + _PORT_AT
    template = np.frombuffer(b"".join(lines), dtype=np.uint8)
    del lines
    line_of = np.repeat(np.arange(n), lens)        # the LID of every byte of the template
    for sw in subnet.switches():
        lft = lfts.get(sw)
        if lft is None:
            continue
        f.write(("Unicast lids [0-%u] of switch Lid %u guid 0x%016x ('%s'):\n"
                 % (max_lid, sw.base_lid(), sw.guid, sw.desc)).encode())
        m = min(len(lft), n)
        if m:
            ports = np.frombuffer(bytes(lft[:m]), dtype=np.uint8)
            buf = template[:ends[m - 1]].copy()
            d = digit[:m]
            buf[d] = 48 + ports // 100
            buf[d + 1] = 48 + ports // 10 % 10
            buf[d + 2] = 48 + ports % 10
            keep = ports.astype(np.int16) < sw.num_ports + 1
            if not keep.all():
                buf = buf[keep[line_of[:len(buf)]]]
            f.write(buf.tobytes())
        f.write(("%u lids dumped\n" % max_lid).encode())


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
