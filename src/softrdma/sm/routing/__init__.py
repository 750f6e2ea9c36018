"""Routing engines by opensm's names (``-R``), and opensm's fallback to minhop.

``compute(subnet, engine, roots)`` returns ``(engine actually used, LFTs)``;
an engine that cannot route the subnet (updn without roots, ftree on
something that is not a fat tree) falls back to minhop, as opensm does
("minhop tables configured on all switches" in its log).
"""

from __future__ import annotations

# the engines' tables are numpy arrays: loaded with the SM (a fifth of a second), not in the
# middle of its first sweep
import numpy  # noqa: F401

ENGINES = ("minhop", "updn", "ftree")


class RoutingError(Exception):
    """The engine cannot route this subnet (opensm then falls back to minhop)."""


def compute(subnet, engine: str, roots=None, existing=None, why: list | None = None):
    """``why``: a list to append the reason to when the engine falls back."""
    import importlib
    if engine not in ENGINES:
        raise ValueError(f"unsupported routing engine {engine!r} (supported: {', '.join(ENGINES)})")
    from . import minhop
    mod = importlib.import_module(f"{__name__}.{engine}")
    try:
        return engine, mod.route(subnet, roots, existing)
    except RoutingError as e:
        if why is not None:
            why.append(str(e))
        return "minhop", minhop.route(subnet, None, existing)
