"""pyverbs.flow: steering flows (pyverbs/flow.pyx) -- ibv_create_flow on a
raw packet QP.

``FlowAttr`` is ibv_flow_attr plus its list of specs (``verbs.spec``);
``Flow(qp, attr)`` sends the first ``num_of_specs`` specs (the count the C
struct declares; fewer appended than declared is EINVAL, as the kernel
reading a zeroed spec) and the daemon steers the matching frames the
device's netdev receives to the QP until the flow is closed.  A QP closes
its flows first (pyverbs' close_weakrefs)."""

from __future__ import annotations

import errno

from ..enums import IBV_FLOW_ATTR_NORMAL
from ..uapi.commands import CMD
from .base import VerbsObject
from .errors import PyverbsRDMAError


class FlowAttr:
    def __init__(self, num_of_specs=0, flow_type=IBV_FLOW_ATTR_NORMAL, priority=0, port=1, flags=0):
        self.num_of_specs = num_of_specs
        self.type = flow_type
        self.priority = priority
        self.port = port
        self.flags = flags
        self.specs = []


class Flow(VerbsObject):
    destroy_cmd = CMD.destroy_flow
    close_rank = 0

    def __init__(self, qp, flow_attr: FlowAttr):
        self.closed = True
        n = int(flow_attr.num_of_specs)
        specs = list(flow_attr.specs)
        if n > len(specs):
            raise PyverbsRDMAError("Flow creation failed", errno.EINVAL)
        self.qp = qp
        self.ctx = qp.ctx
        try:
            reply, _ = self.ctx.conn.call(CMD.create_flow, qp=qp.handle, type=int(flow_attr.type),
                                          priority=int(flow_attr.priority), port=int(flow_attr.port),
                                          flags=int(flow_attr.flags), specs=[s.to_wire() for s in specs[:n]])
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(f"Flow creation failed ({getattr(e, 'reason', None) or e})",
                                   e.error_code) from None
        self.handle = reply["flow"]
        self.closed = False
        qp.add_ref(self)

    def _release(self) -> None:
        self.qp._flows.discard(self)


__all__ = ["FlowAttr", "Flow"]
