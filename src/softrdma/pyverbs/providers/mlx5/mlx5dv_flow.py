"""pyverbs.providers.mlx5.mlx5dv_flow: mlx5 flow matchers and actions; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor(
    "mlx5",
    "Mlx5FlowMatchParameters", "Mlx5FlowMatcherAttr", "Mlx5FlowMatcher",
    "Mlx5PacketReformatFlowAction", "Mlx5FlowActionAttr", "Mlx5Flow"))
