"""Protection domain (pyverbs.pd.PD), and ibv_advise_mr on its MRs."""

from __future__ import annotations

import weakref

from ..uapi.commands import CMD
from .base import VerbsObject
from .errors import PyverbsRDMAError


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

    def advise_mr(self, advise: int, flags: int, sg_list) -> int:
        """ibv_advise_mr: prefetch the SGEs' pages of ODP MRs (advice
        PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT; IBV_ADVISE_MR_FLAG_FLUSH
        waits for it).  The errno is the device's (EOPNOTSUPP when it has
        no ODP for this process)."""
        sges = [[int(s.addr), int(s.length), int(s.lkey)] for s in sg_list]
        try:
            self.ctx.conn.call(CMD.advise_mr, pd=self.handle, advice=int(advise), flags=int(flags), sg_list=sges)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to advise MR", e.error_code) from None
        return 0

    def _close_children(self) -> None:
        for obj in sorted(list(self._refs), key=lambda o: o.close_rank):     # pyverbs' close_weakrefs order
            obj.close()
