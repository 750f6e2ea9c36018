"""The package's import graph, read statically (every import statement,
module-level or not), and the layering rules it must follow.

Run as a script to list what breaks the rules:
``python tests/import_graph.py``.
"""
from __future__ import annotations

import ast
import os
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
ROOT = "softrdma"

# Which top-level parts of the package each part may import (besides itself).
BOTTOM = {"enums", "errors", "uapi", "cliargs", ""}
ALLOWED = {
    "enums": {"errors"}, "errors": set(), "cliargs": set(), "uapi": {"enums", "errors"},
    "wire": BOTTOM,
    "transport": BOTTOM | {"wire"},
    "sim": BOTTOM | {"wire", "transport"},
    "mgmt": BOTTOM | {"wire"},
    "fabric": BOTTOM | {"wire"},
    "sm": BOTTOM | {"wire", "mgmt"},
    "device": BOTTOM | {"wire", "transport", "mgmt"},
    "verbs": BOTTOM | {"wire"},
    "pyverbs": BOTTOM | {"wire", "verbs"},
    "shim": BOTTOM | {"pyverbs", "verbs"},
    "rsocket": BOTTOM | {"wire", "verbs"},
}
TOP = {"tools", "runner", "cli", "demo", "__main__"}   # may import anything


def modules() -> dict[str, str]:
    out = {}
    base = os.path.join(SRC, ROOT)
    for dirpath, _dirs, files in os.walk(base):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path[:-3], SRC).replace(os.sep, ".")
                if rel.endswith(".__init__"):
                    rel = rel[: -len(".__init__")]
                out[rel] = path
    return out


def _targets(mod: str, node, is_pkg: bool, mods) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            parts = mod.split(".")
            if not is_pkg:
                parts = parts[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts) + ("." + node.module if node.module else "")
        else:
            base = node.module or ""
        names = [base + "." + a.name if base + "." + a.name in mods else base for a in node.names]
    out = []
    for n in names:
        if not n.startswith(ROOT):
            continue
        while n not in mods and "." in n:
            n = n.rsplit(".", 1)[0]
        out.append(n)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges = {}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(_targets(mod, node, path.endswith("__init__.py"), mods))
        deps.discard(mod)
        edges[mod] = deps
    return edges


def part(mod: str) -> str:
    bits = mod.split(".")
    return bits[1] if len(bits) > 1 else ""


def upward(edges) -> list[tuple[str, str]]:
    bad = []
    for mod, deps in edges.items():
        p = part(mod)
        if p in TOP:
            continue
        for d in deps:
            q = part(d)
            if q != p and q not in ALLOWED.get(p, set()):
                bad.append((mod, d))
    return sorted(bad)


def cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan).
    A package's ``__init__`` importing its own submodules is not a cycle."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def deps(v):
        return [w for w in edges.get(v, ()) if not w.startswith(v + ".")]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in deps(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def long_modules(limit: int = 750) -> list[tuple[str, int]]:
    out = []
    for mod, path in modules().items():
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > limit:
            out.append((mod, n))
    return sorted(out)


if __name__ == "__main__":
    e = graph()
    for a, b in upward(e):
        print(f"upward: {a} -> {b}")
    for c in cycles(e):
        print("cycle:", " <-> ".join(c))
    for m, n in long_modules():
        print(f"long: {m} {n} lines")
