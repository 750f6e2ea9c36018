"""Work requests as the transport sees them, and the completions it makes.

These are the device-side forms of ibv_send_wr / ibv_recv_wr / ibv_wc: the
verbs layer turns a user's WR into a ``SendWQE``/``RecvWQE``, and turns a
``WC`` into an ibv_wc (CQE) the user polls.  Field names follow libibverbs.

``imm_data`` and ``invalidate_rkey`` hold the 32-bit value as it is on the
wire (big-endian ImmDt/IETH read as an unsigned int); ibv_wc's __be32
byte-order convention is the verbs layer's business.
"""

from __future__ import annotations

from ..enums import ibv_wr_opcode as WR
from ..uapi.wr import WR_ATOMIC_MASK, WR_ATOMIC_OR_READ_MASK, WR_ATOMIC_WRITE_MASK, WR_FLUSH_MASK, wr_opcodes
from ..wire.opcodes import (
    OP_ATOMIC_WRITE, OP_COMPARE_SWAP, OP_FETCH_ADD, OP_FLUSH, OP_RDMA_WRITE_FIRST, OP_RDMA_WRITE_LAST,
    OP_RDMA_WRITE_LAST_WITH_IMMEDIATE, OP_RDMA_WRITE_MIDDLE, OP_RDMA_WRITE_ONLY,
    OP_RDMA_WRITE_ONLY_WITH_IMMEDIATE, OP_SEND_FIRST, OP_SEND_LAST, OP_SEND_LAST_WITH_IMMEDIATE,
    OP_SEND_LAST_WITH_INVALIDATE, OP_SEND_MIDDLE, OP_SEND_ONLY, OP_SEND_ONLY_WITH_IMMEDIATE,
    OP_SEND_ONLY_WITH_INVALIDATE,
)

# The wire operations of each work-request opcode (rxe_req.c's next_opcode),
# keyed by plain ints as the WQEs carry them: (first, middle, last, only)
# for a message cut into MTU packets ...
SEGMENT_OPS = {int(op): ops for op, ops in {
    WR.IBV_WR_SEND: (OP_SEND_FIRST, OP_SEND_MIDDLE, OP_SEND_LAST, OP_SEND_ONLY),
    WR.IBV_WR_SEND_WITH_IMM: (OP_SEND_FIRST, OP_SEND_MIDDLE, OP_SEND_LAST_WITH_IMMEDIATE,
                              OP_SEND_ONLY_WITH_IMMEDIATE),
    WR.IBV_WR_SEND_WITH_INV: (OP_SEND_FIRST, OP_SEND_MIDDLE, OP_SEND_LAST_WITH_INVALIDATE,
                              OP_SEND_ONLY_WITH_INVALIDATE),
    WR.IBV_WR_RDMA_WRITE: (OP_RDMA_WRITE_FIRST, OP_RDMA_WRITE_MIDDLE, OP_RDMA_WRITE_LAST,
                           OP_RDMA_WRITE_ONLY),
    WR.IBV_WR_RDMA_WRITE_WITH_IMM: (OP_RDMA_WRITE_FIRST, OP_RDMA_WRITE_MIDDLE,
                                    OP_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                                    OP_RDMA_WRITE_ONLY_WITH_IMMEDIATE),
}.items()}
# ... and the one packet of an ATOMIC (a READ is OP_RDMA_READ_REQUEST).
ATOMIC_OPS = {int(WR.IBV_WR_ATOMIC_CMP_AND_SWP): OP_COMPARE_SWAP,
              int(WR.IBV_WR_ATOMIC_FETCH_AND_ADD): OP_FETCH_ADD}

# ... and the one packet of IBA 1.5's ATOMIC WRITE (RETH + the 8 bytes, which
# the WQE carries in ``compare_add``, as rxe's wqe->dma.atomic_wr) and FLUSH
# (FETH + RETH; ``compare_add`` the length, ``swap`` the placement type |
# the selectivity level << 8), each answered by a zero-length READ RESPONSE
FLUSH_AW_OPS = {int(WR.IBV_WR_ATOMIC_WRITE): OP_ATOMIC_WRITE, int(WR.IBV_WR_FLUSH): OP_FLUSH}

_ATOMICS = wr_opcodes(WR_ATOMIC_MASK)                 # 8 bytes of local buffer, whatever the SGEs say
# answered by a response (READ/ATOMIC data, or a FLUSH/ATOMIC WRITE's empty
# READ RESPONSE): they hold a responder resource (max_rd_atomic) and fences wait for them
_RD_ATOMICS = wr_opcodes(WR_ATOMIC_OR_READ_MASK | WR_FLUSH_MASK | WR_ATOMIC_WRITE_MASK)
_ATOMIC_WRITE, _FLUSH = int(WR.IBV_WR_ATOMIC_WRITE), int(WR.IBV_WR_FLUSH)

# WQE states (rxe_verbs.h wqe_state)
WQE_POSTED = 0       # not started
WQE_PROCESSING = 1   # some packets sent
WQE_PENDING = 2      # all packets sent, waiting for ACK/response
WQE_DONE = 3         # completed (in order retirement pending)
WQE_ERROR = 4


class AddressVector:
    """Where a QP's packets go (ibv_ah_attr: for RoCE the GRH fields; an
    InfiniBand port also reads dlid, sl, src_path_bits, is_global).

    The transport only carries it through to its output; the device (or
    the simulator) turns ``dgid`` into an IP address and a UDP flow."""

    __slots__ = ("dgid", "sgid_index", "flow_label", "hop_limit", "traffic_class", "sl",
                 "dlid", "port_num", "is_global", "src_path_bits", "static_rate")

    def __init__(self, dgid: bytes = bytes(16), sgid_index: int = 0, flow_label: int = 0,
                 hop_limit: int = 64, traffic_class: int = 0, sl: int = 0, dlid: int = 0,
                 port_num: int = 1, is_global: bool = True, src_path_bits: int = 0, static_rate: int = 0):
        self.dgid = bytes(dgid)
        self.sgid_index = sgid_index
        self.flow_label = flow_label
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class
        self.sl = sl
        self.dlid = dlid
        self.port_num = port_num
        self.is_global = is_global
        self.src_path_bits = src_path_bits       # the LRH's SLID is the port's base LID | these (IB)
        self.static_rate = static_rate

    def __repr__(self) -> str:
        return f"AddressVector(dgid={self.dgid.hex()}, sgid_index={self.sgid_index})"


class SendWQE:
    """A posted send work request plus the requester's progress on it."""

    __slots__ = (
        # from the work request
        "wr_id", "opcode", "send_flags", "sg_list", "inline_data", "imm_data",
        "invalidate_rkey", "remote_addr", "rkey", "compare_add", "swap", "ah",
        "remote_qpn", "remote_qkey",
        # requester / completer state
        "length", "state", "first_psn", "last_psn", "npkts", "offset", "pkts_sent",
        "views", "status", "is_rd_atomic", "signaled", "read_done", "read_psn", "fenced",
    )
    hidden = False      # posted by the device itself (transport.tm): completes nowhere, not even flushed

    def __init__(self, wr_id: int, opcode: int, sg_list=(), *, send_flags: int = 0,
                 inline_data: bytes | None = None, imm_data: int = 0, invalidate_rkey: int = 0,
                 remote_addr: int = 0, rkey: int = 0, compare_add: int = 0, swap: int = 0,
                 ah: AddressVector | None = None, remote_qpn: int = 0, remote_qkey: int = 0):
        self.wr_id = wr_id
        self.opcode = opcode
        self.send_flags = send_flags
        self.sg_list = sg_list = list(sg_list)    # [(addr, length, lkey)]
        self.inline_data = inline_data
        self.imm_data = imm_data
        self.invalidate_rkey = invalidate_rkey
        self.remote_addr = remote_addr
        self.rkey = rkey
        self.compare_add = compare_add
        self.swap = swap
        self.ah = ah
        self.remote_qpn = remote_qpn
        self.remote_qkey = remote_qkey
        if opcode in _ATOMICS or opcode == _ATOMIC_WRITE:
            self.length = 8
        elif opcode == _FLUSH:
            self.length = compare_add            # the range to flush (the RETH DMA length)
        elif inline_data is not None:
            self.length = len(inline_data)
        elif len(sg_list) == 1:
            self.length = sg_list[0][1]
        else:
            self.length = sum(sge[1] for sge in sg_list)
        self.state = WQE_POSTED
        self.first_psn = self.last_psn = 0
        self.npkts = 0
        self.offset = 0                      # payload bytes sent in this pass
        self.pkts_sent = 0
        self.views = None                    # resolved local buffers
        self.status = 0
        self.is_rd_atomic = opcode in _RD_ATOMICS
        self.signaled = False
        self.read_done = 0                   # READ response bytes placed
        self.read_psn = 0                    # PSN of the last READ request sent (its first response)
        self.fenced = False

    @property
    def remote_srqn(self) -> int:
        """An XRC send's destination SRQ number (ibv_send_wr.qp_type.xrc.
        remote_srqn): it shares the WQE's field with UD's remote_qpn, as
        an XRC send has no UD address."""
        return self.remote_qpn

    def __repr__(self) -> str:
        return (f"SendWQE(wr_id={self.wr_id}, opcode={WR(self.opcode).name}, len={self.length}, "
                f"psn={self.first_psn}..{self.last_psn}, state={self.state})")


class RecvWQE:
    """A posted receive work request (ibv_recv_wr)."""

    __slots__ = ("wr_id", "sg_list", "length", "views")

    def __init__(self, wr_id: int, sg_list=()):
        self.wr_id = wr_id
        self.sg_list = sg_list = list(sg_list)
        self.length = sg_list[0][1] if len(sg_list) == 1 else sum(sge[1] for sge in sg_list)
        self.views = None

    def __repr__(self) -> str:
        return f"RecvWQE(wr_id={self.wr_id}, len={self.length})"


