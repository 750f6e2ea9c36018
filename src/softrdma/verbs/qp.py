"""Queue pairs (pyverbs.qp): QPCap, QPInitAttr, QPInitAttrEx, QPAttr, QP.

A QP is created on a PD with QPInitAttr (ibv_create_qp) or on a Context
with QPInitAttrEx (ibv_create_qp_ex, whose send_ops_flags this module
checks; the extended QP's ibv_wr_* API is qpex.py).

``post_send``/``post_recv`` check the work request as a provider does
(SGE count, inline size, queue room) and write it into the shared ring; the
daemon's transport does the rest.  ``modify``/``query`` go over the control
connection, where the transport checks every attribute (EINVAL etc. come
back as PyverbsRDMAError).  ``bind_mw`` is ibv_bind_mw (a type 1 window:
libibverbs' checks, then a BIND_MW WQE); ``attach_mcast``/``detach_mcast``
are ibv_attach_mcast/ibv_detach_mcast (UD QPs)."""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from ..enums import (
    IBV_MTU_1024, IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_INIT_ATTR_CREATE_FLAGS,
    IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QP_MAX_DEST_RD_ATOMIC,
    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT,
    IBV_QP_QKEY, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE,
    IBV_QP_TIMEOUT, IBV_QPS_INIT, IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
    IBV_QPT_RAW_PACKET, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_RX_HASH, IBV_QPT_XRC_RECV, IBV_QPT_XRC_SEND,
    IBV_ACCESS_ZERO_BASED, IBV_MW_TYPE_1, IBV_SEND_INLINE, IBV_WR_BIND_MW,
    IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES, IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY,
    IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS, IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG,
)
from ..enums import ibv_qp_create_send_ops_flags as X
from ..uapi import abi
from ..uapi import qp_attr
from ..uapi.commands import CMD
from ..uapi.queues import WorkQueueProducer
from ..uapi.wr import WR_IMM_MASK, WR_INV_MASK, WR_OPCODE_INFO, send_ops_flags, wr_opcodes
from .addr import GID, AHAttr
from .base import VerbsObject
from .connection import Gone
from .cq import bswap32
from .device import Context
from .pd import RES_TYPE_RQ, RES_TYPE_SQ, alloc_ring, free_ring
from .errors import PyverbsRDMAError
from .wr import inc_rkey
from .xrcd import XRC_QP_TYPES, NoSendQueue, create_xrc_qp

_IMM_OPS = wr_opcodes(WR_IMM_MASK)             # imm_data: __be32 on the user's side
_INV_OPS = wr_opcodes(WR_INV_MASK)             # the rkey to invalidate rides in imm_data
# every ibv_wr_opcode: anything else is EINVAL at post time (the provider's
# validate_send_wr); what the QP type cannot do completes in error
_WR_OPCODES = frozenset(map(int, WR_OPCODE_INFO))
_BIND_QP_TYPES = WR_OPCODE_INFO[IBV_WR_BIND_MW].qp_types
_U32_MAX = 0xFFFFFFFF
# a plain int: ``int & IntFlag`` builds an IntFlag (two enum calls) on every post
_SEND_INLINE = int(IBV_SEND_INLINE)

# ibv_query_qp_data_in_order's device caps: none, as rxe (which has no such
# op: libibverbs answers 0).  The daemon copies a packet's payload into the
# receiver's memory with one memcpy, which guarantees no byte order -- glibc's
# vector copies store a block's head and tail before its middle -- so
# neither the whole message nor a 128-byte block is known to land in order.
DATA_IN_ORDER_CAPS = 0

# ibv_wr_* builders an extended QP may ask for (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS),
# per QP type (uapi.wr: rxe's RXE_SUP_*_QP_SEND_OPS_FLAGS, less what the
# transport does not carry)
SEND_OPS = {t: send_ops_flags(t) for t in (IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_XRC_SEND)}
# pyverbs' per-type masks of to_init/to_rtr/to_rts beyond RC's (XRC INI is RC
# without the responder's, XRC TGT RC without the requester's)
_RTR_XRC_SEND = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
_RTS_XRC_RECV = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN
# the comp_mask bits rxe's create_qp_ex takes (check_qp_init_attr)
_EX_COMP_MASK = int(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
# a raw packet QP may be an RSS QP: an indirection table and a hash configuration
_RSS_COMP_MASK = int(IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH)
# pyverbs' QP._get_comp_mask for IBV_QPT_RAW_PACKET: the kernel's masks (port only)
_RAW_MASKS = {"INIT": int(IBV_QP_STATE | IBV_QP_PORT), "RTR": int(IBV_QP_STATE), "RTS": int(IBV_QP_STATE)}


class QPCap(qp_attr.QPCap):
    """ibv_qp_cap (uapi.qp_attr) with pyverbs' defaults."""

    def __init__(self, max_send_wr: int = 1, max_recv_wr: int = 10, max_send_sge: int = 1,
                 max_recv_sge: int = 1, max_inline_data: int = 0):
        super().__init__(max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data)


class QPInitAttr:
    def __init__(self, qp_type: int = IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None,
                 cap: QPCap | None = None, sq_sig_all: int = 1):
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap or QPCap()
        self.sq_sig_all = sq_sig_all


class QPInitAttrEx:
    """ibv_qp_init_attr_ex, for QPs created on a Context (ibv_create_qp_ex);
    ``send_ops_flags`` with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS in ``comp_mask``
    gives a QPEx its ibv_wr_* builders."""

    def __init__(self, qp_type: int = IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None,
                 cap: QPCap | None = None, sq_sig_all: int = 0, comp_mask: int = 0, pd=None, xrcd=None,
                 create_flags: int = 0, max_tso_header: int = 0, source_qpn: int = 0, hash_conf=None,
                 ind_table=None, send_ops_flags: int = 0):
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap or QPCap()
        self.sq_sig_all = sq_sig_all
        self.comp_mask = comp_mask
        self.pd = pd
        self.xrcd = xrcd
        self.create_flags = create_flags
        self.max_tso_header = max_tso_header
        self.source_qpn = source_qpn
        self.hash_conf = hash_conf
        self.ind_table = ind_table
        self.send_ops_flags = send_ops_flags

    def checked_pd(self):
        """The PD to create the QP on, after ibv_create_qp_ex's and rxe's
        checks of the extended attributes (EOPNOTSUPP for what they refuse,
        EINVAL without a PD)."""
        mask = int(self.comp_mask)
        if self.qp_type == IBV_QPT_RAW_PACKET and mask & _RSS_COMP_MASK:
            if mask & _RSS_COMP_MASK != _RSS_COMP_MASK or self.ind_table is None or self.hash_conf is None:
                raise PyverbsRDMAError("Failed to create QP: an RSS QP needs IBV_QP_INIT_ATTR_IND_TABLE and"
                                       " IBV_QP_INIT_ATTR_RX_HASH with their objects", errno.EINVAL)
            mask &= ~_RSS_COMP_MASK
        if mask != IBV_QP_INIT_ATTR_PD:            # libibverbs: PD alone is plain ibv_create_qp
            if mask & ~_EX_COMP_MASK:
                raise PyverbsRDMAError(f"Failed to create QP: comp_mask 0x{mask:x} asks for XRC, TSO or RSS",
                                       errno.EOPNOTSUPP)
            if mask & IBV_QP_INIT_ATTR_CREATE_FLAGS and self.create_flags:
                raise PyverbsRDMAError(f"Failed to create QP: create_flags 0x{int(self.create_flags):x}"
                                       " not supported", errno.EOPNOTSUPP)
            if mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS:
                ops = int(self.send_ops_flags)
                bad = ops & ~SEND_OPS.get(int(self.qp_type), 0)
                if bad:
                    names = ", ".join(f.name for f in X if f & bad) or hex(bad)
                    raise PyverbsRDMAError(f"Failed to create QP: send_ops_flags {names} not supported on this"
                                           " QP type", errno.EOPNOTSUPP)
        if not mask & IBV_QP_INIT_ATTR_PD or self.pd is None:
            raise PyverbsRDMAError("Failed to create QP: IBV_QP_INIT_ATTR_PD and a PD are required", errno.EINVAL)
        return self.pd


def _cap_field(name: str) -> property:
    """pyverbs' QPInitAttr(Ex).max_send_wr & co.: the init attr's ibv_qp_cap field."""
    return property(lambda self: getattr(self.cap, name), lambda self, v: setattr(self.cap, name, v))


for _cls in (QPInitAttr, QPInitAttrEx):
    for _name in ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"):
        setattr(_cls, _name, _cap_field(_name))


class QPAttr(qp_attr.QPAttr):
    """ibv_qp_attr (uapi.qp_attr) as pyverbs constructs it: INIT, an AHAttr
    and a QPCap of pyverbs' own; ``to_wire(mask)`` is the modify_qp body."""

    def __init__(self, qp_state: int = IBV_QPS_INIT, cur_qp_state: int = IBV_QPS_RESET, port_num: int = 1,
                 path_mtu: int = IBV_MTU_1024):
        super().__init__(qp_state=qp_state, cur_qp_state=cur_qp_state, port_num=port_num, path_mtu=path_mtu,
                         cap=QPCap(), ah_attr=AHAttr())


class ECE:
    """struct ibv_ece: enhanced connection establishment, a vendor's options
    carried in the CM's REQ/REP (vendor_id, options, comp_mask)."""

    def __init__(self, vendor_id=0, options=0, comp_mask=0):
        self.vendor_id = vendor_id
        self.options = options
        self.comp_mask = comp_mask

    def __str__(self):
        f = "{:22}: 0x{:<20x}\n"
        return ("ECE:\n" + f.format("Vendor ID", self.vendor_id) + f.format("Options", self.options)
                + f.format("Comp Mask", self.comp_mask))


class QP(VerbsObject):
    """``QP(pd, QPInitAttr)`` (ibv_create_qp) or ``QP(ctx, QPInitAttrEx)``
    (ibv_create_qp_ex), as pyverbs takes them."""

    destroy_cmd = CMD.destroy_qp
    close_rank = 1

    def __init__(self, creator, init_attr, qp_attr: QPAttr | None = None):
        self.closed = True
        self._flows: set = set()          # flows on it: they live until closed or the QP closes
        if isinstance(init_attr, QPInitAttrEx) and int(init_attr.qp_type) in XRC_QP_TYPES \
                and isinstance(creator, Context):
            self._create_xrc(creator, init_attr, qp_attr)
            return
        if isinstance(init_attr, QPInitAttrEx):
            if not isinstance(creator, Context):
                raise TypeError("a QP with QPInitAttrEx is created on a Context (ibv_create_qp_ex)")
            pd = init_attr.checked_pd()
            self.send_ops_flags = int(init_attr.send_ops_flags) \
                if init_attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS else 0
        elif isinstance(creator, Context):
            raise TypeError("a QP created on a Context takes QPInitAttrEx (ibv_create_qp_ex)")
        else:
            pd = creator
            self.send_ops_flags = 0
        self.pd = pd
        self.ctx = pd.ctx
        self.qp_type = init_attr.qp_type
        self.init_attr = init_attr
        if self.qp_type == IBV_QPT_RAW_PACKET and isinstance(init_attr, QPInitAttrEx) \
                and init_attr.comp_mask & _RSS_COMP_MASK:
            self._create_rss(init_attr)
            return
        cap = init_attr.cap
        self.cap = cap
        if init_attr.send_cq is None or init_attr.recv_cq is None:
            raise PyverbsRDMAError("Failed to create QP: send and receive CQs are required", errno.EINVAL)
        a = self.ctx._attr
        for field, most in (("max_send_wr", a["max_qp_wr"]), ("max_recv_wr", a["max_qp_wr"]),
                            ("max_send_sge", a["max_sge"]), ("max_recv_sge", a["max_sge"]),
                            ("max_inline_data", a["max_inline_data"])):
            if getattr(cap, field) > most:          # rxe_qp_chk_cap, before any ring is sized from it
                raise PyverbsRDMAError(f"Failed to create QP: {field} {getattr(cap, field)} above the device's"
                                       f" {most}", errno.EINVAL)
        self.rq = self.doorbell = None
        # (on a parent domain: in its allocator's buffers, see verbs.pd)
        self.sq = alloc_ring(pd, max(cap.max_send_wr, 1), abi.send_slot_size(cap.max_send_sge, cap.max_inline_data),
                             "softrdma-sq", RES_TYPE_SQ)
        try:
            if init_attr.srq is None:
                self.rq = alloc_ring(pd, max(cap.max_recv_wr, 1), abi.recv_slot_size(cap.max_recv_sge), "softrdma-rq",
                                     RES_TYPE_RQ)
            self.doorbell = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        except BaseException:
            self._release()
            raise
        fds = [self.sq.fd] + ([self.rq.fd] if self.rq else []) + [self.doorbell]
        try:
            reply, _ = self.ctx.conn.call(
                CMD.create_qp, fds=fds, pd=pd.handle, qp_type=int(self.qp_type), send_cq=init_attr.send_cq.handle,
                recv_cq=init_attr.recv_cq.handle, srq=init_attr.srq.handle if init_attr.srq else None,
                cap=cap.to_wire(), sq_sig_all=bool(init_attr.sq_sig_all))
        except PyverbsRDMAError:
            self._release()
            raise
        self.handle = reply["qp"]
        self.qp_num = reply["qp_num"]
        # the CQs it completes to, cleaned when it moves to RESET (the
        # caller may reuse its init attr for other QPs)
        self._cqs = tuple({id(c): c for c in (init_attr.recv_cq, init_attr.send_cq)}.values())
        self.state = IBV_QPS_RESET       # ibv_qp.state: what this process last set
        self.sq_wq = WorkQueueProducer(self.sq, self.doorbell, max(cap.max_send_wr, 1))
        self.rq_wq = WorkQueueProducer(self.rq, self.doorbell, max(cap.max_recv_wr, 1)) if self.rq else None
        self.closed = False
        self.pd.add_ref(self)
        self.ctx.conn.track(self)
        if qp_attr is not None:
            if self.qp_type in (IBV_QPT_UD, IBV_QPT_RAW_PACKET):
                self.to_rts(qp_attr)
            else:
                self.to_init(qp_attr)

    def _create_rss(self, init_attr: QPInitAttrEx) -> None:
        """An RSS QP (create_rss_qp): no queues of its own, receives only,
        through the indirection table's WQs."""
        hc = init_attr.hash_conf
        self.cap = QPCap(0, 0, 0, 0, 0)
        self.sq = self.rq = None
        self.doorbell = -1
        reply, _ = self.ctx.conn.call(CMD.create_rss_qp, pd=self.pd.handle, ind_table=init_attr.ind_table.handle,
                                      hash_function=int(hc.rx_hash_function), hash_key=list(hc.rx_hash_key),
                                      hash_fields_mask=int(hc.rx_hash_fields_mask))
        self.handle = reply["qp"]
        self.qp_num = reply["qp_num"]
        self.state = IBV_QPS_RESET
        self.sq_wq = self.rq_wq = None
        self.closed = False
        self.pd.add_ref(self)
        init_attr.ind_table.add_ref(self)
        self.ctx.conn.track(self)

    def add_ref(self, obj) -> None:
        """A flow on this QP: closed before it (pyverbs' QP.add_ref).  Held
        here, not weakly: the daemon's flow holds the QP busy, and a flow
        object dropped unclosed must still go when its QP does."""
        self._flows.add(obj)

    def _close_children(self) -> None:
        for fl in list(self._flows):
            fl.close()

    def _create_xrc(self, ctx, init_attr, qp_attr) -> None:
        """ibv_create_qp_ex of an XRC INI QP (a PD, a send CQ, a send queue:
        no receive queue) or TGT QP (on an XRCD: no queue, no CQ)."""
        pd, xrcd, self.send_ops_flags = create_xrc_qp(self, ctx, init_attr, SEND_OPS[IBV_QPT_XRC_SEND])
        self.pd, self.xrcd, self.ctx = pd, xrcd, ctx
        self.qp_type = int(init_attr.qp_type)
        self.init_attr = init_attr
        self.cap = cap = init_attr.cap
        self.rq = self.rq_wq = None
        if xrcd is not None:                        # TGT
            self.sq = self.doorbell = None
            try:
                reply, _ = ctx.conn.call(CMD.create_xrc_qp, qp_type=self.qp_type, xrcd=xrcd.handle)
            except PyverbsRDMAError as e:
                raise PyverbsRDMAError("Failed to create QP", e.error_code) from None
            self.sq_wq = NoSendQueue()
        else:                                       # INI
            a = ctx._attr
            if cap.max_send_wr > a["max_qp_wr"] or cap.max_send_sge > a["max_sge"] \
                    or cap.max_inline_data > a["max_inline_data"]:
                raise PyverbsRDMAError("Failed to create QP: a send queue capability above the device's",
                                       errno.EINVAL)
            self.sq = alloc_ring(pd, max(cap.max_send_wr, 1), abi.send_slot_size(cap.max_send_sge,
                                                                                  cap.max_inline_data),
                                 "softrdma-sq", RES_TYPE_SQ)
            self.doorbell = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            try:
                reply, _ = ctx.conn.call(CMD.create_xrc_qp, fds=[self.sq.fd, self.doorbell], qp_type=self.qp_type,
                                         pd=pd.handle, send_cq=init_attr.send_cq.handle, cap=cap.to_wire(),
                                         sq_sig_all=bool(init_attr.sq_sig_all))
            except PyverbsRDMAError as e:
                self._release()
                raise PyverbsRDMAError("Failed to create QP", e.error_code) from None
            self.sq_wq = WorkQueueProducer(self.sq, self.doorbell, max(cap.max_send_wr, 1))
        self.handle = reply["qp"]
        self.qp_num = reply["qp_num"]
        self.state = IBV_QPS_RESET
        self.closed = False
        if pd is not None:
            pd.add_ref(self)
        else:
            xrcd.add_ref(self)
        ctx.conn.track(self)
        if qp_attr is not None:
            self.to_init(qp_attr)

    # ---------------------------------------------------------------- state
    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        self.modify_wire(qp_attr.to_wire(int(attr_mask)), int(attr_mask))

    def modify_rate_limit(self, attr) -> None:
        """ibv_modify_qp_rate_limit (rdma-core 64): rxe has no packet pacing
        (packet_pacing_caps are 0), so EOPNOTSUPP, as libibverbs' default."""
        raise PyverbsRDMAError("Failed to modify QP rate limit", errno.EOPNOTSUPP)

    def modify_wire(self, attr: dict, mask: int) -> None:
        """ibv_modify_qp with the attributes as the command carries them (the
        rdma_cm path has them so). The state it sets is kept, as libibverbs
        keeps ibv_qp.state for the provider's posting checks."""
        self.ctx.conn.call(CMD.modify_qp, qp=self.handle, attr=attr, mask=mask)
        if mask & IBV_QP_STATE:
            self.state = int(attr["qp_state"])
            if self.state == IBV_QPS_RESET:
                self._clean_cqs()

    def _clean_cqs(self) -> None:
        """A QP moved to RESET: its completions not yet polled leave its
        CQs, as mlx5's provider does (mlx5_cq_clean after the command): the
        flush completions of the QP's earlier life would otherwise be
        polled by whoever uses the QP next (rxe keeps them).  The daemon
        pushed them before it answered the modify, and pushes none after."""
        for cq in getattr(self, "_cqs", ()):
            consumer = getattr(cq, "consumer", None)
            if consumer is not None and not cq.closed and hasattr(consumer, "clean"):
                consumer.clean(self.qp_num)

    def _check_can_send(self, what: str) -> None:
        """IBA 10.3.1: a send queue in Reset, Init or RTR refuses work
        requests at once (rxe's post_send: EINVAL); from RTS on they are
        taken (in an error state, flushed)."""
        if self.state < IBV_QPS_RTS:
            raise PyverbsRDMAError(f"{what}: the QP is not ready to send", errno.EINVAL)
        if self.sq_wq is None:
            raise PyverbsRDMAError(f"{what}: an RSS QP has no send queue", errno.EINVAL)

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        a = self.ctx.conn.call(CMD.query_qp, qp=self.handle, mask=int(attr_mask))[0]["attr"]
        attr = QPAttr()
        for k, v in a.items():
            if k == "ah_attr":
                v = AHAttr.from_wire(v)
            elif k == "cap":
                v = QPCap(**v)
            setattr(attr, k, v)
        return attr, self.init_attr

    # ------------------------------------------------------------------ ECE
    # softrdma, like rxe, has no vendor options to negotiate: the provider's
    # set_ece/query_ece are libibverbs' defaults, which fail with EOPNOTSUPP.
    def set_ece(self, ece: ECE) -> None:
        """ibv_set_ece; pyverbs skips the call for vendor_id 0."""
        if ece.vendor_id == 0:
            return
        raise PyverbsRDMAError("Failed to set ECE", errno.EOPNOTSUPP)

    def query_ece(self) -> ECE:
        """ibv_query_ece."""
        raise PyverbsRDMAError("Failed to query ECE", errno.EOPNOTSUPP)

    @property
    def qp_state(self) -> int:
        return self.query(IBV_QP_STATE)[0].qp_state

    def to_init(self, qp_attr: QPAttr) -> None:
        if self.qp_type == IBV_QPT_RAW_PACKET:
            mask = _RAW_MASKS["INIT"]
        elif self.qp_type == IBV_QPT_UD:
            mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
        else:
            mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        qp_attr.qp_state = IBV_QPS_INIT
        self.modify(qp_attr, mask)

    def to_rtr(self, qp_attr: QPAttr) -> None:
        if self.qp_state == IBV_QPS_RESET:
            self.to_init(qp_attr)
        mask = IBV_QP_STATE                     # (UD and raw packet: the state alone)
        if self.qp_type in (IBV_QPT_UC, IBV_QPT_RC, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV):
            mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
        if self.qp_type in (IBV_QPT_RC, IBV_QPT_XRC_RECV):
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER
        qp_attr.qp_state = IBV_QPS_RTR
        self.modify(qp_attr, mask)

    def to_rts(self, qp_attr: QPAttr) -> None:
        if self.qp_state < IBV_QPS_RTR:
            self.to_rtr(qp_attr)
        mask = _RAW_MASKS["RTS"] if self.qp_type == IBV_QPT_RAW_PACKET else IBV_QP_STATE | IBV_QP_SQ_PSN
        if self.qp_type in (IBV_QPT_RC, IBV_QPT_XRC_SEND):
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC
        elif self.qp_type == IBV_QPT_XRC_RECV:
            mask |= _RTS_XRC_RECV
        qp_attr.qp_state = 3
        self.modify(qp_attr, mask)

    # ---------------------------------------------------------------- posting
    def post_recv(self, wr, bad_wr=None) -> None:
        if self.rq_wq is None:
            raise PyverbsRDMAError("Failed to post receive: the QP has no receive queue (an SRQ, or RSS WQs)",
                                   errno.EINVAL)
        if self.state == IBV_QPS_RESET:          # C10-97.2.1, as rxe's post_recv
            raise PyverbsRDMAError("Failed to post receive: the QP is in RESET", errno.EINVAL)
        while wr is not None:
            if len(wr.sg_list) > self.cap.max_recv_sge:
                raise PyverbsRDMAError("Failed to post receive", errno.EINVAL)
            slot = self.rq_wq.next_slot()
            if slot is None:
                self.ctx.conn.check_alive("post recv")      # (nothing drains a dead daemon's queues)
                raise PyverbsRDMAError("Failed to post receive: queue full", errno.ENOMEM)
            try:
                abi.encode_recv_wqe(slot, wr.wr_id, [s.as_tuple() for s in wr.sg_list])
            except (struct.error, TypeError, ValueError, OverflowError) as e:     # slot not committed: reused
                raise PyverbsRDMAError(f"Failed to post receive: bad work request ({e})", errno.EINVAL) from None
            self.rq_wq.commit()
            wr = wr.next_wr

    def post_send(self, wr, bad_wr=None) -> None:
        self._check_can_send("Failed to post send")
        while wr is not None:
            if wr.opcode == IBV_WR_BIND_MW:
                self._post_bind(wr.wr_id, wr.send_flags, wr.mw, wr.rkey, wr.bind_info, bool(wr.sg_list))
                wr = wr.next_wr
                continue
            if wr.opcode not in _WR_OPCODES:
                raise PyverbsRDMAError(f"Failed to post send: unknown opcode {wr.opcode!r}", errno.EINVAL)
            sges = [s.as_tuple() for s in wr.sg_list]
            inline = None
            if wr.send_flags & _SEND_INLINE:
                # lengths first: string_at reads whatever it is told (-1: up to a NUL)
                if any(type(n) is not int or not 0 <= n <= _U32_MAX for _, n, _ in sges) or \
                        sum(n for _, n, _ in sges) > self.cap.max_inline_data:
                    raise PyverbsRDMAError("Failed to post send: inline data exceeds max_inline_data", errno.EINVAL)
                inline = b"".join(ctypes.string_at(a, n) for a, n, _ in sges)
            elif len(sges) > self.cap.max_send_sge:
                raise PyverbsRDMAError("Failed to post send: too many SGEs", errno.EINVAL)
            slot = self.sq_wq.next_slot()
            if slot is None:
                self.ctx.conn.check_alive("post send")      # (nothing drains a dead daemon's queues)
                raise PyverbsRDMAError("Failed to post send: queue full", errno.ENOMEM)
            if wr.opcode in _IMM_OPS:
                imm = bswap32(wr.imm_data & 0xFFFFFFFF)      # ibv_send_wr.imm_data is __be32
            elif wr.opcode in _INV_OPS:
                imm = wr.invalidate_rkey
            else:
                imm = 0
            try:
                abi.encode_send_wqe(slot, wr.wr_id, wr.opcode, wr.send_flags, sges, inline=inline, imm_data=imm,
                                    remote_addr=wr.remote_addr, rkey=wr.rkey, compare_add=wr.compare_add,
                                    swap=wr.swap, ah_handle=wr.ah.handle if wr.ah is not None else 0,
                                    remote_qpn=wr.remote_srqn if self.qp_type == IBV_QPT_XRC_SEND else wr.remote_qpn,
                                    remote_qkey=wr.remote_qkey)
            except (struct.error, TypeError, ValueError, OverflowError) as e:     # slot not committed: reused
                # a field out of its ibv_send_wr range (an SGE length < 0 or >= 2^32, ...)
                raise PyverbsRDMAError(f"Failed to post send: bad work request ({e})", errno.EINVAL) from None
            self.sq_wq.commit()
            wr = wr.next_wr

    def _post_bind(self, wr_id: int, send_flags: int, mw, new_rkey: int, info, has_sges: bool) -> None:
        """A BIND_MW WQE (the rxe provider's validate_send_wr: no SGEs, RC
        or UC only)."""
        if mw is None or info is None or has_sges or self.qp_type not in _BIND_QP_TYPES:
            raise PyverbsRDMAError("Failed to post send: not a valid bind MW work request", errno.EINVAL)
        slot = self.sq_wq.next_slot()
        if slot is None:
            self.ctx.conn.check_alive("post send")
            raise PyverbsRDMAError("Failed to post send: queue full", errno.ENOMEM)
        encode_bind_wqe(slot, wr_id, send_flags, mw, new_rkey, info)
        self.sq_wq.commit()

    def bind_mw(self, mw, mw_bind) -> None:
        """ibv_bind_mw: bind a type 1 window; its rkey becomes the new one
        once the bind is posted (the completion tells whether it held)."""
        info = mw_bind.bind_info
        if mw.type != IBV_MW_TYPE_1 or (info.mr is None and (info.addr or info.length)) \
                or info.mw_access_flags & IBV_ACCESS_ZERO_BASED:
            raise PyverbsRDMAError("Failed to bind MW", errno.EINVAL)
        if info.mr is not None and info.mr.pd is not mw.pd:
            raise PyverbsRDMAError("Failed to bind MW", errno.EPERM)
        new_rkey = inc_rkey(mw.rkey)
        try:
            self._post_bind(mw_bind.wr_id, mw_bind.send_flags, mw, new_rkey, info, False)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to bind MW", e.error_code) from None
        mw.rkey = new_rkey

    def device_gone(self) -> None:
        """The daemon is gone: posting fails from now on."""
        self.sq_wq = Gone("post send")
        if self.rq_wq is not None:
            self.rq_wq = Gone("post recv")

    # ---------------------------------------------------------- data order
    def query_data_in_order(self, op: int, flags: int = 0) -> int:
        """ibv_query_qp_data_in_order: whether the data a WQE of ``op``
        writes at this QP's receiving side lands in order, so a reader may
        poll the data instead of the CQ.  libibverbs' part: flags other
        than RETURN_CAPS/DEVICE_ONLY answer 0; WHOLE_MSG implies
        ALIGNED_128_BYTES; with RETURN_CAPS the caps vector, else 0/1 for
        WHOLE_MSG.  The device's part is ``DATA_IN_ORDER_CAPS``."""
        flags = int(flags)
        if flags & ~int(IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS | IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY):
            return 0
        caps = DATA_IN_ORDER_CAPS
        if caps & IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG:
            caps |= int(IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES)
        if flags & IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS:
            return caps
        return int(bool(caps & IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG))

    # ---------------------------------------------------------------- multicast
    def attach_mcast(self, gid, lid: int = 0) -> None:
        """ibv_attach_mcast(qp, gid, lid): receive the group's UD sends (the
        LID means nothing on RoCE)."""
        self.ctx.conn.call(CMD.attach_mcast, qp=self.handle, gid=_gid_hex(gid), lid=int(lid))

    def detach_mcast(self, gid, lid: int = 0) -> None:
        self.ctx.conn.call(CMD.detach_mcast, qp=self.handle, gid=_gid_hex(gid), lid=int(lid))

    # ---------------------------------------------------------------- teardown
    def _release(self) -> None:
        if self.doorbell == -1:                 # an RSS QP: nothing of its own
            return
        if self.doorbell is not None:           # (an XRC TGT QP has no queues)
            os.close(self.doorbell)
            free_ring(self.sq)
        if self.rq is not None:
            free_ring(self.rq)


def encode_bind_wqe(slot, wr_id: int, send_flags: int, mw, new_rkey: int, info) -> None:
    """Write the BIND_MW WQE that binds ``mw`` to ``info`` (an MWBindInfo)
    with ``new_rkey``, laid out as uapi/abi.py says: the one writer of a
    bind, for ``post_send``/``bind_mw`` and for ``QPEx.wr_bind_mw``."""
    mr = info.mr
    abi.encode_send_wqe(slot, wr_id, IBV_WR_BIND_MW, send_flags, (), imm_data=mw.rkey,
                        remote_addr=info.addr, rkey=new_rkey, compare_add=info.length,
                        swap=info.mw_access_flags, remote_qkey=mr.lkey if mr is not None else 0)


def _gid_hex(gid) -> str:
    raw = gid.raw if isinstance(gid, GID) else GID(gid).raw
    return raw.hex()
