"""Scatter/gather lists: resolving SGEs to memory, and copying across them.

A resolved list is a list of memoryviews, one per non-empty SGE, obtained
through the ``Memory`` interface (so key, PD, bounds and access are checked
once per WQE, not per packet).  Every engine copies through these two
functions; the one-SGE case is the hot one and they short-cut it.
"""

from __future__ import annotations


def resolve(memory, pd, sg_list, access: int) -> list | None:
    """[(addr, length, lkey)] -> [memoryview], or None if any SGE is invalid."""
    views = []
    for addr, length, lkey in sg_list:
        if length == 0:
            continue
        v = memory.local_view(pd, lkey, addr, length, access)
        if v is None:
            return None
        views.append(v)
    return views


def gather(views, off: int, n: int, out, at: int) -> None:
    """Copy ``n`` bytes starting at byte ``off`` of the list into out[at:]."""
    if len(views) == 1:
        out[at:at + n] = views[0][off:off + n]
        return
    for v in views:
        lv = len(v)
        if off >= lv:
            off -= lv
            continue
        k = min(lv - off, n)
        out[at:at + k] = v[off:off + k]
        at += k
        n -= k
        off = 0
        if not n:
            return


def scatter(views, off: int, src, at: int, n: int) -> None:
    """Copy src[at:at+n] into the list starting at byte ``off``."""
    if len(views) == 1:
        views[0][off:off + n] = src[at:at + n]
        return
    for v in views:
        lv = len(v)
        if off >= lv:
            off -= lv
            continue
        k = min(lv - off, n)
        v[off:off + k] = src[at:at + k]
        at += k
        n -= k
        off = 0
        if not n:
            return
