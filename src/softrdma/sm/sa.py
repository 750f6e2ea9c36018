"""The subnet administrator's queries (IBA 15.4; opensm's osm_sa_*_record.c), sans-IO.

``SubnetAdmin(subnet, sminfo).handle(mad, slid)`` answers one SA request
from the SM's view of the subnet: NodeRecord (by LID), PortInfoRecord (by
LID and port), PathRecord (by SLID/DLID or SGID/DGID; a missing source is
the requester), each as Get (one record, GetResp; ERR_NO_RECORDS when none)
or GetTable (GetTableResp as one RMPP segment).  Without RMPP
reassembly over umad2sim a table answer is one MAD: as many records as fit
in 200 bytes (1 NodeRecord, 2 PortInfoRecords, 3 PathRecords), the rest are
dropped and logged.  Other attributes and methods: status "method/attribute
unsupported".  PathRecord fields: SGID/DGID from the subnet prefix and port
GUIDs, reversible, P_Key 0xFFFF, SL 0, MTU the smaller MtuCap of the two
ends, rate from the source port's active width and speed, packet lifetime
opensm's default 0x12; the path must exist through the LFTs.
"""

from __future__ import annotations

from ..wire.mad import IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB, Method
from ..wire.sa import (NODE_RECORD_DESC, NODE_RECORD_NODE_INFO, NODE_RECORD_SIZE, NR_COMP_LID, PATH_RECORD,
                       PIR_COMP_LID, PIR_COMP_PORTNUM, PORT_INFO_RECORD_PORT_INFO, PORT_INFO_RECORD_SIZE,
                       PR_COMP_DGID, PR_COMP_DLID, PR_COMP_SGID, PR_COMP_SLID, SA_DATA_OFFSET, SA_STATUS_NO_RECORDS,
                       SA_STATUS_REQ_INVALID, SaAttr, parse_sa, set_sa_response)
from ..wire.errors import WireError
from ..wire.rmpp import RMPP_FLAG_ACTIVE, RMPP_TYPE_DATA, RmppSender
from ..wire.smp import LINK_WIDTH, NODE_INFO, PORT_INFO, encode_node_desc
from .subnet import NO_PATH, Physp, Subnet

GID_PREFIX = 0xFE80000000000000
PACKET_LIFE_TIME = 0x12
# total Gb/s -> IBA rate code (IBA 15.2.5.16 / ib_types.h IB_PATH_RECORD_RATE_*)
_RATE_CODE = {2.5: 2, 10: 3, 30: 4, 5: 5, 20: 6, 40: 7, 60: 8, 80: 9, 120: 10, 14: 11, 56: 12,
              112: 13, 168: 14, 25: 15, 100: 16, 200: 17, 300: 18, 50: 20, 400: 21, 600: 22}
_SPEED = {1: 2.5, 2: 5.0, 4: 10.0}
_SPEED_EXT = {1: 14.0, 2: 25.0, 4: 50.0}


class SubnetAdmin:
    def __init__(self, subnet: Subnet, sminfo=None, log=None) -> None:
        self.subnet = subnet
        self.log = log
        self.by_lid = subnet.port_by_lid()
        self.transfers: dict[tuple[int, int], RmppSender] = {}
        self.rmpp_timeout, self.rmpp_retries = 0.2, 3
        self.counts = {"rmpp_transfers": 0, "rmpp_aborted": 0}

    # -- records ---------------------------------------------------------------------------
    def node_record(self, p: Physp) -> bytes:
        rec = bytearray(NODE_RECORD_SIZE)
        rec[0:2] = p.lid.to_bytes(2, "big")
        ni = bytearray(p.node.node_info or bytes(NODE_INFO.size))
        NODE_INFO.encode_into(ni, 0, PortGuid=p.guid, LocalPort=p.num)
        rec[NODE_RECORD_NODE_INFO:NODE_RECORD_NODE_INFO + NODE_INFO.size] = ni
        rec[NODE_RECORD_DESC:NODE_RECORD_DESC + 64] = encode_node_desc(p.node.desc)
        return bytes(rec)

    def port_info_record(self, lid: int, ph: Physp) -> bytes:
        rec = bytearray(PORT_INFO_RECORD_SIZE)
        rec[0:2] = lid.to_bytes(2, "big")
        rec[2] = ph.num
        rec[PORT_INFO_RECORD_PORT_INFO:PORT_INFO_RECORD_PORT_INFO + 64] = ph.port_info.ljust(64, b"\0")
        return bytes(rec)

    def _hops(self, src: Physp, dst: Physp) -> int | None:
        """Links crossed from src to dst through the LFTs the SM computed, or None."""
        if src is dst:
            return 0
        node, hops = (src.node, 0) if src.node.is_switch else (src.remote.node if src.remote else None, 1)
        for _ in range(64):
            if node is None or not node.is_switch:
                return None
            if dst.node is node:
                return hops
            lft = getattr(self.subnet, "lfts", {}).get(node)
            if lft is None or dst.lid >= len(lft) or lft[dst.lid] == NO_PATH:
                return None
            ph = node.ports.get(lft[dst.lid])
            if ph is None or ph.remote is None:
                return None
            hops += 1
            if ph.remote is dst:
                return hops
            node = ph.remote.node
        return None

    def path_record(self, src: Physp, dst: Physp) -> bytes | None:
        if self._hops(src, dst) is None:
            return None
        spi = PORT_INFO.decode(src.port_info) if src.port_info else {}
        dpi = PORT_INFO.decode(dst.port_info) if dst.port_info else {}
        mtu = min(spi.get("MtuCap", 4) or 4, dpi.get("MtuCap", 4) or 4)
        lanes = LINK_WIDTH.get(spi.get("LinkWidthActive", 2), 4)
        ext = spi.get("LinkSpeedExtActive", 0)
        gbps = lanes * (_SPEED_EXT.get(ext) or _SPEED.get(spi.get("LinkSpeedActive", 1), 2.5))
        rate = _RATE_CODE.get(gbps, 3)
        return bytes(PATH_RECORD.encode(
            DGID=(GID_PREFIX << 64) | dst.guid, SGID=(GID_PREFIX << 64) | src.guid,
            DLID=dst.lid, SLID=src.lid, Reversible=1, PKey=0xFFFF, MtuSelector=2, Mtu=mtu,
            RateSelector=2, Rate=rate, PacketLifeTimeSelector=2, PacketLifeTime=PACKET_LIFE_TIME))

    # -- queries ---------------------------------------------------------------------------
    def _port_by_gid(self, gid: int) -> Physp | None:
        return self.subnet.ports.get(gid & 0xFFFFFFFFFFFFFFFF)

    def query(self, attr: int, mask: int, rec, slid: int) -> tuple[list[bytes], int] | None:
        """(records, record size) for the request, or None if the attribute is not served."""
        if attr == SaAttr.NODE_RECORD:
            want = int.from_bytes(rec[0:2], "big") if mask & NR_COMP_LID else None
            ports = [self.by_lid[want]] if want in self.by_lid else [] if want is not None else \
                [self.by_lid[lid] for lid in sorted(self.by_lid)]
            return [self.node_record(p) for p in ports], NODE_RECORD_SIZE
        if attr == SaAttr.PORT_INFO_RECORD:
            lid = int.from_bytes(rec[0:2], "big") if mask & PIR_COMP_LID else None
            num = rec[2] if mask & PIR_COMP_PORTNUM else None
            out = []
            for elid in ([lid] if lid is not None else sorted(self.by_lid)):
                p = self.by_lid.get(elid)
                if p is None:
                    continue
                phs = [ph for n, ph in sorted(p.node.ports.items()) if n] if p.node.is_switch else [p]
                if p.node.is_switch:
                    phs = [p] + phs
                for ph in phs:
                    if (num is None or ph.num == num) and ph.port_info:
                        out.append(self.port_info_record(elid, ph))
            return out, PORT_INFO_RECORD_SIZE
        if attr == SaAttr.PATH_RECORD:
            f = PATH_RECORD.decode(rec)
            src = self._port_by_gid(f["SGID"]) if mask & PR_COMP_SGID else \
                self.by_lid.get(f["SLID"]) if mask & PR_COMP_SLID else self.by_lid.get(slid)
            if mask & PR_COMP_DGID:
                dsts = [self._port_by_gid(f["DGID"])]
            elif mask & PR_COMP_DLID:
                dsts = [self.by_lid.get(f["DLID"])]
            else:
                dsts = [self.by_lid[lid] for lid in sorted(self.by_lid)]
            if src is None:
                return [], 64
            out = [r for d in dsts if d is not None and (r := self.path_record(src, d)) is not None]
            return out, 64
        return None

    def set_subnet(self, subnet: Subnet) -> None:
        """A new heavy sweep's view; what clients registered (groups, services) stays."""
        self.subnet = subnet
        self.by_lid = subnet.port_by_lid()

    def handle(self, mad: bytearray, slid: int = 0, sqp: int = 1, now: float = 0.0) -> list:
        """Answers to one SA MAD: ``[(mad, length), ...]`` (length: what to report as
        received, for readers without RMPP; None = the whole MAD)."""
        method = mad[3]
        attr = int.from_bytes(mad[16:18], "big")
        try:
            hdr, rec = parse_sa(bytes(mad))
        except WireError:
            return []
        if hdr.rmpp_version and hdr.rmpp_flags & RMPP_FLAG_ACTIVE and hdr.rmpp_type != RMPP_TYPE_DATA:
            # an ACK/STOP/ABORT of one of our transfers
            t = self.transfers.get((slid, int.from_bytes(mad[8:16], "big")))
            if t is None:
                return []
            out = [(m, None) for m in t.on_control(mad, now)]
            if t.done:
                self._finish(t)
            return out
        if method not in (Method.GET, Method.SA_GET_TABLE):
            mad[3] = Method.GET_RESP
            mad[4:6] = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB.to_bytes(2, "big")
            return [(bytes(mad), None)]
        res = self.query(attr, hdr.comp_mask, rec, slid)
        if res is None:
            mad[3] = Method.GET_RESP if method == Method.GET else Method.SA_GET_TABLE_RESP
            mad[4:6] = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB.to_bytes(2, "big")
            return [(bytes(mad), None)]
        records, size = res
        if method == Method.GET:
            status = 0 if len(records) == 1 else SA_STATUS_NO_RECORDS if not records else SA_STATUS_REQ_INVALID
            set_sa_response(mad, Method.GET_RESP, records[:1] if status == 0 else [], size, status)
            return [(bytes(mad), None)]
        words = (size + 7) // 8
        set_sa_response(mad, Method.SA_GET_TABLE_RESP, [], size, rmpp=True)
        data = b"".join(r.ljust(words * 8, b"\0") for r in records)
        key = (slid, int.from_bytes(mad[8:16], "big"))
        old = self.transfers.pop(key, None)         # the request again: start over
        if old is not None:
            self._finish(old)
        t = RmppSender(mad[:SA_DATA_OFFSET], data, timeout=self.rmpp_timeout, retries=self.rmpp_retries,
                       now=now)
        segs = t.start(now)
        # a reader without RMPP (umad2sim) takes segment 1 alone, as long as this says:
        # the whole records in it, which is what saquery counts
        out = [(segs[0], t.first_length(words * 8))] + [(m, None) for m in segs[1:]]
        if t.count > 1:
            t.dest = (slid, sqp)
            self.transfers[key] = t
            self.counts["rmpp_transfers"] += 1
        return out

    def tick(self, now: float) -> list:
        """Transfers past their deadline: ``[(dlid, dqp, mad), ...]`` to resend."""
        out = []
        for key, t in list(self.transfers.items()):
            for m in t.on_timer(now):
                out.append((t.dest[0], t.dest[1], m))
            if t.done:
                self._finish(t)
        return out

    def _finish(self, t: RmppSender) -> None:
        for key, v in list(self.transfers.items()):
            if v is t:
                del self.transfers[key]
        if t.aborted:
            self.counts["rmpp_aborted"] += 1
            if self.log:
                self.log.info(f"SA: RMPP transfer to LID {t.dest[0]} given up (status {t.aborted}) "
                              f"after segment {t.last_ack} of {t.count}")
