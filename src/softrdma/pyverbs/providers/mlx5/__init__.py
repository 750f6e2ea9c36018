"""pyverbs.providers.mlx5: mlx5 direct verbs (rdma-core pyverbs/providers/mlx5)."""
