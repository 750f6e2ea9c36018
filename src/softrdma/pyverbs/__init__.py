"""softrdma.pyverbs: rdma-core's pyverbs module layout over softrdma.verbs.

``from softrdma.pyverbs.device import Context`` works as ``from
pyverbs.device import Context`` does; ``softrdma pyverbs-path`` prints a
directory whose ``pyverbs`` package maps every ``pyverbs.X`` import here,
so unmodified pyverbs programs run on softrdma (``softrdma run -- ...``).
What softrdma does not implement raises ``PyverbsRDMAError(...,
EOPNOTSUPP)`` when used, never silently.
"""

MODULES = ("addr", "base", "cq", "device", "enums", "libibverbs_enums", "mr", "pd", "pyverbs_error", "qp",
           "srq", "wr", "mem_alloc", "librdmacm_enums", "cmid", "cm_enums", "fork", "utils",
           "xrcd", "wq", "spec", "flow", "dmabuf", "dma_util",
           "providers", "providers.mlx5", "providers.mlx5.mlx5_enums", "providers.mlx5.mlx5dv",
           "providers.mlx5.mlx5_vfio", "providers.mlx5.mlx5dv_crypto", "providers.mlx5.mlx5dv_flow",
           "providers.mlx5.mlx5dv_mkey", "providers.mlx5.mlx5dv_objects", "providers.mlx5.mlx5dv_sched",
           "providers.mlx5.dr_action", "providers.mlx5.dr_domain", "providers.mlx5.dr_matcher",
           "providers.mlx5.dr_rule", "providers.mlx5.dr_table", "providers.mlx5.mlx5dv_event",
           "providers.mlx5.mlx5dv_dmabuf",
           "providers.efa", "providers.efa.efa_enums", "providers.efa.efadv")
