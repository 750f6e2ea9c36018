"""pyverbs.providers.mlx5.mlx5dv_sched: mlx5 QoS scheduling elements; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "Mlx5dvSchedAttr", "Mlx5dvSchedNode", "Mlx5dvSchedLeaf"))
