"""Steering flows: create_flow, destroy_flow (ibv_create_flow on a raw
packet QP; ``device.raw`` steers).  As the kernel's create_flow: CAP_NET_RAW
or EPERM; a rule of type ALL_DEFAULT, MC_DEFAULT or SNIFFER has no specs."""

from __future__ import annotations

import errno

from ...enums import IBV_FLOW_ATTR_FLAGS_DONT_TRAP, IBV_FLOW_ATTR_FLAGS_EGRESS, IBV_FLOW_ATTR_NORMAL, \
    IBV_FLOW_ATTR_SNIFFER
from ...errors import VerbsError
from ...uapi import request as rq
from ...wire.flow import compile_rule
from ..raw import Flow
from ..raw_queues import RawQP
from .raw_qp import require_net_raw


def cmd_create_flow(daemon, c, m, fds):
    qp = c.get(m.get("qp"), "qp")
    flow_type = rq.uint(m, "type")
    priority = rq.uint(m, "priority", rq.U16, 0)
    port_num = rq.uint(m, "port", rq.U8, 1)
    flags = rq.uint(m, "flags", default=0)
    specs = m.get("specs", [])
    require_net_raw(c, "a flow")
    if not isinstance(qp, RawQP):
        raise VerbsError(errno.EINVAL, "flows steer to raw packet QPs only")
    if port_num != 1:
        raise VerbsError(errno.EINVAL, f"port {port_num} is not a port of the device")
    if flow_type > IBV_FLOW_ATTR_SNIFFER:
        raise VerbsError(errno.EINVAL, f"flow type {flow_type}")
    if flags & IBV_FLOW_ATTR_FLAGS_EGRESS:
        raise VerbsError(errno.EOPNOTSUPP, "egress flows are not supported")
    if flags & ~int(IBV_FLOW_ATTR_FLAGS_DONT_TRAP):
        raise VerbsError(errno.EINVAL, f"flow flags 0x{flags:x}")
    if flow_type != IBV_FLOW_ATTR_NORMAL and specs:
        raise VerbsError(errno.EINVAL, "only a NORMAL flow has specs")
    rule = compile_rule(specs)
    fl = Flow(qp, flow_type, priority, rule)
    qp.port.add_flow(fl)
    return {"flow": c.add("flow", fl)}, []


def cmd_destroy_flow(daemon, c, m, fds):
    fl = c.get(m.get("flow"), "flow")
    free_flow(daemon, c, fl)
    del c.objects[m["flow"]]
    return {}, []


def free_flow(daemon, c, fl) -> None:
    fl.qp.port.remove_flow(fl)
