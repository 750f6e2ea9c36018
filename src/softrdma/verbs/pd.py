"""Protection domain (pyverbs.pd.PD)."""

from __future__ import annotations

import weakref

from ..uapi.commands import CMD
from .base import VerbsObject


class PD(VerbsObject):
    destroy_cmd = CMD.dealloc_pd

    ctx_close_rank = 2                  # a Context closes its PDs after its CQs

    def __init__(self, ctx):
        self.ctx = ctx
        self.handle = ctx.conn.call(CMD.alloc_pd)[0]["pd"]
        self.closed = False
        self._refs = weakref.WeakSet()
        ctx.add_ref(self)

    def add_ref(self, obj) -> None:
        """Objects the PD closes first when it is closed (as pyverbs'
        close_weakrefs): every MR, MW, QP, SRQ and AH made on it holds the
        PD busy (ibv_dealloc_pd's EBUSY) until then."""
        self._refs.add(obj)

    def _close_children(self) -> None:
        for obj in sorted(list(self._refs), key=lambda o: o.close_rank):     # pyverbs' close_weakrefs order
            obj.close()
