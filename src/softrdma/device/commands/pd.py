"""Protection domains: alloc_pd, dealloc_pd (a PD is a bare token; what
refers to it keeps it busy); query_pd and query_mr, what ibv_import_pd and
ibv_import_mr ask of an object of the connection (the kernel's QUERY
methods: the object exists, and an MR's keys and length)."""

from __future__ import annotations

import errno

from ...errors import VerbsError
from ..session import room_for


def cmd_alloc_pd(daemon, c, m, fds):
    room_for(c, "pd")
    return {"pd": c.add("pd", object())}, []


def cmd_dealloc_pd(daemon, c, m, fds):
    pd = c.get(m.get("pd"), "pd")
    # every MR, MW, QP, SRQ and AH holds a use count on its PD (ib_dealloc_pd_user's EBUSY)
    if any(c.pd_of(h) is pd for h in c.objects):
        raise VerbsError(errno.EBUSY, "PD still in use")
    del c.objects[m["pd"]]
    return {}, []


def cmd_query_pd(daemon, c, m, fds):
    c.get(m.get("pd"), "pd")                    # EINVAL: no such PD on this connection
    return {}, []


def cmd_query_mr(daemon, c, m, fds):
    """UVERBS_METHOD_QUERY_MR: lkey, rkey and length (an imported MR has no
    address: ibv_import_mr leaves it NULL)."""
    mr = c.get(m.get("mr"), "mr")[0]           # (the entry: the MR, its memory, its DM)
    return {"lkey": mr.lkey, "rkey": mr.rkey, "length": mr.length}, []
