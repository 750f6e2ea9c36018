"""What the library and the daemon share, as the kernel's include/uapi and
rdma-core's kernel-headers/ are between libibverbs and the driver: ring and
queue layouts, WQE/CQE encodings, the control protocol's command table, the
capture record, the run directory and socket rules, limits and constants.

Imports only ``softrdma.enums`` and ``softrdma.errors``: an application that
imports the verbs library loads this package and nothing of the daemon.
"""
