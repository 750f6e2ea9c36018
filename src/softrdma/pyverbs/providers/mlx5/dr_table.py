"""pyverbs.providers.mlx5.dr_table: mlx5 steering tables; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "DrTable"))
