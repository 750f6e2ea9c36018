"""Protection domain (pyverbs.pd.PD)."""

from __future__ import annotations

import weakref


class PD:
    def __init__(self, ctx):
        self.ctx = ctx
        self.handle = ctx.conn.call("alloc_pd")[0]["pd"]
        self.closed = False
        self._refs = weakref.WeakSet()

    def add_ref(self, obj) -> None:
        """Objects the PD closes first when it is closed (as pyverbs'
        close_weakrefs): every MR, MW, QP, SRQ and AH made on it holds the
        PD busy (ibv_dealloc_pd's EBUSY) until then."""
        self._refs.add(obj)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if not self.closed:
            from .addr import AH          # (they import this module)
            from .mr import MR, MW
            from .qp import QP
            from .srq import SRQ
            order = (SRQ, QP, AH, MW, MR)     # pyverbs' close_weakrefs order

            def rank(obj) -> int:
                return next((i for i, c in enumerate(order) if isinstance(obj, c)), len(order))
            for obj in sorted(self._refs, key=rank):
                obj.close()
            self.closed = True
            if not self.ctx.closed:
                self.ctx.conn.destroy("dealloc_pd", pd=self.handle)
