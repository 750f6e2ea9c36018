"""softrdma.pyverbs: rdma-core's pyverbs module layout over softrdma.verbs.

``from softrdma.pyverbs.device import Context`` works as ``from
pyverbs.device import Context`` does; ``softrdma pyverbs-path`` prints a
directory whose ``pyverbs`` package maps every ``pyverbs.X`` import here,
so unmodified pyverbs programs run on softrdma (``softrdma run -- ...``).
What softrdma does not implement raises ``PyverbsRDMAError(...,
EOPNOTSUPP)`` when used, never silently.
"""

MODULES = ("addr", "base", "cq", "device", "enums", "libibverbs_enums", "mr", "pd", "pyverbs_error", "qp",
           "srq", "wr", "mem_alloc", "librdmacm_enums", "cmid", "cm_enums", "fork", "utils")
