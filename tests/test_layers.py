"""The package's structure: imports point downwards only (the rules in
import_graph.ALLOWED), no import cycles, no module past what a reader can
hold but the faithful ports of large C tools; and what an application loads: the verbs library (softrdma.pyverbs, and the
``pyverbs`` shim that ``softrdma pyverbs-path`` provides) over
softrdma.uapi -- and nothing of the daemon, the transport, the management
stack, the subnet manager, the fabric or the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import import_graph

SRC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
SHIM = os.path.join(SRC, "softrdma", "shim")

FORBIDDEN = ("softrdma.device", "softrdma.transport", "softrdma.mgmt", "softrdma.sm", "softrdma.fabric",
             "softrdma.sim")


def _loaded(code: str) -> list[str]:
    """The softrdma modules a fresh interpreter holds after ``code``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, SHIM, os.environ.get("PYTHONPATH")) if p))
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('softrdma'))))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _below(modules: list[str]) -> set[str]:
    """The modules of ``modules`` in a part an application must not load."""
    return {m for m in modules if m in FORBIDDEN or m.startswith(tuple(p + "." for p in FORBIDDEN))}


def test_verbs_library_loads_no_daemon_module():
    modules = _loaded("import softrdma.pyverbs\n"
                      "from softrdma.pyverbs import addr, base, cq, device, enums, mem_alloc, mr, pd, pyverbs_error,"
                      " qp, srq, wr")
    assert "softrdma.uapi.commands" in modules and "softrdma.verbs.qp" in modules
    assert _below(modules) == set()


def test_rdma_cm_application_loads_no_daemon_module():
    modules = _loaded("import softrdma.pyverbs\nfrom softrdma.pyverbs import device, pd, cq, qp, mr, cmid")
    assert "softrdma.verbs.cm" in modules
    assert _below(modules) == set()


def test_pyverbs_shim_loads_no_daemon_module():
    modules = _loaded("import pyverbs\nassert pyverbs.__file__.startswith(%r)\n"
                      "from pyverbs import device, pd, cq, qp, mr, cmid\n"
                      "from pyverbs.qp import QP, QPInitAttr\nfrom pyverbs.cq import CQ, WC" % SHIM)
    assert "softrdma.pyverbs.cmid" in modules
    assert _below(modules) == set()


# Faithful ports of large C tools, each saying so in its docstring.
LARGE_PORTS = {
    "softrdma.tools.perftest.params": "perftest_parameters.c",
    "softrdma.tools.ibdiag.saquery": "saquery.c",
}


def test_imports_point_downwards():
    assert import_graph.upward(import_graph.graph()) == []


def test_no_import_cycles():
    assert import_graph.cycles(import_graph.graph()) == []


def test_modules_are_small_but_the_faithful_ports():
    mods = import_graph.modules()
    long = dict(import_graph.long_modules())
    assert set(long) <= set(LARGE_PORTS), long
    for mod, c_file in LARGE_PORTS.items():
        with open(mods[mod], encoding="utf-8") as f:
            assert c_file in f.read(3000), f"{mod}'s docstring names the C file it ports"


def test_the_checker_catches_an_upward_import_and_a_cycle():
    edges = {"softrdma.verbs.x": {"softrdma.device.core"}, "softrdma.device.core": set()}
    assert import_graph.upward(edges) == [("softrdma.verbs.x", "softrdma.device.core")]
    assert import_graph.cycles({"softrdma.a": {"softrdma.b"}, "softrdma.b": {"softrdma.a"}}) == [
        ["softrdma.a", "softrdma.b"]]
