"""What every verbs object shares (pyverbs' ``PyverbsObject``/``PyverbsCM``):
it closes once, a close destroys the daemon's object over the control
connection (the table's ``destroy_*``/``dealloc_*``/``dereg_*`` command,
named by the object's handle), then frees what the library holds for it
(rings, fds, memory), and it is a context manager that closes on exit.

A subclass sets ``destroy_cmd`` (None: nothing to destroy in the daemon)
and ``closed = False`` once created; it may add ``_close_children`` (what
must go first, as a PD closes its MRs and QPs, in ``close_rank`` order) and
``_release`` (its own resources, also after the daemon is gone).

An object dropped unclosed is destroyed when it is collected, as
pyverbs' ``__dealloc__`` does (``__del__``; the daemon's destroy goes
before the connection's next request).

Closing an object closes its dependants first, as pyverbs' close_weakrefs
does, so the daemon never sees a destroy it must refuse with EBUSY (that
rule stays the daemon's, for a C program's ibv_dealloc_pd):

* a Context: its QPs, completion channels, CQs, then PDs (released in the
  library; the daemon's objects go with the connection, as a uverbs
  file's do when it is closed);
* a completion channel: its CQs;
* a CQ: the QPs that use it;
* a PD: its QPs, AHs, MWs, MRs, then SRQs (``close_rank``).
"""

from __future__ import annotations

from ..uapi.commands import Command


class VerbsObject:
    #: the command that destroys the daemon's object; its first field names the handle
    destroy_cmd: Command | None = None
    #: where a PD closing its objects closes this one (pyverbs' close_weakrefs
    #: order: QPs, AHs, MWs, MRs, SRQs)
    close_rank = 5

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _context(self):
        """The Context the object was made on."""
        return self.ctx

    def close(self) -> None:
        if self.closed:
            return
        self._close_children()
        self.closed = True
        self._destroy()
        self._release()

    def _close_children(self) -> None:
        pass

    def __del__(self):
        # pyverbs' __dealloc__: an object the program dropped unclosed (a
        # QP variable rebound to a new QP) is destroyed, so that it no
        # longer holds its PD or CQ busy.  Its dependants hold it, so they
        # went before it (or are garbage of the same cycle).  The daemon's
        # destroy is queued, not sent: see Connection.destroy_later.
        if getattr(self, "closed", True):
            return
        self.closed = True
        try:
            cmd = self.destroy_cmd
            if cmd is not None:
                ctx = self._context()
                if not (ctx.closed or ctx.closing):
                    ctx.conn.destroy_later(cmd, **{cmd.request[0].name: self.handle})
            self._release()
        except Exception:       # (at interpreter exit what it held may be gone already)
            pass

    def _destroy(self) -> None:
        """Destroy the daemon's object; nothing to do once the context is
        closed or closing (its connection takes every object with it) or the
        daemon is gone (``Connection.destroy``)."""
        cmd = self.destroy_cmd
        if cmd is not None:
            ctx = self._context()
            if not (ctx.closed or ctx.closing):
                ctx.conn.destroy(cmd, **{cmd.request[0].name: self.handle})

    def _release(self) -> None:
        pass


class PDObject(VerbsObject):
    """An object made on a PD (MR, MW, SRQ, AH): its context is the PD's."""

    def _context(self):
        return self.pd.ctx


__all__ = ["VerbsObject", "PDObject"]
