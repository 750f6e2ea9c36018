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
        close_weakrefs); memory windows hold the PD busy until then."""
        self._refs.add(obj)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if not self.closed:
            for mw in list(self._refs):
                mw.close()
            self.closed = True
            if not self.ctx.closed and not self.ctx.conn.dead:
                self.ctx.conn.call("dealloc_pd", pd=self.handle)
