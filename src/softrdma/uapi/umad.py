"""A umad file of an InfiniBand device port (the kernel's
``/dev/infiniband/umadN``, ``struct ib_user_mad_hdr``): what a management
tool (ibping, saquery, ... with ``-C DEV -P PORT``) and the daemon's QP1
exchange over the SEQPACKET socket ``umad_open`` returns.

One record per message: ``HDR`` then the 256-byte MAD.  Tool → daemon: a
MAD to send from QP1 to ``lid`` (a DLID), QP ``qpn`` with Q_Key ``qkey``,
SL ``sl``, source path bits ``path_bits``, with a GRH to ``gid`` when
``grh`` is set.  Daemon → tool: a MAD received on QP1 from LID ``lid`` (the
SLID), QP ``qpn``; ``status`` is 0, or ETIMEDOUT for a request of the tool
that could not leave (the port is not Active), as ib_umad hands a failed
send back.  Requests the tool sends get the upper 32 TID bits of its file
(the kernel's hi_tid), and responses with those bits come back to it;
requests of a management class it registered come to it unsolicited.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

HDR = struct.Struct(">IIHHBBBB16s")     # qpn, qkey, lid, status, sl, path_bits, grh, hop_limit, gid
MAD_BYTES = 256
RECORD_BYTES = HDR.size + MAD_BYTES
QP1_QKEY = 0x80010000


class UmadRecord(NamedTuple):
    qpn: int
    qkey: int
    lid: int
    status: int
    sl: int
    path_bits: int
    grh: int
    hop_limit: int
    gid: bytes
    mad: bytes


def pack(mad: bytes, *, lid: int, qpn: int = 1, qkey: int = QP1_QKEY, status: int = 0, sl: int = 0,
         path_bits: int = 0, gid: bytes | None = None, hop_limit: int = 0) -> bytes:
    if len(mad) != MAD_BYTES:
        raise ValueError(f"a MAD is {MAD_BYTES} bytes, not {len(mad)}")
    return HDR.pack(qpn & 0xFFFFFF, qkey, lid & 0xFFFF, status, sl & 0xF, path_bits & 0x7F,
                    1 if gid is not None else 0, hop_limit & 0xFF, bytes(gid or bytes(16))) + bytes(mad)


def unpack(msg) -> UmadRecord:
    if len(msg) != RECORD_BYTES:
        raise ValueError(f"a umad record is {RECORD_BYTES} bytes, not {len(msg)}")
    return UmadRecord(*HDR.unpack_from(msg), bytes(msg[HDR.size:]))


__all__ = ["HDR", "MAD_BYTES", "RECORD_BYTES", "QP1_QKEY", "UmadRecord", "pack", "unpack"]
