"""pyverbs.providers.mlx5.mlx5dv_objects: mlx5dv_init_obj's views of verbs objects; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "Mlx5DvPD", "Mlx5DvCQ", "Mlx5DvQP", "Mlx5DvSRQ", "Mlx5DvObj"))
