"""The kernel's rdma_counter (drivers/infiniband/core/counters.c): a port's
counter mode and the counters QPs are bound to, behind ``rdma statistic qp``.

A counter is what a NIC's per-QP counter set is (mlx5's q counters): the
QPs bound to it add to it while they are bound, and what they added stays
when they leave.  Nothing here counts per packet -- every QP already counts
in its own list (``transport.counters``).  Binding remembers the QP's list
as it was; a counter's value is

    base + sum over the bound QPs of (qp.cnt now - qp.cnt at bind)

computed when someone asks (``RdmaCounter.values``), and unbinding a QP
(or destroying it) adds its share to ``base``.

Semantics kept from counters.c (Linux 6.1):

* The port's mode: NONE until the first manual bind makes it MANUAL; back
  to NONE when the last counter is freed (``rdma_counter_free``).  ``set
  auto`` with criteria makes it AUTO -- refused with EBUSY, and the
  kernel's extack message, while any counter exists; ``auto off`` leaves
  MANUAL if counters remain, else NONE.
* A counter lives while QPs are bound to it (one kref per QP): the last
  unbind, or the destruction of its last QP, frees it.
* AUTO mode binds a QP when a modify with IB_QP_STATE = INIT and IB_QP_PORT
  reaches a QP not bound yet (``_ib_modify_qp`` calls
  ``rdma_counter_bind_qp_auto`` before the driver sees the modify): to the
  first counter, in id order, whose criteria (QP type, creator's pid)
  match, else to a new one.
* Errors: bind or unbind while AUTO: EINVAL; a QPN no QP has: ENOENT; an
  unknown counter: ENOENT; binding a QP already bound: EINVAL with a cntn,
  ENOMEM without (``alloc_and_bind`` returns NULL for every failure, and
  ``rdma_counter_bind_qpn_alloc`` turns NULL into -ENOMEM); a QP on another
  port (a QP in RESET has no port yet, so cannot join an existing counter):
  EINVAL; unbinding a QP that is not bound to that counter: EINVAL.

Real rxe implements no counter ops (``counter_bind_qp``,
``counter_alloc_stats``), so on its kernel every bind fails with ENOMEM;
softrdma implements them as mlx5 does, which is what makes per-QP counters
exist at all.  Counter ids are the driver's (mlx5: the hardware set's id,
never 0): the lowest free id from 1.
"""

from __future__ import annotations

import errno
import os
from itertools import count

from ..errors import VerbsError
from ..transport.counters import new_counters
from ..uapi.rdma_netlink import (ALL_AUTO_MODE_MASKS, RDMA_COUNTER_MASK_PID, RDMA_COUNTER_MASK_QP_TYPE,
                                 RDMA_COUNTER_MODE_AUTO, RDMA_COUNTER_MODE_MANUAL, RDMA_COUNTER_MODE_NONE)

RESET = 0                                           # IBV_QPS_RESET
EBUSY_EXTACK = "Modifying auto mode is not allowed when there is a bound QP"


def nl_error(code: int, extack: str | None = None) -> VerbsError:
    """An RDMA netlink error: the errno the kernel returns, and the extack
    message it attaches (iproute2 prints it as "Error: ..." before its
    perror line)."""
    e = VerbsError(code, os.strerror(code))
    e.extack = extack
    return e


def qp_port(qp) -> int:
    """qp->port: the port a modify gave the QP; 0 while it is in RESET."""
    return int(qp.attr.port_num) if qp.state != RESET else 0


class RdmaCounter:
    """struct rdma_counter: an id, how it was made, and its bound QPs."""

    __slots__ = ("id", "port", "mode", "mask", "qp_type", "pid", "base", "bound")

    def __init__(self, cid: int, port: int, mode: int, mask: int, qp_type: int, pid: int | None):
        self.id = cid
        self.port = port
        self.mode = mode
        self.mask = mask
        self.qp_type = qp_type          # auto mode's criterion (auto_mode_param)
        self.pid = pid                  # the task of the QP it was made for (restrack parent)
        self.base = new_counters()      # what QPs added before they were unbound
        self.bound: dict[int, tuple] = {}     # qpn -> (transport QP, its cnt at bind time)

    def attach(self, qp) -> None:
        self.bound[qp.qp_num] = (qp, list(qp.cnt))

    def detach(self, qp) -> None:
        _, snap = self.bound.pop(qp.qp_num)
        base = self.base
        for i, v in enumerate(qp.cnt):
            base[i] += v - snap[i]

    def values(self) -> list[int]:
        out = list(self.base)
        for qp, snap in self.bound.values():
            for i, v in enumerate(qp.cnt):
                out[i] += v - snap[i]
        return out

    def qpns(self) -> list[int]:
        return sorted(self.bound)


class PortCounter:
    """struct rdma_port_counter of one port: its mode and its counters."""

    def __init__(self, port: int = 1):
        self.port = port
        self.mode = RDMA_COUNTER_MODE_NONE
        self.mask = 0
        self.counters: dict[int, RdmaCounter] = {}
        self.of_qp: dict[int, RdmaCounter] = {}       # qpn -> counter (qp->counter)

    # -- mode
    def _set_mode(self, mode: int, mask: int) -> None:
        """__counter_set_mode()."""
        if mode == RDMA_COUNTER_MODE_AUTO:
            if mask & ~ALL_AUTO_MODE_MASKS:
                raise nl_error(errno.EINVAL)
            if self.counters:
                raise nl_error(errno.EBUSY, EBUSY_EXTACK)
        self.mode, self.mask = mode, mask

    def set_auto_mode(self, mask: int) -> None:
        """rdma_counter_set_auto_mode(): mask 0 turns auto off."""
        if mask:
            mode = RDMA_COUNTER_MODE_AUTO
        else:
            mode = RDMA_COUNTER_MODE_MANUAL if self.counters else RDMA_COUNTER_MODE_NONE
        if (mode, mask) != (self.mode, self.mask):
            self._set_mode(mode, mask)

    # -- counters
    def _alloc(self, qp, pid: int | None, mode: int) -> RdmaCounter:
        """alloc_and_bind() once it is known to succeed."""
        cid = next(i for i in count(1) if i not in self.counters)
        mask = self.mask if mode == RDMA_COUNTER_MODE_AUTO else 0
        c = RdmaCounter(cid, self.port, mode, mask, qp.qp_type, pid)
        self.counters[cid] = c
        c.attach(qp)
        self.of_qp[qp.qp_num] = c
        return c

    def _free(self, c: RdmaCounter) -> None:
        """rdma_counter_free(): the last QP left."""
        del self.counters[c.id]
        if not self.counters and self.mode == RDMA_COUNTER_MODE_MANUAL:
            self.mode, self.mask = RDMA_COUNTER_MODE_NONE, 0

    def _matches(self, c: RdmaCounter, qp, pid: int | None) -> bool:
        """auto_mode_match()."""
        if self.mask & RDMA_COUNTER_MASK_QP_TYPE and c.qp_type != qp.qp_type:
            return False
        if self.mask & RDMA_COUNTER_MASK_PID and c.pid != pid:
            return False
        return True

    def bind_qp_auto(self, qp, pid: int | None) -> RdmaCounter | None:
        """rdma_counter_bind_qp_auto(): nothing unless the port is AUTO."""
        if self.mode != RDMA_COUNTER_MODE_AUTO or qp.qp_num in self.of_qp:
            return None
        for cid in sorted(self.counters):
            c = self.counters[cid]
            if self._matches(c, qp, pid):
                c.attach(qp)
                self.of_qp[qp.qp_num] = c
                return c
        return self._alloc(qp, pid, RDMA_COUNTER_MODE_AUTO)

    def bind_qpn(self, qp, cntn: int) -> RdmaCounter:
        """rdma_counter_bind_qpn(): ``qp`` is None when no QP has the QPN."""
        if self.mode == RDMA_COUNTER_MODE_AUTO:
            raise nl_error(errno.EINVAL)
        if qp is None:
            raise nl_error(errno.ENOENT)
        c = self.counters.get(cntn)
        if c is None:
            raise nl_error(errno.ENOENT)
        if c.port != qp_port(qp) or qp.qp_num in self.of_qp:
            raise nl_error(errno.EINVAL)
        c.attach(qp)
        self.of_qp[qp.qp_num] = c
        return c

    def bind_qpn_alloc(self, qp, pid: int | None) -> RdmaCounter:
        """rdma_counter_bind_qpn_alloc(): a new counter for the QP."""
        if self.mode == RDMA_COUNTER_MODE_AUTO:
            raise nl_error(errno.EINVAL)
        if qp is None:
            raise nl_error(errno.ENOENT)
        port = qp_port(qp)
        if port and port != self.port:
            raise nl_error(errno.EINVAL)
        self._set_mode(RDMA_COUNTER_MODE_MANUAL, 0)
        if qp.qp_num in self.of_qp:
            raise nl_error(errno.ENOMEM)             # alloc_and_bind() -> NULL
        return self._alloc(qp, pid, RDMA_COUNTER_MODE_MANUAL)

    def unbind_qpn(self, qp, cntn: int) -> None:
        """rdma_counter_unbind_qpn()."""
        if qp is None:
            raise nl_error(errno.ENOENT)
        port = qp_port(qp)
        if port and port != self.port:
            raise nl_error(errno.EINVAL)
        c = self.of_qp.get(qp.qp_num)
        if c is None or c.id != cntn or self.mode != RDMA_COUNTER_MODE_MANUAL:
            raise nl_error(errno.EINVAL)
        self._unbind(qp, c)

    def qp_destroyed(self, qp) -> None:
        """ib_destroy_qp_user() -> rdma_counter_unbind_qp(qp, force=true)."""
        c = self.of_qp.get(qp.qp_num)
        if c is not None and c.bound.get(qp.qp_num, (None,))[0] is qp:
            self._unbind(qp, c)

    def _unbind(self, qp, c: RdmaCounter) -> None:
        del self.of_qp[qp.qp_num]
        c.detach(qp)
        if not c.bound:
            self._free(c)
