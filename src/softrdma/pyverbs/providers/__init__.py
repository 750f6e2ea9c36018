"""pyverbs.providers: the vendor (direct-verbs) extensions rdma-core's
pyverbs ships, here with their module layout and names so programs and
rdma-core's tests import. softrdma's device is neither an mlx5 nor an EFA
device: every object fails as it does on such a device (rxe), and the
enums hold the values of the vendors' headers."""
