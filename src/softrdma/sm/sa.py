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
opensm's default 0x12; the path must exist through the LFTs.  With an
LMC, a GetTable has one path per pair of LIDs of the two ranges, in opensm's
order and preference (base+i to base+i first, preference 0; then the other
pairs, preference 2), NumbPath of them if asked; a Get, one (the bases, or
the LIDs asked for).
"""

from __future__ import annotations

from ..wire.mad import IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB, Method
from ..wire.sa import (NODE_RECORD_DESC, NODE_RECORD_NODE_INFO, NODE_RECORD_SIZE, NR_COMP_LID, PATH_RECORD,
                       PIR_COMP_LID, PIR_COMP_PORTNUM, PORT_INFO_RECORD_PORT_INFO, PORT_INFO_RECORD_SIZE,
                       PR_COMP_DGID, PR_COMP_DLID, PR_COMP_NUMBPATH, PR_COMP_SGID, PR_COMP_SLID,
                       SA_DATA_OFFSET, SA_STATUS_NO_RECORDS,
                       SA_STATUS_REQ_INVALID, SaAttr, parse_sa, records_per_mad, set_sa_response)
from ..wire.errors import WireError
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
        # an LMC range answers to each of its LIDs, but a table lists a port once (base LID)
        self.base_lids = sorted(lid for lid, p in self.by_lid.items() if lid == p.lid)
        self.truncated = 0

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

    def _hops(self, src: Physp, dst: Physp, dlid: int | None = None) -> int | None:
        """Links crossed from src to dst (to its LID ``dlid``, default the base) through the
        LFTs the SM computed, or None."""
        dlid = dlid or dst.lid
        if src is dst:
            return 0
        node, hops = (src.node, 0) if src.node.is_switch else (src.remote.node if src.remote else None, 1)
        for _ in range(64):
            if node is None or not node.is_switch:
                return None
            if dst.node is node:
                return hops
            lft = getattr(self.subnet, "lfts", {}).get(node)
            if lft is None or dlid >= len(lft) or lft[dlid] == NO_PATH:
                return None
            ph = node.ports.get(lft[dlid])
            if ph is None or ph.remote is None:
                return None
            hops += 1
            if ph.remote is dst:
                return hops
            node = ph.remote.node
        return None

    def path_record(self, src: Physp, dst: Physp, slid: int | None = None,
                    dlid: int | None = None, preference: int = 0) -> bytes | None:
        """One path; ``slid``/``dlid``: the LIDs of the ports' LMC ranges asked for (default base)."""
        if self._hops(src, dst, dlid) is None:
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
            DLID=dlid or dst.lid, SLID=slid or src.lid, Reversible=1, PKey=0xFFFF, MtuSelector=2, Mtu=mtu,
            RateSelector=2, Rate=rate, PacketLifeTimeSelector=2, PacketLifeTime=PACKET_LIFE_TIME,
            Preference=preference))

    def pair_paths(self, src: Physp, dst: Physp, slid: int | None, dlid: int | None,
                   iterations: int | None) -> list[bytes]:
        """pr_rcv_get_port_pair_paths: the paths between two ports over their LMC ranges (or the
        LIDs asked for): first base+i to base+i (preference 0), then the other pairs source-major
        (preference 2); at most ``iterations`` (None: all)."""
        slo, shi = (slid, slid) if slid else (src.lid, src.lid + (1 << src.lmc) - 1)
        dlo, dhi = (dlid, dlid) if dlid else (dst.lid, dst.lid + (1 << dst.lmc) - 1)
        out: list[bytes] = []
        if not slo or not dlo:
            return out

        def more() -> bool:
            return iterations is None or len(out) < iterations
        s_, d_ = slo, dlo
        while more():
            if (r := self.path_record(src, dst, s_, d_, 0)) is not None:
                out.append(r)
            s_ += 1
            d_ += 1
            if s_ > shi or d_ > dhi:
                break
        s_, d_, so, do = slo, dlo, 0, 0
        while more():
            do += 1
            d_ += 1
            if d_ > dhi:
                so += 1
                s_ += 1
                if s_ > shi:
                    break
                do, d_ = 0, dlo
            if so == do:
                continue            # a preference-0 path, already there
            if (r := self.path_record(src, dst, s_, d_, 2)) is not None:
                out.append(r)
        return out

    # -- queries ---------------------------------------------------------------------------
    def _port_by_gid(self, gid: int) -> Physp | None:
        return self.subnet.ports.get(gid & 0xFFFFFFFFFFFFFFFF)

    def query(self, attr: int, mask: int, rec, slid: int,
              get: bool = False) -> tuple[list[bytes], int] | None:
        """(records, record size) for the request (``get``: SubnAdmGet, else GetTable), or None
        if the attribute is not served."""
        if attr == SaAttr.NODE_RECORD:
            want = int.from_bytes(rec[0:2], "big") if mask & NR_COMP_LID else None
            ports = [self.by_lid[want]] if want in self.by_lid else [] if want is not None else \
                [self.by_lid[lid] for lid in self.base_lids]
            return [self.node_record(p) for p in ports], NODE_RECORD_SIZE
        if attr == SaAttr.PORT_INFO_RECORD:
            lid = int.from_bytes(rec[0:2], "big") if mask & PIR_COMP_LID else None
            num = rec[2] if mask & PIR_COMP_PORTNUM else None
            out = []
            for elid in ([lid] if lid is not None else self.base_lids):
                p = self.by_lid.get(elid)
                if p is None:
                    continue
                elid = p.lid
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
                dsts = [self.by_lid[lid] for lid in self.base_lids]
            if src is None:
                return [], 64
            # a LID asked for (SLID/DLID in the mask) may be any LID of the port's range
            slid_ = f["SLID"] if mask & PR_COMP_SLID and not mask & PR_COMP_SGID else None
            dlid_ = f["DLID"] if mask & PR_COMP_DLID and not mask & PR_COMP_DGID else None
            # SubnAdmGet: one path per port pair (IBA 1.2 erratum); else NumbPath, or all
            iterations = 1 if get else f["NumbPath"] if mask & PR_COMP_NUMBPATH else None
            out = [r for d in dsts if d is not None
                   for r in self.pair_paths(src, d, slid_, dlid_, iterations)]
            return out, 64
        return None

    def handle(self, mad: bytearray, slid: int = 0) -> bytes | None:
        method = mad[3]
        attr = int.from_bytes(mad[16:18], "big")
        try:
            hdr, rec = parse_sa(bytes(mad))
        except WireError:
            return None
        if method not in (Method.GET, Method.SA_GET_TABLE):
            mad[3] = Method.GET_RESP
            mad[4:6] = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB.to_bytes(2, "big")
            return bytes(mad)
        res = self.query(attr, hdr.comp_mask, rec, slid, get=method == Method.GET)
        if res is None:
            mad[3] = Method.GET_RESP if method == Method.GET else Method.SA_GET_TABLE_RESP
            mad[4:6] = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB.to_bytes(2, "big")
            return bytes(mad)
        records, size = res
        if method == Method.GET:
            status = 0 if len(records) == 1 else SA_STATUS_NO_RECORDS if not records else SA_STATUS_REQ_INVALID
            set_sa_response(mad, Method.GET_RESP, records[:1] if status == 0 else [], size, status)
            return bytes(mad)
        fit = records_per_mad(size)
        if len(records) > fit:
            self.truncated += 1
            if self.log:
                self.log.info(f"SA: {len(records)} records of attribute {attr:#x}, "
                              f"{fit} fit in one MAD (no RMPP over ibsim): answer truncated")
        set_sa_response(mad, Method.SA_GET_TABLE_RESP, records[:fit], size, rmpp=True)
        # an RMPP transfer's length is its payload's, not the MAD's: umad2sim hands it to the
        # client as the received length, and saquery counts records by it
        return bytes(mad[:SA_DATA_OFFSET + min(len(records), fit) * ((size + 7) // 8) * 8])
