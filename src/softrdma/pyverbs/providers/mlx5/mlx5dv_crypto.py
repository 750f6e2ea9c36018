"""pyverbs.providers.mlx5.mlx5dv_crypto: mlx5 crypto login and DEKs; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor(
    "mlx5",
    "Mlx5CryptoLoginAttr", "Mlx5CryptoExtLoginAttr", "Mlx5DEKInitAttr", "Mlx5DEKAttr",
    "Mlx5CryptoAttr", "Mlx5DEK", "Mlx5CryptoLogin"))
