"""Fork support (libibverbs memory.c: ibv_fork_init, ibv_is_fork_initialized).

libibverbs marks registered memory MADV_DONTFORK so a child's copy-on-write
cannot move the pages the HCA was given; that needs ``ibv_fork_init`` before
the first registration (afterwards it fails with EINVAL), unless the kernel
reports copy-on-fork (RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, Linux 5.13+): then
both calls say IBV_FORK_UNNEEDED and fork_init is a no-op.

softrdma is copy-on-fork by construction: an MR in shared memory is a MAP_SHARED memfd
mapping (uapi.shm.SharedRegion) that the daemon maps itself, and a shared
mapping is never copied on write, so neither the parent's nor the daemon's
view of it moves when the process forks; an MR on the process's own memory
(ODP, implicit ODP, an address it supplied: verbs.usermem) is reached by the daemon
through the registering process's pid, so it is that process's pages after
the fork, whichever copy-on-write gave it.  So this is the fork-safe kernel's
answer, always: ``is_fork_initialized()`` is IBV_FORK_UNNEEDED and
``fork_init()`` succeeds at any time, before or after registrations (rdma-core
since v38 asks ibv_is_fork_initialized first, so the "too late" EINVAL never
happens on a copy-on-fork system).
"""

from __future__ import annotations

from ..enums import IBV_FORK_UNNEEDED, ibv_fork_status


def is_fork_initialized() -> ibv_fork_status:
    """ibv_is_fork_initialized(): the copy-on-fork answer, IBV_FORK_UNNEEDED."""
    return IBV_FORK_UNNEEDED


def fork_init() -> None:
    """ibv_fork_init(): on a copy-on-fork system there is nothing to set up
    and libibverbs returns 0, so this never raises."""
