"""perftest's verbs resources on softrdma (perftest_resources.c): the device,
the link and MTU checks, the buffer, MRs, CQs, SRQ and QPs, the QP state
transitions, the GID choice, and the work-request templates.

Layout, as perftest's (so the addresses a peer sees mean the same):

* one buffer of ``BUFF_SIZE(size, cycle_buffer) * 2 * num_of_qps`` bytes
  (plus a cache line for UD); QP ``i`` sends from slot ``i`` and is written
  / read / received into at slot ``num_of_qps + i``, whose address is the
  VAddr of its keys; ``--mr_per_qp`` gives each QP its own two-slot MR;
* for messages up to half the cycle buffer, successive WRs move through the
  cycle buffer in steps of ``INC(size)`` (a cache line at least) and wrap;
* send CQ of ``tx_depth * num_of_qps`` entries, a receive CQ of ``rx_depth
  * num_of_qps`` for SEND (the send CQ otherwise), both on the completion
  channel with ``-e``.

softrdma is an "unknown" device to perftest's device table (vendor
0xffffff, part 0, as rxe), so ``ctx_set_max_inline`` turns inline off and
says so when ``-I`` was given.
"""

from __future__ import annotations

import sys

from ...enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_ON_DEMAND, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC,
    IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_SIGNALED, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
)
from ...verbs import (
    addr as addr_m, cq as cq_m, device as dev_m, mr as mr_m, pd as pd_m, qp as qp_m, srq as srq_m, wr as wr_m,
)
from ...verbs.errors import PyverbsError
from .. import verbs_setup as vs
from . import memory as mem_m, params as P
from .comm import Dest

IBV_SEND_SIGNALED = int(IBV_SEND_SIGNALED)     # a plain int: the run loops store and test it per message
IBV_LINK_LAYER_INFINIBAND = 1
IBV_LINK_LAYER_ETHERNET = 2
IBV_PORT_ACTIVE = 4
PORT_STATES = ("Nop", "Down", "Init", "Armed", "Active", "Active Defer")
ATOMIC_ADD_VALUE = 1
ATOMIC_SWAP_VALUE = 0
MIN_RNR_TIMER = 12
GRH_HOP_LIMIT = 0xFF                 # perftest's GRH hop limit (observed on the wire from 4.5-0.17)
VERB_OPCODE = {P.SEND: IBV_WR_SEND, P.WRITE: IBV_WR_RDMA_WRITE, P.READ: IBV_WR_RDMA_READ}
ATOMIC_OPCODE = {P.CMP_AND_SWAP: IBV_WR_ATOMIC_CMP_AND_SWP, P.FETCH_AND_ADD: IBV_WR_ATOMIC_FETCH_AND_ADD}


def _err(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


def _out(msg: str) -> None:
    sys.stdout.write(msg)


def buff_size(size: int, cycle_buffer: int) -> int:
    """BUFF_SIZE(size, cycle_buffer)."""
    return cycle_buffer if size < cycle_buffer else size


def inc(size: int, cache_line_size: int) -> int:
    """INC(size, cache_line_size): the step between successive addresses."""
    if size > cache_line_size:
        return size if size % cache_line_size == 0 else cache_line_size * (size // cache_line_size + 1)
    return cache_line_size


def mtu_size(mtu_enum: int) -> int:
    """MTU_SIZE(): 1 << (7 + enum)."""
    return 1 << (P.MTU_FIX + mtu_enum)


def ipv6_addr_v4mapped(gid: bytes) -> bool:
    """ipv6_addr_v4mapped() of perftest: ::ffff:a.b.c.d, or the IPv4-encoded
    multicast ff0e::ffff:a.b.c.d."""
    return gid[:12] == bytes(10) + b"\xff\xff" or gid[:12] == b"\xff\x0e" + bytes(8) + b"\xff\xff"


def gid_decimal(gid: bytes) -> str:
    """PERF_GID_FMT's 16 x "%02d" joined by colons."""
    return ":".join("%02d" % b for b in gid)


class SetupError(Exception):
    """A resource step failed; perftest's messages are on stderr already."""


class Resources:
    """struct pingpong_context for one run."""

    def __init__(self, p: P.Params):
        self.p = p
        self.ctx = self.pd = self.channel = None
        self.mrs: list = []
        self.send_cq = self.recv_cq = None
        self.srq = None
        self.qps: list = []
        self.ahs: list = []
        self.buf_addr: list[int] = []         # per QP: the address of its send slot
        self.rx_addr: list[int] = []          # per QP: the address of its target/receive slot
        self.views: list = []                  # per QP: memoryview of its MR (base at buf_addr's MR start)
        self.buffers: list = []                # memory.Buffer of MRs on the process's memory (--mmap, hugepages)
        self.view_base: list[int] = []
        self.port_attr = None
        self.cycle_buffer = p.cycle_buffer
        self.cache_line_size = p.cache_line_size
        self.size = p.size
        self.buff_size = 0
        self.gid_cache: dict[int, bytes | None] = {}
        self.gid_type_cache: dict[int, bool] = {}
        self.send_wrs: list = []              # per QP: the posted WR (chain of post_list WRs)
        self.recv_wrs: list = []
        self.my_addr: list[int] = []
        self.rem_addr: list[int] = []
        self.cm_id = None                     # -R: the rdma_cm ID whose QP this is
        self.own_ctx = None                   # -R: the context open_device() opened

    # ------------------------------------------------------------------ device
    def open_device(self) -> bool:
        """ctx_find_dev() + ibv_open_device()."""
        try:
            names = vs.device_names()
        except Exception:
            names = []
        if not names:
            _err(" Did not detect devices \n")
            _err(" If device exists, check if driver is up\n")
            _err(" Unable to find the Infiniband/RoCE device\n")
            return False
        name = self.p.ib_devname
        if name is None:
            name = names[0]
        elif name not in names:
            _err(f"IB device {name} not found\n")
            _err(" Unable to find the Infiniband/RoCE device\n")
            return False
        self.p.ib_devname = name
        try:
            self.ctx = dev_m.Context(name=name)
        except Exception:
            _err(" Couldn't get context for the device\n")
            return False
        return True

    def query_port(self, port: int):
        try:
            return self.ctx.query_port(port)
        except PyverbsError:
            return None

    def check_link(self) -> bool:
        """check_link(): link layer and state, the GID index default on
        Ethernet, inline size, outstanding reads."""
        p = self.p
        p.transport_type = 0
        attr = self.query_port(p.ib_port)
        if attr is None:
            _err(f" Unable to query port {p.ib_port} attributes\n")
            _err(" Couldn't set the link layer\n")
            _err(" Couldn't get context for the device\n")
            return False
        self.port_attr = attr
        if p.link_type == -2:
            p.link_type = attr.link_layer
        if attr.state != IBV_PORT_ACTIVE:
            state = PORT_STATES[attr.state] if 0 <= attr.state < len(PORT_STATES) else ""
            _err(f" Port number {p.ib_port} state is {state}\n")
            _err(" Couldn't set the link layer\n")
            _err(" Couldn't get context for the device\n")
            return False
        if p.link_type not in (0, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET):
            _err(f"Link layer on port {p.ib_port} is Unknown\n")
            _err(" Couldn't set the link layer\n")
            _err(" Couldn't get context for the device\n")
            return False
        if p.dualport:
            attr2 = self.query_port(P.DEF_IB_PORT2)
            if attr2 is None:
                _err(f" Unable to query port {P.DEF_IB_PORT2} attributes\n")
                _err(" Couldn't set the link layer\n")
                _err(" Couldn't get context for the device\n")
                return False
        if p.link_type == IBV_LINK_LAYER_ETHERNET and p.gid_index == -1:
            p.gid_index = 0
            # get_best_gid_index() runs here rather than in set_up_connection(),
            # so that the header's "GID index" is the one used (as real
            # perftest's output shows it: "GID index : 3" without -x)
            best = self.best_gid_index()
            if best < 0:
                _err(" Unable to set up socket connection\n")
                return False
            p.gid_index = best
        # ctx_set_max_inline(): an unknown device gets no inline
        if p.inline_size != P.DEF_INLINE:
            _out(P.RESULT_LINE)
            _err("Device not recognized to implement inline feature. Disabling it\n")
        p.inline_size = 0
        if p.verb in (P.READ, P.ATOMIC):
            dev_attr = self.ctx.query_device()
            max_reads = dev_attr.max_qp_rd_atom
            if p.out_reads > max_reads:
                _out(P.RESULT_LINE)
                _err(f" Number of outstanding reads is above max = {max_reads}\n")
                _err(" Changing to that max value\n")
                p.out_reads = max_reads
            elif p.out_reads <= 0:
                p.out_reads = max_reads
        else:
            p.out_reads = 1
        if p.pkey_index > 0:
            max_pkeys = self.ctx.query_device().max_pkeys
            if p.pkey_index > max_pkeys - 1:
                _out(P.RESULT_LINE)
                _err(f" Specified PKey Index, {p.pkey_index}, greater than allowed max, {max_pkeys - 1}\n")
                _err(" Changing to 0\n")
                p.pkey_index = 0
        return True

    def set_mtu(self) -> int:
        """set_mtu(): the port's active MTU, or the user's if valid and not
        above it."""
        p = self.p
        attr = self.query_port(p.ib_port)
        if attr is None:
            _err(" Error when trying to query port\n")
            raise SetupError
        if p.mtu == 0:
            return attr.active_mtu
        enum = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}.get(p.mtu)
        if enum is None:
            _err(f" Invalid MTU - {p.mtu} \n")
            _err(" Please choose mtu from {256,512,1024,2048,4096}\n")
            _err(f" Will run with the port active mtu - {attr.active_mtu}\n")
            enum = attr.active_mtu
        if enum > attr.active_mtu:
            _out("Requested mtu is higher than active mtu \n")
            _out(f"Changing to active mtu - {attr.active_mtu}\n")
            enum = attr.active_mtu
        return enum

    # ------------------------------------------------------------------ ctx_init()
    def init(self, cm_id=None) -> bool:
        """alloc_ctx() + ctx_init(): buffer, PD, MR(s), CQs, SRQ, QPs in INIT.

        With ``cm_id`` (-R: ``ctx->context = cm_id->verbs`` and
        ``rdma_create_qp``) the objects are made on the rdma_cm ID's device
        context and PD, and the ID creates the QP (the CM moves it to INIT)."""
        p = self.p
        self.cm_id = cm_id
        if cm_id is not None:
            self.own_ctx, self.ctx = self.ctx, cm_id.context
        nq = p.num_of_qps
        bsz = buff_size(self.size, self.cycle_buffer)
        self.buff_size = bsz * 2 * nq
        if p.connection_type == P.UD:
            self.buff_size += self.cache_line_size
        p.buff_size = self.buff_size
        if p.use_event:
            try:
                self.channel = cq_m.CompChannel(self.ctx)
            except PyverbsError:
                _err("Couldn't create completion channel\n")
                return False
            if p.eq_num >= self.ctx.num_comp_vectors:
                _err("Couldn't create CQ\n")
                _err(f" softrdma devices have {self.ctx.num_comp_vectors} completion vector(s);"
                     f" -X {p.eq_num} names none\n")
                return False
        try:
            self.pd = cm_id.pd if cm_id is not None else pd_m.PD(self.ctx)
        except PyverbsError:
            _err("Couldn't allocate PD\n")
            return False
        access = IBV_ACCESS_LOCAL_WRITE
        if p.verb in (P.WRITE, P.WRITE_IMM):
            access |= IBV_ACCESS_REMOTE_WRITE
        elif p.verb == P.READ:
            access |= IBV_ACCESS_REMOTE_READ
        elif p.verb == P.ATOMIC:
            access |= IBV_ACCESS_REMOTE_ATOMIC
        if p.use_odp:
            access |= IBV_ACCESS_ON_DEMAND
        if not self._create_mrs(bsz * 2 if p.mr_per_qp else self.buff_size, nq if p.mr_per_qp else 1, access):
            return False
        for i in range(nq):
            if p.mr_per_qp:
                mr = self.mrs[i]
                self.buf_addr.append(mr.buf)
                self.rx_addr.append(mr.buf + bsz)
            else:
                mr = self.mrs[0]
                self.buf_addr.append(mr.buf + i * bsz)
                self.rx_addr.append(mr.buf + (nq + i) * bsz)
            self.views.append(mr.region.view if mr.region is not None else mr.view)
            self.view_base.append(mr.buf)
        self._fill_payload()
        try:
            self.send_cq = cq_m.CQ(self.ctx, p.tx_depth * nq, None, self.channel, p.eq_num)
        except (PyverbsError, OSError, ValueError):
            _err("Couldn't create CQ\n")
            return False
        if p.verb == P.SEND:
            try:
                self.recv_cq = cq_m.CQ(self.ctx, p.rx_depth * nq, None, self.channel, p.eq_num)
            except (PyverbsError, OSError, ValueError):
                _err("Couldn't create a receiver CQ\n")
                return False
        else:
            self.recv_cq = self.send_cq
        if p.use_srq and (p.tst == P.LAT or p.machine == P.SERVER or p.duplex):
            try:
                self.srq = srq_m.SRQ(self.pd, srq_m.SrqInitAttr(srq_m.SrqAttr(max_wr=p.rx_depth, max_sge=1)))
            except (PyverbsError, OSError, ValueError):
                _err("Couldn't create SRQ\n")
                return False
        qpt = {P.RC: IBV_QPT_RC, P.UC: IBV_QPT_UC, P.UD: IBV_QPT_UD}[p.connection_type]
        for _ in range(nq):
            if self.srq is not None:
                cap = qp_m.QPCap(max_send_wr=p.tx_depth, max_recv_wr=0, max_send_sge=1, max_recv_sge=0,
                                 max_inline_data=p.inline_size)
            else:
                cap = qp_m.QPCap(max_send_wr=p.tx_depth, max_recv_wr=p.rx_depth, max_send_sge=1, max_recv_sge=1,
                                 max_inline_data=p.inline_size)
            attr = qp_m.QPInitAttr(qpt, scq=self.send_cq, rcq=self.recv_cq, srq=self.srq, cap=cap, sq_sig_all=0)
            if cm_id is not None:
                try:
                    cm_id.create_qp(attr)
                except (PyverbsError, OSError, ValueError):
                    _err("Couldn't create rdma QP - Invalid argument\n")
                    return False
                self.qps.append(cm_id.qp)
                continue
            try:
                qp = qp_m.QP(self.pd, attr)
            except (PyverbsError, OSError, ValueError):
                _err(" Unable to create QP.\n")
                _err(" Couldn't create IB resources\n")
                return False
            self.qps.append(qp)
            if not self._to_init(qp):
                _err(" Couldn't create IB resources\n")
                return False
        return True

    def _create_mrs(self, length: int, count: int, access: int) -> bool:
        """create_mr(): ``count`` MRs of ``length`` bytes, each on its own
        buffer (create_single_mr: the ODP check, the buffer, the MR)."""
        p = self.p
        for _ in range(count):
            if p.use_odp and not mem_m.check_odp_support(self.ctx, p):
                return self._no_mr()
            buf = mem_m.allocate(p, length)
            if buf is False:
                return self._no_mr()
            try:
                self.mrs.append(mr_m.MR(self.pd, length, access, address=buf.address if buf else None))
            except (PyverbsError, OSError, ValueError):
                if buf:
                    buf.close()
                _err("Couldn't allocate MR\n")
                return False
            if buf:
                self.buffers.append(buf)
        return True

    @staticmethod
    def _no_mr() -> bool:
        _err("failed to create mr\n")
        _err("Failed to create MR\n")
        _err(" Couldn't create IB resources\n")       # (main, of ctx_init's failure)
        return False

    def _fill_payload(self) -> None:
        """--payload_file_path: the pattern of little-endian 32-bit words,
        repeated over every send slot (perftest's payload modification)."""
        p = self.p
        if not p.payload_file:
            return
        try:
            text = open(p.payload_file).read()
        except OSError:
            _err(f"Failed to open payload file {p.payload_file}\n")
            raise SetupError
        words = []
        for tok in text.replace("\n", ",").split(","):
            tok = tok.strip()
            if tok:
                words.append(int(tok, 0) & 0xFFFFFFFF)
        pattern = b"".join(w.to_bytes(4, "little") for w in words) or b"\0"
        bsz = buff_size(self.size, self.cycle_buffer)
        for i in range(p.num_of_qps):
            view, base = self.views[i], self.view_base[i]
            off = self.buf_addr[i] - base
            block = (pattern * (bsz // len(pattern) + 1))[:bsz]
            view[off:off + bsz] = block

    def _to_init(self, qp) -> bool:
        """ctx_modify_qp_to_init()."""
        p = self.p
        try:
            if p.connection_type == P.UD:
                vs.qp_to_init(qp, p.ib_port, p.pkey_index, qkey=P.DEF_QKEY)
            else:
                vs.qp_to_init(qp, p.ib_port, p.pkey_index, access={
                    P.ATOMIC: IBV_ACCESS_REMOTE_ATOMIC, P.READ: IBV_ACCESS_REMOTE_READ,
                    P.WRITE: IBV_ACCESS_REMOTE_WRITE, P.WRITE_IMM: IBV_ACCESS_REMOTE_WRITE,
                    P.SEND: IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE}[p.verb])
        except PyverbsError as e:
            _err(f"Failed to modify QP to INIT, ret={e.error_code}\n")
            return False
        return True

    # ------------------------------------------------------------------ GIDs
    def _gid(self, index: int) -> bytes | None:
        """The GID in a table slot (each slot asked once)."""
        if index not in self.gid_cache:
            try:
                self.gid_cache[index] = self.ctx.query_gid(self.p.ib_port, index).raw
            except PyverbsError:
                self.gid_cache[index] = None
        return self.gid_cache[index]

    def _gid_typed(self, index: int) -> bool:
        """ibv_query_gid_type() succeeds for the slot (asked once, and only
        when the comparison needs it, as in perftest)."""
        if index not in self.gid_type_cache:
            if self._gid(index) == bytes(16):
                # an empty slot: ibv_query_gid_type() fails for it (ENODATA), no need to ask
                self.gid_type_cache[index] = False
                return False
            try:
                self.ctx.query_gid_type(self.p.ib_port, index)
                self.gid_type_cache[index] = True
            except PyverbsError:
                self.gid_type_cache[index] = False
        return self.gid_type_cache[index]

    def best_gid_index(self) -> int:
        """get_best_gid_index(): walk the table keeping the better of the
        current pick and each rival -- an IPv4-mapped GID beats one that is
        not (the reverse with --ipv6), then RoCE v2 beats v1 (softrdma's are
        all RoCE v2, so that step never changes the pick)."""
        best = 0
        for i in range(1, self.port_attr.gid_tbl_len):
            g, r = self._gid(best), self._gid(i)
            if g is None or r is None:
                return -1
            v4, v4_rival = ipv6_addr_v4mapped(g), ipv6_addr_v4mapped(r)
            if v4_rival and not v4 and not self.p.ipv6:
                best = i
            elif not v4_rival and v4 and self.p.ipv6:
                best = i
            elif not self._gid_typed(best) or not self._gid_typed(i):
                continue
            # both RoCE v2: EQUAL, the current pick stays
        return best

    def set_up_connection(self, psn_rng) -> list[Dest] | None:
        """set_up_connection(): my keys for each QP."""
        p = self.p
        gid = bytes(16)
        if p.gid_index != -1:
            if self.query_port(p.ib_port) is None:
                return None
            raw = self._gid(p.gid_index)
            if raw is None:
                return None
            gid = raw
        lid = self.port_attr.lid if self.port_attr is not None else 0
        bsz = buff_size(self.size, self.cycle_buffer)
        dests = []
        for i, qp in enumerate(self.qps):
            mr = self.mrs[i] if p.mr_per_qp else self.mrs[0]
            vaddr = mr.buf + bsz if p.mr_per_qp else mr.buf + (p.num_of_qps + i) * bsz
            dests.append(Dest(lid=lid, out_reads=p.out_reads, qpn=qp.qp_num, psn=psn_rng.lrand48() & 0xFFFFFF,
                              rkey=mr.rkey, vaddr=vaddr, gid=gid, srqn=0, gid_index=p.gid_index))
        return dests

    # ------------------------------------------------------------------ ctx_connect()
    def _ah_attr(self, dest: Dest):
        p = self.p
        return vs.ah_attr(p.ib_port, dest.lid & 0xFFFF, p.sl, None if p.gid_index == -1 else dest.gid,
                          p.gid_index, GRH_HOP_LIMIT, p.traffic_class, p.flow_label & 0xFFFFF)

    def connect(self, rem: list[Dest], my: list[Dest]) -> bool:
        p = self.p
        rc, ud = p.connection_type == P.RC, p.connection_type == P.UD
        for i, qp in enumerate(self.qps):
            ah = self._ah_attr(rem[i])
            try:
                if ud:
                    a = vs.qp_to_rtr(qp)
                else:
                    a = vs.qp_to_rtr(qp, ah, p.curr_mtu, rem[i].qpn & 0xFFFFFF, rem[i].psn & 0xFFFFFF,
                                     my[i].out_reads if rc else None, MIN_RNR_TIMER if rc else None)
            except PyverbsError:
                _err(f"Failed to modify QP {qp.qp_num} to RTR\n")
                _err(" Unable to Connect the HCA's through the link\n")
                return False
            if p.tst == P.LAT or p.machine == P.CLIENT or p.duplex:
                try:
                    if rc:
                        vs.qp_to_rts(qp, a, my[i].psn & 0xFFFFFF, p.qp_timeout, 7, 7, rem[i].out_reads)
                    else:
                        vs.qp_to_rts(qp, a, my[i].psn & 0xFFFFFF)
                except PyverbsError:
                    _err("Failed to modify QP to RTS\n")
                    _err(" Unable to Connect the HCA's through the link\n")
                    return False
            if ud and (p.tst == P.LAT or p.machine == P.CLIENT or p.duplex):
                try:
                    self.ahs.append(addr_m.AH(self.pd, ah))
                except PyverbsError:
                    _err("Failed to create AH for UD\n")
                    _err(" Unable to Connect the HCA's through the link\n")
                    return False
        return True

    # ------------------------------------------------------------------ work requests
    def set_send_wqes(self, rem: list[Dest]) -> None:
        """ctx_set_send_reg_wqes() plus the address walk of the run loops.

        perftest keeps one WR (or one chain of ``post_list`` WRs, the last
        signaled) per QP and moves its addresses after each post; message
        ``k`` of a QP therefore always uses slot ``k % positions`` of the
        cycle buffer.  Here every position gets its own prebuilt WR, so a
        post is an index into a list and a flag store.  ``send_wrs[i]`` is
        the list of heads for QP ``i``: ``positions`` single WRs when
        ``post_list`` is 1 and the message fits half the cycle buffer, else
        one chain."""
        p = self.p
        self.size = p.size
        step = inc(p.size, self.cache_line_size)
        cycling = p.tst == P.BW and p.size <= self.cycle_buffer // 2
        positions = self.cycle_buffer // step if cycling else 1
        opcode = ATOMIC_OPCODE[p.atomicType] if p.verb == P.ATOMIC else VERB_OPCODE[p.verb]
        self.send_wrs, self.my_addr, self.rem_addr = [], [], []
        self.positions = positions if p.post_list == 1 else 1

        def make(i: int, k: int, flags: int):
            mr = self.mrs[i] if p.mr_per_qp else self.mrs[0]
            off = (k % positions) * step if cycling else 0
            wr = wr_m.SendWR(wr_id=i, opcode=opcode, num_sge=1, sg=[wr_m.SGE(self.buf_addr[i] + off, p.size,
                                                                            mr.lkey)], send_flags=flags)
            raddr = rem[i].vaddr + off
            if p.verb in (P.WRITE, P.READ):
                wr.set_wr_rdma(rem[i].rkey, raddr)
            elif p.verb == P.ATOMIC:
                if p.atomicType == P.FETCH_AND_ADD:
                    wr.set_wr_atomic(rem[i].rkey, raddr, ATOMIC_ADD_VALUE)
                else:
                    wr.set_wr_atomic(rem[i].rkey, raddr, 0, ATOMIC_SWAP_VALUE)
            elif p.verb == P.SEND and p.connection_type == P.UD:
                wr.set_wr_ud(self.ahs[i], rem[i].qpn & 0xFFFFFF, P.DEF_QKEY)
            return wr

        for i in range(len(self.qps)):
            self.my_addr.append(self.buf_addr[i])
            self.rem_addr.append(rem[i].vaddr)
            if p.post_list == 1:
                self.send_wrs.append([make(i, k, IBV_SEND_SIGNALED) for k in range(self.positions)])
            else:
                chain = [make(i, j, IBV_SEND_SIGNALED if j == p.post_list - 1 else 0) for j in range(p.post_list)]
                for a, b in zip(chain, chain[1:]):
                    a.next_wr = b
                self.send_wrs.append([chain[0]])

    def set_recv_wqes(self) -> bool:
        """ctx_set_recv_wqes(): ``rx_depth`` receives per QP (shared out over
        the SRQ), each one step further through the cycle buffer.  As for
        sends, every position has its own prebuilt WR: receive ``k`` of a QP
        uses ``recv_wrs[i][k % positions]``; ``recv_next[i]`` is ``k`` of the
        next one to post."""
        p = self.p
        self.size = p.size
        size_per_qp = p.rx_depth // p.num_of_qps if p.use_srq else p.rx_depth
        length = p.size + P.UD_ADDITION if p.connection_type == P.UD else p.size
        step = inc(p.size, self.cache_line_size)
        cycling = p.tst == P.BW and length <= self.cycle_buffer // 2
        positions = self.cycle_buffer // step if cycling else 1
        self.recv_wrs, self.recv_next = [], []
        for i, qp in enumerate(self.qps):
            mr = self.mrs[i] if p.mr_per_qp else self.mrs[0]
            base = self.rx_addr[i]
            if p.connection_type == P.UD:
                base += self.cache_line_size - P.UD_ADDITION
            wrs = [wr_m.RecvWR(wr_id=i, num_sge=1, sg=[wr_m.SGE(base + k * step, length, mr.lkey)])
                   for k in range(positions)]
            post = self.srq.post_recv if self.srq is not None else qp.post_recv
            for j in range(size_per_qp):
                try:
                    post(wrs[j % positions])
                except PyverbsError:
                    _err(f"Couldn't post recv {'SRQ' if self.srq is not None else 'Qp'} = {i}: counter={j}\n")
                    return False
            self.recv_wrs.append(wrs)
            self.recv_next.append(size_per_qp)
        return True

    # ------------------------------------------------------------------ teardown
    def destroy(self) -> bool:
        """destroy_ctx(): every object, in reverse order of creation."""
        steps = [(ah, "failed to destroy AH\n") for ah in self.ahs]
        steps += [(qp, " Couldn't destroy QP\n") for qp in self.qps]
        steps += [(self.srq, "Couldn't destroy SRQ\n"), (self.send_cq, "failed to destroy CQ\n")]
        if self.recv_cq is not self.send_cq:
            steps.append((self.recv_cq, "failed to destroy CQ\n"))
        steps += [(mr, "failed to deregister MR\n") for mr in self.mrs]
        if getattr(self, "cm_id", None) is not None:
            # the rdma_cm ID's PD and device context: its close releases them
            steps += [(self.channel, "failed to close event channel\n"), (self.cm_id, "failed to destroy cm id\n"),
                      (self.own_ctx, "failed to close device context\n")]
        else:
            steps += [(self.pd, "failed to deallocate PD\n"), (self.channel, "failed to close event channel\n"),
                      (self.ctx, "failed to close device context\n")]
        ok = vs.destroy(steps, _err, keep_going=True)
        self._free_buffers()
        self.ahs, self.qps, self.mrs = [], [], []
        self.srq = self.send_cq = self.recv_cq = self.pd = self.channel = self.ctx = None
        self.cm_id = self.own_ctx = None
        return ok

    def release_cm(self) -> None:
        """-R, a connection try that failed: what ``init(cm_id)`` made is
        released (the ID itself, with its QP and PD, is the caller's), so
        that the next try starts afresh."""
        if self.cm_id is None:
            return
        vs.close_quietly(self.srq, self.send_cq, self.recv_cq if self.recv_cq is not self.send_cq else None,
                         *self.mrs, self.channel)
        self.qps, self.mrs, self.ahs = [], [], []
        self._free_buffers()
        self.buf_addr, self.rx_addr, self.views, self.view_base = [], [], [], []
        self.srq = self.send_cq = self.recv_cq = self.pd = self.channel = None
        self.ctx, self.own_ctx, self.cm_id = self.own_ctx, None, None

    def _free_buffers(self) -> None:
        """The buffers go after their MRs (free_buffer after ibv_dereg_mr)."""
        for buf in self.buffers:
            buf.close()
        self.buffers = []

    def abandon(self) -> None:
        """An error exit: the C tool just returns; closing the context makes
        the daemon release everything the same way."""
        vs.close_quietly(self.ctx)
