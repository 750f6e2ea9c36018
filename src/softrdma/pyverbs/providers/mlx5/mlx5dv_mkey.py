"""pyverbs.providers.mlx5.mlx5dv_mkey: mlx5 mkeys and signature offload; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor(
    "mlx5",
    "Mlx5SigCrc", "Mlx5SigT10Dif", "Mlx5SigBlockDomain", "Mlx5SigBlockAttr", "Mlx5SigErr",
    "Mlx5MkeyErr", "Mlx5MkeyConfAttr", "Mlx5MrInterleaved", "Mlx5Mkey"))
