"""GID, GlobalRoute, AHAttr and AH, as pyverbs' addr module has them."""

from __future__ import annotations

import ctypes
import errno
import ipaddress

from ..enums import IBV_LINK_LAYER_INFINIBAND, IBV_WC_GRH
from ..uapi.commands import CMD
from .base import PDObject
from .errors import PyverbsRDMAError


class GID:
    """A 16-byte GID; ``str()`` is the colon form pyverbs and sysfs print."""

    def __init__(self, val: bytes | str | None = None):
        if val is None:
            raw = bytes(16)
        elif isinstance(val, (bytes, bytearray)):
            raw = bytes(val)
        else:
            raw = ipaddress.IPv6Address(val).packed if "::" in val or val.count(":") != 7 \
                else bytes.fromhex(val.replace(":", ""))
        if len(raw) != 16:
            raise ValueError("a GID is 16 bytes")
        self.raw = raw

    @property
    def gid(self) -> str:
        return str(self)

    def __str__(self) -> str:
        h = self.raw.hex()
        return ":".join(h[i:i + 4] for i in range(0, 32, 4))

    def __eq__(self, other) -> bool:
        return isinstance(other, GID) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"GID({str(self)!r})"


class GlobalRoute:
    def __init__(self, dgid: GID | None = None, flow_label: int = 0, sgid_index: int = 0, hop_limit: int = 1,
                 traffic_class: int = 0):
        self.dgid = dgid if dgid is not None else GID()
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class


class AHAttr:
    def __init__(self, gr: GlobalRoute | None = None, is_global: int = 0, port_num: int = 1, dlid: int = 0,
                 sl: int = 0, src_path_bits: int = 0, static_rate: int = 0):
        self.gr = gr if gr is not None else GlobalRoute()
        self.is_global = 1 if gr is not None else is_global
        self.port_num = port_num
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate

    @property
    def dgid(self):
        return self.gr.dgid

    def to_wire(self) -> dict:
        g = self.gr
        return {"dgid": g.dgid.raw.hex(), "sgid_index": g.sgid_index, "flow_label": g.flow_label,
                "hop_limit": g.hop_limit, "traffic_class": g.traffic_class, "sl": self.sl, "dlid": self.dlid,
                "port_num": self.port_num, "is_global": bool(self.is_global),
                "src_path_bits": self.src_path_bits, "static_rate": self.static_rate}

    @classmethod
    def from_wire(cls, d: dict) -> "AHAttr":
        gr = GlobalRoute(GID(bytes.fromhex(d["dgid"])), d["flow_label"], d["sgid_index"], d["hop_limit"],
                         d["traffic_class"])
        a = cls(gr, int(d["is_global"]), d["port_num"], d["dlid"], d["sl"], d.get("src_path_bits", 0),
                d.get("static_rate", 0))
        a.is_global = int(d["is_global"])     # a LID-routed address (InfiniBand: no GRH) keeps its fields
        return a


def ah_attr_from_wc(ctx, port_num: int, wc, grh: bytes) -> AHAttr:
    """ibv_init_ah_from_wc on RoCE: the packet's source GID is the
    destination, the local GID it was sent to gives sgid_index.  The 40-byte
    GRH area holds an IPv6 header, or (RoCEv2 over IPv4) an IPv4 header in
    its last 20 bytes."""
    ib = ctx.query_port(port_num).link_layer == IBV_LINK_LAYER_INFINIBAND
    if not wc.wc_flags & IBV_WC_GRH:
        if ib:                    # LID-routed: the source LID, SL and path bits the completion carries
            return AHAttr(None, 0, port_num, wc.slid, wc.sl, wc.dlid_path_bits)
        raise PyverbsRDMAError("Failed to create AH", errno.EINVAL)
    if not ib and grh[20] >> 4 == 4:
        tclass, flow = grh[21], 0
        sgid = bytes(10) + b"\xff\xff" + grh[32:36]
        dgid = bytes(10) + b"\xff\xff" + grh[36:40]
    else:
        vtf = int.from_bytes(grh[0:4], "big")
        tclass, flow = (vtf >> 20) & 0xFF, vtf & 0xFFFFF
        sgid, dgid = grh[8:24], grh[24:40]
    for i in range(ctx.query_port(port_num).gid_tbl_len):
        try:
            if ctx.query_gid(port_num, i).raw == dgid:
                break
        except PyverbsRDMAError:
            continue
    else:
        raise PyverbsRDMAError("Failed to create AH", errno.ENOENT)
    return AHAttr(GlobalRoute(GID(sgid), flow, i, 0xFF, tclass), 1, port_num, wc.slid, wc.sl,
                  wc.dlid_path_bits)


class AH(PDObject):
    """An address handle for UD sends: ``AH(pd, attr=AHAttr(...))``."""

    destroy_cmd = CMD.destroy_ah
    close_rank = 2

    def __init__(self, pd, attr: AHAttr | None = None, *, wc=None, grh=None, port_num=None):
        if attr is None:          # ibv_create_ah_from_wc; grh is the buffer's address, as in pyverbs
            attr = ah_attr_from_wc(pd.ctx, port_num, wc, ctypes.string_at(grh, 40))
        self.pd = pd
        self.ah_attr = attr
        try:
            reply, _ = pd.ctx.conn.call(CMD.create_ah, pd=pd.handle, attr=attr.to_wire())
        except PyverbsRDMAError as e:
            # pyverbs' text ("Failed to create AH"), then the daemon's reason
            reason = getattr(e, "reason", None)
            raise PyverbsRDMAError(f"Failed to create AH: {reason}" if reason else "Failed to create AH",
                                   e.error_code) from None
        self.handle = reply["ah"]
        self.closed = False
        self.pd.add_ref(self)
