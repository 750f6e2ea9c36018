"""XRC domains (pyverbs.xrcd): XRCDInitAttr, XRCD, and the XRC parts of QP
creation (``create_xrc_qp``, which verbs.qp calls for IBV_QPT_XRC_SEND and
IBV_QPT_XRC_RECV).

``XRCD(ctx, XRCDInitAttr(comp_mask, oflags, fd))`` is ibv_open_xrcd:
libibverbs' checks (both IBV_XRCD_INIT_ATTR_FD and _OFLAGS in comp_mask,
EINVAL; unknown bits, EOPNOTSUPP), then the daemon opens the domain of the
file ``fd`` refers to -- the same one for every context and process that
opens the same inode (O_CREAT creates it, O_EXCL refuses an existing one),
as the kernel's ib_uverbs_open_xrcd -- or, for fd -1, a private one.
The fd is passed to the daemon, which only looks at its inode.

An XRC SRQ (verbs.srq, with ``xrcd`` and ``cq``) and an XRC TGT QP are
made on a domain; closing the domain closes them first, QPs then SRQs, as
pyverbs' XRCD.close.
"""

from __future__ import annotations

import errno
import os
import weakref

from ..enums import (
    IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QP_INIT_ATTR_XRCD, IBV_QPT_XRC_RECV,
    IBV_QPT_XRC_SEND, IBV_XRCD_INIT_ATTR_FD, IBV_XRCD_INIT_ATTR_OFLAGS,
)
from ..uapi.commands import CMD
from .base import VerbsObject
from .errors import PyverbsError, PyverbsRDMAError

_XRCD_ATTRS = int(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS)
# what ibv_create_qp_ex takes for each XRC type (the kernel's create_qp)
_INI_COMP_MASK = int(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
_TGT_COMP_MASK = int(IBV_QP_INIT_ATTR_XRCD)


class XRCDInitAttr:
    """ibv_xrcd_init_attr: comp_mask (IBV_XRCD_INIT_ATTR_*), oflags (open(2)
    flags for the inode: O_CREAT, O_EXCL), fd (-1 for a private domain)."""

    def __init__(self, comp_mask, oflags, fd):
        self.comp_mask = comp_mask
        self.oflags = oflags
        self.fd = fd


class XRCD(VerbsObject):
    destroy_cmd = CMD.close_xrcd
    ctx_close_rank = 2                  # a Context closes its domains with its PDs, after the CQs

    def __init__(self, context, init_attr: XRCDInitAttr):
        if context is None or init_attr is None:
            raise TypeError("XRCD needs a Context and an XRCDInitAttr")
        mask = int(init_attr.comp_mask)
        if mask & ~_XRCD_ATTRS:
            raise PyverbsRDMAError("Failed to allocate XRCD", errno.EOPNOTSUPP)
        if mask != _XRCD_ATTRS:         # ibv_cmd_open_xrcd: both fields are required
            raise PyverbsRDMAError("Failed to allocate XRCD", errno.EINVAL)
        fd = int(init_attr.fd)
        fds = []
        if fd != -1:
            try:
                os.fstat(fd)
            except (OSError, OverflowError, ValueError):
                raise PyverbsRDMAError("Failed to allocate XRCD", errno.EBADF) from None
            fds = [fd]
        oflags = int(init_attr.oflags)
        if not 0 <= oflags <= 0xFFFFFFFF:
            raise PyverbsRDMAError("Failed to allocate XRCD", errno.EINVAL)
        try:
            reply, _ = context.conn.call(CMD.open_xrcd, fds=fds, oflags=oflags)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to allocate XRCD", e.error_code) from None
        self.handle = reply["xrcd"]
        self.ctx = context
        self.srqs = weakref.WeakSet()
        self.qps = weakref.WeakSet()
        self.closed = False
        context.conn.track(self)
        context.add_ref(self)

    def add_ref(self, obj) -> None:
        if hasattr(obj, "qp_num"):
            self.qps.add(obj)
        elif hasattr(obj, "get_srq_num"):
            self.srqs.add(obj)
        else:
            raise PyverbsError("Unrecognized object type")

    def _close_children(self) -> None:
        for obj in list(self.qps) + list(self.srqs):      # pyverbs: close_weakrefs([self.qps, self.srqs])
            obj.close()

    def _destroy(self) -> None:
        try:
            super()._destroy()
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to dealloc XRCD", e.error_code) from None


class NoSendQueue:
    """The send queue of an XRC TGT QP, which has none: posting to it is
    EINVAL, as the provider refuses it."""

    @staticmethod
    def next_slot():
        raise PyverbsRDMAError("Failed to post send: an XRC TGT QP has no send queue", errno.EINVAL)


def create_xrc_qp(qp, ctx, init_attr, send_ops: int) -> tuple:
    """Check ``init_attr`` for an XRC QP as ibv_create_qp_ex and the kernel
    do; returns the PD, the domain and the send_ops_flags the QP has (the
    creation request itself is verbs.qp's)."""
    mask = int(init_attr.comp_mask)
    if init_attr.qp_type == IBV_QPT_XRC_RECV:
        if mask & ~_TGT_COMP_MASK or not mask & IBV_QP_INIT_ATTR_XRCD or init_attr.xrcd is None:
            raise PyverbsRDMAError("Failed to create QP: an XRC TGT QP is created on an XRCD"
                                   " (IBV_QP_INIT_ATTR_XRCD alone)", errno.EINVAL)
        if init_attr.xrcd.closed:
            raise PyverbsRDMAError("Failed to create QP: the XRCD is closed", errno.EINVAL)
        return None, init_attr.xrcd, 0
    if mask & ~_INI_COMP_MASK:
        raise PyverbsRDMAError(f"Failed to create QP: comp_mask 0x{mask:x} not supported on an XRC INI QP",
                               errno.EOPNOTSUPP)
    if not mask & IBV_QP_INIT_ATTR_PD or init_attr.pd is None:
        raise PyverbsRDMAError("Failed to create QP: IBV_QP_INIT_ATTR_PD and a PD are required", errno.EINVAL)
    if init_attr.send_cq is None:
        raise PyverbsRDMAError("Failed to create QP: an XRC INI QP needs a send CQ", errno.EINVAL)
    ops = int(init_attr.send_ops_flags) if mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS else 0
    if ops & ~send_ops:
        raise PyverbsRDMAError("Failed to create QP: send_ops_flags not supported on an XRC INI QP",
                               errno.EOPNOTSUPP)
    return init_attr.pd, None, ops


XRC_QP_TYPES = (int(IBV_QPT_XRC_SEND), int(IBV_QPT_XRC_RECV))

__all__ = ["XRCD", "XRCDInitAttr", "NoSendQueue", "create_xrc_qp", "XRC_QP_TYPES"]
