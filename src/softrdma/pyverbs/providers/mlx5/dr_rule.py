"""pyverbs.providers.mlx5.dr_rule: mlx5 steering rules; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "DrRule"))
