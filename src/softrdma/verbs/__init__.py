"""softrdma.verbs: the client library -- a process's view of softrdma devices.

Classes and signatures follow rdma-core's pyverbs (Context, PD, MR, CQ,
CompChannel, QP, SRQ, AH, SendWR, RecvWR, SGE, QPAttr, QPInitAttr, QPCap,
AHAttr, GlobalRoute, GID), so ``softrdma.pyverbs`` is this package under
pyverbs' module names.  Each Context is one control connection to
softrdmad; queues and memory are shared memory with the daemon: posting a
WR writes a WQE into a ring, polling a CQ reads the ring, and neither makes
a system call unless the daemon sleeps.
"""
