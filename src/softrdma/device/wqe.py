"""The daemon's reading of the WQE slots the library writes: a send or
receive WQE (layout: ``uapi.abi``) into the transport's ``SendWQE`` /
``RecvWQE``.  Lengths in a slot are untrusted and bounded by the slot.

``SEND_SGE1`` and ``RECV_SGE1`` read the fields of a one-SGE send / receive
slot in one unpack, without objects (``device.sendpath``): a slot is at
least that long (``abi.send_slot_size``/``recv_slot_size``), which the
reader checks once per ring."""

from __future__ import annotations

import struct

from ..transport.wr import RecvWQE, SendWQE
from ..uapi.abi import IBV_SEND_INLINE, RECV_WQE_HDR, SEND_WQE_HDR, SGE

#: wr_id, opcode, num_sge, send_flags, imm_data, remote_addr, rkey,
#: ah_handle, then the first SGE's addr, length, lkey (offsets:
#: ``uapi.abi``'s send WQE)
SEND_SGE1 = struct.Struct("<QBBHIQI20xI12xQII")
#: wr_id, num_sge, then the first SGE's addr, length, lkey
RECV_SGE1 = struct.Struct("<QI4xQII")
assert SEND_SGE1.size == SEND_WQE_HDR.size + SGE.size and RECV_SGE1.size == RECV_WQE_HDR.size + SGE.size


def decode_send_wqe(slot, ah_lookup=None) -> SendWQE:
    """Read a send WQE slot into the transport's ``SendWQE``.  ``ah_lookup``
    turns an AH handle into an ``AddressVector`` (UD); untrusted lengths are
    bounded by the slot (``ValueError`` if they overrun it)."""
    (wr_id, opcode, nsge, flags, imm, raddr, rkey, inline_len, cmp_add, swap, ah, rqpn, rqkey,
     _) = SEND_WQE_HDR.unpack_from(slot, 0)
    av = ah_lookup(ah) if ah_lookup is not None and ah else None
    if flags & IBV_SEND_INLINE:
        if 64 + inline_len > len(slot):
            raise ValueError("inline length overruns the WQE slot")
        return SendWQE(wr_id, opcode, (), send_flags=flags, inline_data=bytes(slot[64:64 + inline_len]),
                       imm_data=imm, invalidate_rkey=imm, remote_addr=raddr, rkey=rkey, compare_add=cmp_add,
                       swap=swap, ah=av, remote_qpn=rqpn, remote_qkey=rqkey)
    if 64 + 16 * nsge > len(slot):
        raise ValueError("SGE count overruns the WQE slot")
    sges = [SGE.unpack_from(slot, 64)] if nsge == 1 else [SGE.unpack_from(slot, 64 + 16 * i) for i in range(nsge)]
    return SendWQE(wr_id, opcode, sges, send_flags=flags, imm_data=imm, invalidate_rkey=imm, remote_addr=raddr,
                   rkey=rkey, compare_add=cmp_add, swap=swap, ah=av, remote_qpn=rqpn, remote_qkey=rqkey)


def decode_recv_wqe(slot) -> RecvWQE:
    wr_id, nsge, _ = RECV_WQE_HDR.unpack_from(slot, 0)
    if 16 + 16 * nsge > len(slot):
        raise ValueError("SGE count overruns the WQE slot")
    if nsge == 1:
        return RecvWQE(wr_id, [SGE.unpack_from(slot, 16)])
    return RecvWQE(wr_id, [SGE.unpack_from(slot, 16 + 16 * i) for i in range(nsge)])
