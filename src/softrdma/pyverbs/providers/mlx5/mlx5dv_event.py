"""pyverbs.providers.mlx5.mlx5dv_event (rdma-core 64): DEVX event channels; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "EventChannel", "EventHeader", "EventFD"))
