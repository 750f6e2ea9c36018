"""Work requests (pyverbs.wr): SGE, SendWR, RecvWR."""

from __future__ import annotations

from ..enums import IBV_SEND_SIGNALED, IBV_WR_SEND


class SGE:
    def __init__(self, addr: int, length: int, lkey: int):
        self.addr = addr
        self.length = length
        self.lkey = lkey

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.addr, self.length, self.lkey)


class RecvWR:
    def __init__(self, wr_id: int = 0, num_sge: int = 0, sg=None, next_wr=None):
        self.wr_id = wr_id
        self.sg_list = list(sg or [])
        self.num_sge = num_sge or len(self.sg_list)
        self.next_wr = next_wr


class SendWR:
    def __init__(self, wr_id: int = 0, opcode: int = IBV_WR_SEND, num_sge: int = 0, imm_data: int = 0,
                 sg=None, send_flags: int = IBV_SEND_SIGNALED, next_wr=None):
        self.wr_id = wr_id
        self.opcode = opcode
        self.sg_list = list(sg or [])
        self.num_sge = num_sge or len(self.sg_list)
        self.imm_data = imm_data
        self.send_flags = send_flags
        self.next_wr = next_wr
        self.remote_addr = 0
        self.rkey = 0
        self.compare_add = 0
        self.swap = 0
        self.ah = None
        self.remote_qpn = 0
        self.remote_qkey = 0
        self.mw = None
        self.bind_info = None
        self.remote_srqn = 0            # qp_type.xrc.remote_srqn: an XRC send's destination SRQ

    # ibv_send_wr's imm_data and invalidate_rkey are one union member: pyverbs
    # programs set ``imm_data`` to the rkey of a LOCAL_INV / SEND_WITH_INV
    @property
    def invalidate_rkey(self) -> int:
        return self.imm_data

    @invalidate_rkey.setter
    def invalidate_rkey(self, rkey: int) -> None:
        self.imm_data = rkey

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        self.rkey, self.remote_addr = rkey, addr

    def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
        self.rkey, self.remote_addr, self.compare_add, self.swap = rkey, addr, compare_add, swap

    def set_wr_ud(self, ah, rqpn: int, rqkey: int) -> None:
        self.ah, self.remote_qpn, self.remote_qkey = ah, rqpn, rqkey

    def set_qp_type_xrc(self, remote_srqn: int) -> None:
        """The XRC SRQ the responder takes this send's receive WQE from
        (the XRCETH of every packet)."""
        self.remote_srqn = remote_srqn

    def set_inv_rkey(self, rkey: int) -> None:
        self.invalidate_rkey = rkey

    def set_bind_wr(self, mw, bind_info) -> None:
        """An IBV_WR_BIND_MW (type 2 window): the new rkey, the window's
        current one with its key byte incremented, is ``self.rkey``."""
        self.mw = mw
        self.bind_info = bind_info
        self.rkey = inc_rkey(mw.rkey)


def inc_rkey(rkey: int) -> int:
    """ibv_inc_rkey: the next key byte, same index."""
    return (rkey & ~0xFF) | ((rkey + 1) & 0xFF)
