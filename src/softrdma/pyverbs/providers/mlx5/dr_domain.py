"""pyverbs.providers.mlx5.dr_domain: mlx5 steering domains; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "DrDomain"))
