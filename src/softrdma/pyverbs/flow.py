"""pyverbs.flow: steering flows (pyverbs/flow.pyx).

``FlowAttr`` is ibv_flow_attr plus its list of specs (pyverbs.spec).
softrdma has no flow steering yet: ``Flow`` fails as ibv_create_flow does
on rxe (uverbs: no create_flow, EOPNOTSUPP) with pyverbs' message."""

from ..enums import IBV_FLOW_ATTR_NORMAL
from ._unsupported import not_supported


class FlowAttr:
    def __init__(self, num_of_specs=0, flow_type=IBV_FLOW_ATTR_NORMAL, priority=0, port=1, flags=0):
        self.num_of_specs = num_of_specs
        self.type = flow_type
        self.priority = priority
        self.port = port
        self.flags = flags
        self.specs = []


class Flow:
    def __init__(self, qp, flow_attr):
        raise not_supported("Flow creation failed")
