"""Protection domain (pyverbs.pd.PD)."""

from __future__ import annotations


class PD:
    def __init__(self, ctx):
        self.ctx = ctx
        self.handle = ctx.conn.call("alloc_pd")[0]["pd"]
        self.closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if not self.ctx.closed and not self.ctx.conn.dead:
                self.ctx.conn.call("dealloc_pd", pd=self.handle)
