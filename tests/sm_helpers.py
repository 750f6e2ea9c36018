"""Helpers of the SM tests: the opensm fixtures, and a minimal ibsim .net loader.

The loader builds a ``softrdma.sm.subnet.Subnet`` as discovery would (GUIDs
as ibsim derives them: a switch's ports all carry its node GUID, CA port n
has node GUID + n), for the pure routing tests.  It is a stand-in until the
fabric branch's topology parser (``softrdma.fabric.topo``) is available here;
it reads only what gen_fattree.py writes (switchguid=/caguid=, Switch/Ca
records, ``[p] "remote"[q]`` links).
"""

from __future__ import annotations

import lzma
import os
import re
import shutil

from softrdma.sm.subnet import NODE_CA, NODE_SWITCH, Node, Subnet

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "opensm")
SIMSO = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"


def fixture(name: str) -> str:
    path = os.path.join(DATA, name)
    if path.endswith(".xz"):
        return lzma.decompress(open(path, "rb").read()).decode()
    return open(path).read()


def roots(topo: str) -> set[int]:
    return {int(x, 16) for x in fixture(topo + ".roots").split()}


_REC = re.compile(r'^(Switch|Ca|Hca)\s+(\d+)\s+"([^"]+)"')
_LINK = re.compile(r'^\[(\d+)\]\s+"([^"]+)"\[(\d+)\]')


def load_net(text: str, sm_node: str | None = None) -> Subnet:
    """Subnet from .net text; the SM sits on ``sm_node`` (default: the first record, as ibsim)."""
    subnet = Subnet()
    by_name: dict[str, Node] = {}
    links = []
    guid = None
    cur = None
    first = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("switchguid=", "caguid=")):
            guid = int(line.split("=", 1)[1].split()[0], 16)
            continue
        m = _REC.match(line)
        if m:
            kind, nports, name = m.group(1), int(m.group(2)), m.group(3)
            is_sw = kind == "Switch"
            cur = Node(guid, NODE_SWITCH if is_sw else NODE_CA, nports, name, sys_guid=guid)
            subnet.add_node(cur)
            by_name[name] = cur
            first = first or cur
            for n in range(0 if is_sw else 1, nports + 1):
                subnet.add_port(cur, n, guid if is_sw else guid + n)
            guid = None
            continue
        m = _LINK.match(line)
        if m and cur is not None:
            links.append((cur, int(m.group(1)), m.group(2), int(m.group(3))))
    for node, p, rname, rp in links:
        subnet.link(node.ports[p], by_name[rname].ports[rp])
    sm = by_name[sm_node] if sm_node else first
    subnet.sm_node = sm
    subnet.sm_port_guid = sm.ports[1].guid if not sm.is_switch else sm.guid
    return subnet


def have_ibsim() -> bool:
    return all(shutil.which(t) for t in ("ibsim", "opensm", "ibroute", "ibnetdiscover")) \
        and os.path.exists(SIMSO)


def need_ibsim():
    """pytest skip marker: skip only outside CI when the Debian packages are missing."""
    import pytest
    missing = not have_ibsim()
    return pytest.mark.skipif(missing and os.environ.get("CI") != "true",
                              reason="opensm/ibsim-utils/infiniband-diags not installed")
