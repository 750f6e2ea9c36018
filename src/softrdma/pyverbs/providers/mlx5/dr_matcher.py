"""pyverbs.providers.mlx5.dr_matcher: mlx5 steering matchers; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "DrMatcher"))
