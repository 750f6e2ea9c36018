"""pyverbs.providers.mlx5.mlx5dv_dmabuf (rdma-core 64): mlx5 dma-buf MRs; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor("mlx5", "Mlx5DmaBufMR"))
