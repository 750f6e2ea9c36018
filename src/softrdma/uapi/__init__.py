"""What the library and the daemon share, as the kernel's include/uapi and
rdma-core's kernel-headers/ are between libibverbs and the driver: ring and
queue layouts, WQE/CQE encodings, the control protocol's command table, the
capture record, the run directory and socket rules, limits and constants.

==============  ==============================================================
abi             WQE and CQE slot layouts, the library's WQE writers and CQE
                reader, ``WC`` (ibv_wc)
shm             ``SharedRegion`` (a sealed memfd mapped shared), ``Ring``
queues          the four queue ends: WQ producer/consumer, CQ producer/consumer
control         the control socket's framing (JSON records, fds, fragments)
commands        the command table: each command's fields, fds, reply, errnos;
                ``check_request``, the check both sides run
request         the field checks the table's kinds and the handlers use
capture         the capture ring's record and entry size
rundir          the run directory and the control socket in it
limits          fixed device limits (multicast)
rdma_netlink    rdma_netlink.h's counter modes and masks
clock           the device's free-running clock (hca_core_clock, raw clock)
==============  ==============================================================

Imports only ``softrdma.enums`` and ``softrdma.errors``: an application that
imports the verbs library loads this package and nothing of the daemon.
"""
