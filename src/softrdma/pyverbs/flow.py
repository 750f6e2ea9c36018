from ..verbs.flow import Flow, FlowAttr  # noqa: F401
