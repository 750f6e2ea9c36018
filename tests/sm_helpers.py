"""Helpers of the SM tests: the opensm fixtures, and a Subnet straight from a .net file.

``load_net`` parses with softrdma.fabric.topo (the fabric's .net parser, GUIDs
as ibsim assigns them) and builds the ``softrdma.sm.subnet.Subnet`` that
discovery would find, for the pure routing tests.
"""

from __future__ import annotations

import lzma
import os
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


def subnet_from_fabric(fabric, sm_node: str | None = None) -> Subnet:
    """The Subnet discovery would build on ``fabric`` (softrdma.fabric's model), SM on ``sm_node``
    (default: the first record, where ibsim attaches clients)."""
    subnet = Subnet()
    mine = {}
    for fn in fabric.nodes:
        n = subnet.add_node(Node(fn.guid, NODE_SWITCH if fn.is_switch else NODE_CA, fn.nports,
                                 fn.desc, sys_guid=fn.sysguid))
        mine[fn] = n
        for fp in fn.ports:
            if fp is not None:
                subnet.add_port(n, fp.num, fp.guid)
    for fn in fabric.nodes:
        for fp in fn.ports:
            if fp is not None and fp.remote is not None:
                subnet.link(mine[fn].ports[fp.num], mine[fp.remote.node].ports[fp.remote.num])
    sm = mine[fabric.node(sm_node)] if sm_node else mine[fabric.nodes[0]]
    subnet.sm_node = sm
    subnet.sm_port_guid = sm.guid if sm.is_switch else sm.ports[1].guid
    return subnet


def load_net(text: str, sm_node: str | None = None) -> Subnet:
    from softrdma.fabric import topo
    return subnet_from_fabric(topo.loads(text), sm_node)


def have_ibsim() -> bool:
    return all(shutil.which(t) for t in ("ibsim", "opensm", "ibroute", "ibnetdiscover")) \
        and os.path.exists(SIMSO)


def need_ibsim():
    """pytest skip marker: skip only outside CI when the Debian packages are missing."""
    import pytest
    missing = not have_ibsim()
    return pytest.mark.skipif(missing and os.environ.get("CI") != "true",
                              reason="opensm/ibsim-utils/infiniband-diags not installed")
