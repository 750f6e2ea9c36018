"""Resource profiles: how a ConnectX-like card's pool of RDMA objects is
divided among its functions, as irdma's HMC resource profile divides the
E810's host memory cache (its QP, CQ, MR ... contexts) among the PCI
functions.

The pool is what the PF's device may hold when the card first boots (its
``DeviceCaps`` after the daemon's ``--limit``s): ``max_qp``, ``max_cq``,
``max_mr``, ``max_srq``, ``max_ah``, ``max_pd``.  The functions are the PF,
the ``sriov_totalvfs`` VFs and the ``PF_TOTAL_SF`` sub-functions the
firmware booted with: each gets its *share* of every kind, whether it
exists yet or not (a VF made later finds its share waiting, as a VF's
FPM is set up when the profile is loaded).  The profile is the NV
configuration's ``RDMA_RESOURCE_PROFILE`` (``mlxconfig set``; it takes
effect at the next firmware reset, as the other parameters):

=========== ===============================================================
PF_HEAVY(0) the PF keeps half of each kind, the other half is split evenly
            among the VFs and SFs (irdma's default profile: the PF first);
            without VFs and SFs the PF has it all
EQUAL(1)    every function gets the same share (irdma's "equal" profile)
=========== ===============================================================

A share is what the function's device reports (``ibv_query_device``'s
max_qp ...) and what the daemon's one limit check (``session.room_for``)
holds it to: past its share a function's allocation fails with ENOMEM
(mlx5's firmware answers a resource-limit status, which mlx5_core turns
into -ENOMEM) while other functions still have room.
"""

from __future__ import annotations

#: the DeviceCaps limits a profile divides
RESOURCES = ("max_qp", "max_cq", "max_mr", "max_srq", "max_ah", "max_pd")
PF_HEAVY, EQUAL = 0, 1
PROFILE_NAMES = ((PF_HEAVY, "PF_HEAVY"), (EQUAL, "EQUAL"))


def pool_of(caps) -> dict[str, int]:
    """The card's pool: the PF device's limits when it first booted."""
    return {r: getattr(caps, r) for r in RESOURCES}


def shares(profile: int, pool: dict[str, int], others: int) -> tuple[dict[str, int], dict[str, int]]:
    """(the PF's share, each other function's share) of ``pool`` among the
    PF and ``others`` VFs and SFs under ``profile``."""
    if others <= 0:
        return dict(pool), {r: 0 for r in pool}
    if profile == EQUAL:
        each = {r: n // (others + 1) for r, n in pool.items()}
        return dict(each), each
    pf = {r: n - n // 2 for r, n in pool.items()}
    return pf, {r: (n // 2) // others for r, n in pool.items()}


def apply(caps, share: dict[str, int]) -> None:
    """Set a function's device limits to its share."""
    for r, n in share.items():
        setattr(caps, r, n)


__all__ = ["EQUAL", "PF_HEAVY", "PROFILE_NAMES", "RESOURCES", "apply", "pool_of", "shares"]
