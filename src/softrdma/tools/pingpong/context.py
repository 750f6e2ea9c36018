"""struct pingpong_context and the functions working on it: pp_init_ctx
(device, PD, MR, CQ, QP in INIT), pp_connect_ctx (RTR, RTS, the UD AH),
posting, pp_close_ctx."""

from __future__ import annotations

import mmap

from ...enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_ON_DEMAND, IBV_ACCESS_ZERO_BASED, IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_IMPLICIT,
    IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_SEND, IBV_QPT_RC, IBV_QPT_UD, IBV_SEND_INLINE, IBV_SEND_SIGNALED,
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WR_SEND, _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, _IBV_ADVISE_MR_FLAG_FLUSH,
)
from ...verbs import addr as addr_m, cq as cq_m, device as dev_m, dm as dm_m, mr as mr_m, pd as pd_m, qp as qp_m
from ...verbs import cqex as cqex_m, wr as wr_m
from ...verbs.errors import PyverbsError, PyverbsRDMAError
from .. import verbs_setup as vs
from ..libc import c_int
from ..oob import err as _err
from .exchange import Dest
from .options import Options

RECV_WRID = 1
SEND_WRID = 2
UD_QKEY = 0x11111111
GRH_BYTES = 40
IBV_LINK_LAYER_ETHERNET = 2

# Why the RC tool's device-feature options cannot work here (printed after
# the real tool's own message).
WHY_ODP = ("softrdmad may not reach this process's memory (another user without CAP_SYS_PTRACE, or Yama's"
           " ptrace_scope), so the device has no on-demand paging for it")
WHY_TS = "the device reports no completion timestamp mask (query_device_ex)"


class PingPong:
    """struct pingpong_context and the functions working on it."""

    def __init__(self, o: Options):
        self.o = o
        self.ctx = self.channel = self.pd = self.mr = self.cq = self.qp = self.ah = self.dm = None
        self.completion_timestamp_mask = 0
        self.host_buf = None                       # ctx->buf when the MR is on device memory (-j)
        self.size = c_int(o.size)                  # ctx->size is an int
        self.rx_depth = c_int(o.rx_depth)
        self.send_flags = IBV_SEND_SIGNALED
        self.pending = 0
        self.page_size = mmap.PAGESIZE
        self.port = o.ib_port & 0xFF                # ibv_* take the port as uint8_t
        self.recv_wr = self.send_wr = None
        self.portinfo = None

    # ---- pp_init_ctx
    def init(self, dev_name: str) -> bool:
        o = self.o
        buf_len = c_int(self.size + GRH_BYTES) if o.ud else self.size
        if buf_len < 0:                             # memalign(page_size, (size_t) negative int)
            _err("Couldn't allocate work buf.")
            return False
        try:
            self.ctx = dev_m.Context(name=dev_name)
        except PyverbsError:
            _err(f"Couldn't get context for {dev_name}")
            return False
        if o.ud:
            try:
                port_info = self.ctx.query_port(self.port)
            except PyverbsError:
                _err(f"Unable to query port info for port {o.ib_port}")
                return False
            mtu = 1 << (port_info.active_mtu + 7)
            if self.size > mtu:
                _err(f"Requested size larger than port MTU ({mtu})")
                return False
        if o.use_event:
            try:
                self.channel = cq_m.CompChannel(self.ctx)
            except PyverbsError:
                _err("Couldn't create completion channel")
                return False
        try:
            self.pd = pd_m.PD(self.ctx)
        except PyverbsError:
            _err("Couldn't allocate PD")
            return False
        access = IBV_ACCESS_LOCAL_WRITE
        if not o.ud and (o.use_odp or o.use_ts or o.use_dm):
            try:
                attrx = self.ctx.query_device_ex()
            except PyverbsError:
                _err("Couldn't query device for its features")
                return False
            prog = "ibv_rc_pingpong"
            if o.use_odp:
                rc_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV
                odp = attrx.odp_caps
                if not odp.general_caps & IBV_ODP_SUPPORT or odp.rc_odp_caps & rc_caps != rc_caps:
                    _err("The device isn't ODP capable or does not support RC send and receive with ODP")
                    _err(f"{prog}: -{'O' if o.implicit_odp else 'o'}: {WHY_ODP}")
                    return False
                if o.implicit_odp and not odp.general_caps & IBV_ODP_SUPPORT_IMPLICIT:
                    _err("The device doesn't support implicit ODP")
                    return False
                access |= IBV_ACCESS_ON_DEMAND
            if o.use_ts and not attrx.completion_timestamp_mask:
                _err("The device isn't completion timestamp capable")
                _err(f"{prog}: -t: {WHY_TS}")
                return False
            if o.use_ts:
                self.completion_timestamp_mask = attrx.completion_timestamp_mask
        if not o.ud and o.use_dm:
            if not attrx.max_dm_size:
                _err("Device doesn't support dm allocation")
                return False
            if attrx.max_dm_size < self.size:
                _err("Device memory is insufficient")
                return False
            try:
                self.dm = dm_m.DM(self.ctx, dm_m.AllocDmAttr(self.size))
            except (PyverbsError, OSError, ValueError, OverflowError):
                _err("Dev mem allocation failed")
                return False
        if self.dm is not None:
            # the work buffer stays in host memory; the MR is the device memory,
            # zero-based, which the buffer is copied into before the first send
            self.host_buf = bytearray(b"\x7b" * buf_len)
            try:
                self.mr = dm_m.DMMR(self.pd, self.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED, self.dm, 0)
            except (PyverbsError, OSError, ValueError, OverflowError):
                _err("Couldn't register MR")
                return False
        else:
            try:
                # -O: ibv_reg_mr(pd, NULL, SIZE_MAX, ...) with the buffer allocated beside it
                self.mr = mr_m.MR(self.pd, buf_len, access, implicit=o.implicit_odp)
            except (PyverbsError, OSError, ValueError, OverflowError):          # incl. no memory for the buffer
                _err("Couldn't register MR")
                return False
            if o.prefetch_mr:
                try:
                    self.pd.advise_mr(_IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, _IBV_ADVISE_MR_FLAG_FLUSH,
                                      [wr_m.SGE(self.mr.buf, self.size, self.mr.lkey)])
                except PyverbsRDMAError as e:
                    _err(f"Couldn't prefetch MR({e.error_code}). Continue anyway")
            chunk = b"\x7b" * min(buf_len, 1 << 20)         # memset(ctx->buf, 0x7b, size)
            for off in range(0, buf_len, len(chunk) or 1):
                n = min(len(chunk), buf_len - off)
                self.mr.write(chunk[:n], n, off)
        try:
            if o.use_ts and not o.ud:        # -t: an extended CQ whose completions carry the device clock
                self.cq = cqex_m.CQEX(self.ctx, cqex_m.CqInitAttrEx(self.rx_depth + 1, self.channel, 0,
                                                                    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP))
            else:
                self.cq = cq_m.CQ(self.ctx, self.rx_depth + 1, None, self.channel, 0)
        except (PyverbsError, OSError, ValueError, OverflowError):
            _err("Couldn't create CQ")
            return False
        cap = qp_m.QPCap(max_send_wr=1, max_recv_wr=self.rx_depth & 0xFFFFFFFF, max_send_sge=1, max_recv_sge=1)
        try:
            self.qp = qp_m.QP(self.pd, qp_m.QPInitAttr(IBV_QPT_UD if o.ud else IBV_QPT_RC, scq=self.cq,
                                                       rcq=self.cq, cap=cap, sq_sig_all=0))
        except (PyverbsError, OSError, ValueError, OverflowError):
            _err("Couldn't create QP")
            return False
        try:
            attr, _ = self.qp.query(0)
            if attr.cap.max_inline_data >= self.size and self.dm is None:
                self.send_flags |= IBV_SEND_INLINE
        except PyverbsError:
            pass                                    # ibv_query_qp's result is not checked either
        try:
            if o.ud:
                vs.qp_to_init(self.qp, self.port, qkey=UD_QKEY)
            else:
                vs.qp_to_init(self.qp, self.port, access=0)
        except PyverbsError:
            _err("Failed to modify QP to INIT")
            return False
        self._build_wrs()
        return True

    def _build_wrs(self) -> None:
        mr = self.mr
        length = self.size & 0xFFFFFFFF             # ibv_sge.length is a uint32_t
        if self.o.ud:
            rsge = wr_m.SGE(mr.buf, (self.size + GRH_BYTES) & 0xFFFFFFFF, mr.lkey)
            ssge = wr_m.SGE(mr.buf + GRH_BYTES, length, mr.lkey)
        else:
            rsge = ssge = wr_m.SGE(mr.buf, length, mr.lkey)
        self.recv_wr = wr_m.RecvWR(RECV_WRID, 1, [rsge])
        self.send_wr = wr_m.SendWR(SEND_WRID, IBV_WR_SEND, 1, sg=[ssge], send_flags=self.send_flags)

    # ---- pp_connect_ctx
    def _ah_attr(self, dest: Dest):
        glob = dest.gid[8:16] != bytes(8)              # dest->gid.global.interface_id
        return vs.ah_attr(self.port, dest.lid & 0xFFFF, self.o.sl & 0xFF, dest.gid if glob else None,
                          self.o.gidx & 0xFF, hop_limit=1)

    def connect(self, my_psn: int, dest: Dest) -> bool:
        o = self.o
        if o.ud:
            try:
                a = vs.qp_to_rtr(self.qp)
            except PyverbsError:
                _err("Failed to modify QP to RTR")
                return False
            try:
                vs.qp_to_rts(self.qp, a, my_psn & 0xFFFFFF)
            except PyverbsError:
                _err("Failed to modify QP to RTS")
                return False
            try:
                self.ah = addr_m.AH(self.pd, self._ah_attr(dest))
            except PyverbsError:
                _err("Failed to create AH")
                return False
            self.send_wr.set_wr_ud(self.ah, dest.qpn & 0xFFFFFF, UD_QKEY)
            return True
        try:
            a = vs.qp_to_rtr(self.qp, self._ah_attr(dest), path_mtu=o.mtu, dest_qp_num=dest.qpn & 0xFFFFFF,
                             rq_psn=dest.psn & 0xFFFFFF, max_dest_rd_atomic=1, min_rnr_timer=12)
        except PyverbsError:
            _err("Failed to modify QP to RTR")
            return False
        try:
            vs.qp_to_rts(self.qp, a, my_psn & 0xFFFFFF, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=1)
        except PyverbsError:
            _err("Failed to modify QP to RTS")
            return False
        return True

    # ---- posting
    def post_recv(self, n: int) -> int:
        qp, wr = self.qp, self.recv_wr
        for i in range(max(n, 0)):
            try:
                qp.post_recv(wr)
            except PyverbsError:
                return i
        return max(n, 0)

    def post_send(self) -> bool:
        try:
            self.qp.post_send(self.send_wr)
        except PyverbsError:
            return False
        return True

    # ---- pp_close_ctx
    def close(self) -> bool:
        steps = [(self.qp, "Couldn't destroy QP"), (self.cq, "Couldn't destroy CQ"),
                 (self.mr, "Couldn't deregister MR")]
        if self.dm is not None:
            steps.append((self.dm, "Couldn't free DM"))
        if self.o.ud:
            steps.append((self.ah, "Couldn't destroy AH"))
        steps += [(self.pd, "Couldn't deallocate PD"), (self.channel, "Couldn't destroy completion channel"),
                  (self.ctx, "Couldn't release context")]
        return vs.destroy(steps, _err)

    def abandon(self) -> None:
        """An error exit: the C tool just returns (the kernel cleans up);
        closing the context tells the daemon to do the same."""
        vs.close_quietly(self.ctx)


