"""Protection domains: alloc_pd, dealloc_pd (a PD is a bare token; what
refers to it keeps it busy)."""

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
