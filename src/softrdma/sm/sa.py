"""The subnet administrator (IBA 15.4; opensm's osm_sa_*_record.c), sans-IO.

``SubnetAdmin(subnet, sminfo, log).handle(mad, slid, sqp, now)`` answers
one SA MAD from the SM's view of the subnet and keeps what clients
registered across sweeps (``set_subnet``): multicast groups (``sm.mcast``)
and service records.  Records: ClassPortInfo; NodeRecord; PortInfoRecord
(by LID, port, CapabilityMask); PathRecord (by SLID/DLID or SGID/DGID, a
missing source is the requester; SGID/DGID from the subnet prefix and port
GUIDs, reversible, P_Key 0xFFFF, SL 0, MTU the smaller MtuCap of the two
ends, rate from the source port's active width and speed, packet lifetime
opensm's 0x12; the path must exist through the LFTs; with an LMC a GetTable
has one path per pair of LIDs of the two ranges, in opensm's order and
preference -- base+i to base+i first, preference 0, then the other pairs,
preference 2 -- NumbPath of them if asked, a Get one); SwitchInfoRecord;
SMInfoRecord; LinkRecord; LFTRecord; MFTRecord; MCMemberRecord (Set joins,
Delete leaves, queries as opensm's mcmr_query_mgrp); ServiceRecord (Set,
Delete, leases); GUIDInfoRecord (alias GUIDs: ``sm.sa_guidinfo``); a
PathRecord to an alias GID or a vport's GID (``sm.virt``) is a path to its
port (a vport's: to its own LID).  Get answers one record (ERR_NO_RECORDS,
or REQ_INVALID for more than one); GetTable answers by RMPP (a ``mgmt.agent.MadAgent``): segment 1
goes with the length of its whole records within what umad2sim copies,
the rest follow the requester's ACKs, and ``tick(now)`` resends or gives
up.  Other attributes and methods: "method/attribute unsupported".
"""

from __future__ import annotations

from ..mgmt.agent import MadAgent
from ..wire.mad import IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB, Method
from ..wire.sa import (CLASS_PORT_INFO, LFT_RECORD_SIZE, LFTR_COMP_BLOCK, LFTR_COMP_LID, LINK_RECORD_SIZE,
                       LR_COMP_FROM_LID, LR_COMP_FROM_PORT, LR_COMP_TO_LID, LR_COMP_TO_PORT, MCMEMBER_RECORD,
                       MCMEMBER_RECORD_SIZE, MCR_COMP, MFT_RECORD_SIZE, MFTR_COMP_BLOCK, MFTR_COMP_LID,
                       MFTR_COMP_POSITION, NODE_RECORD_DESC, NODE_RECORD_NODE_INFO, NODE_RECORD_SIZE, NR_COMP_LID,
                       PATH_RECORD, PIR_COMP_CAPMASK, PIR_COMP_LID, PIR_COMP_PORTNUM, PORT_INFO_RECORD_PORT_INFO,
                       PORT_INFO_RECORD_SIZE, PR_COMP_DGID, PR_COMP_DLID, PR_COMP_NUMBPATH, PR_COMP_SGID, PR_COMP_SLID,
                       SA_DATA_OFFSET, SA_STATUS_INSUFFICIENT_COMPONENTS, SA_STATUS_NO_RECORDS,
                       SA_STATUS_REQ_INVALID, SERVICE_RECORD, SERVICE_RECORD_SIZE, SM_INFO_RECORD_SIZE,
                       SMIR_COMP_LID, SR_COMP_GID, SR_COMP_ID, SR_COMP_KEY, SR_COMP_LEASE, SR_COMP_NAME,
                       SR_COMP_PKEY, SR_SERVICE_NAME, SWIR_COMP_LID, SWITCH_INFO_RECORD_SIZE, SaAttr, SaMethod,
                       parse_sa, set_sa_response)
from ..wire.errors import WireError
from ..wire.rmpp import RMPP_FLAG_ACTIVE, RMPP_TYPE_DATA
from ..wire.smp import LINK_WIDTH, NODE_INFO, PORT_INFO, SWITCH_INFO, encode_node_desc
from .mcast import Groups, McastError, port_gid
from .sa_guidinfo import GUIDINFO_RECORD_SIZE, GuidInfo
from .sa_qos import SLVL_RECORD_SIZE, VLARB_RECORD_SIZE, sl2vl_records, vlarb_records
from .sa_pkey import (PKEY_TABLE_RECORD_SIZE, PKTR_COMP_LID, has_pkey_of, path_pkey_sl, pkey_table_records,
                      requester_shares)
from .subnet import NO_PATH, Physp, Subnet

GID_PREFIX = 0xFE80000000000000
PACKET_LIFE_TIME = 0x12
# umad2sim copies sizeof(struct sim_request) - umad_size() = 288 - 64 bytes of a received
# MAD into the reader's buffer: a record past byte 224 would reach saquery as heap garbage
UMAD2SIM_MAD_VIEW = 224
# total Gb/s -> IBA rate code (IBA 15.2.5.16 / ib_types.h IB_PATH_RECORD_RATE_*)
_RATE_CODE = {2.5: 2, 10: 3, 30: 4, 5: 5, 20: 6, 40: 7, 60: 8, 80: 9, 120: 10, 14: 11, 56: 12,
              112: 13, 168: 14, 25: 15, 100: 16, 200: 17, 300: 18, 50: 20, 400: 21, 600: 22}
_GBPS = {code: gbps for gbps, code in _RATE_CODE.items()}      # ib_path_compare_rates' order
_SPEED = {1: 2.5, 2: 5.0, 4: 10.0}
_SPEED_EXT = {1: 14.0, 2: 25.0, 4: 50.0}


# opensm 3.3.23's SA ClassPortInfo (what `saquery -c` shows of it)
SA_CAP_MASK, SA_CAP_MASK2, SA_RESP_TIME_VALUE = 0x2602, 0xB5E8, 0x10
LEASE_INFINITE = 0xFFFFFFFF


def _gbps(pi: dict) -> float:
    """A port's active rate (ib_port_info_compute_rate): lanes x lane speed."""
    lanes = LINK_WIDTH.get(pi.get("LinkWidthActive", 2), 4)
    ext = pi.get("LinkSpeedExtActive", 0)
    return lanes * (_SPEED_EXT.get(ext) or _SPEED.get(pi.get("LinkSpeedActive", 1), 2.5))


class SubnetAdmin:
    def __init__(self, subnet: Subnet, sminfo=None, log=None) -> None:
        self.subnet = subnet
        self.sminfo = sminfo
        self.log = log
        self.groups = Groups()
        self.services: list[list] = []          # [record bytes, expiry time or None]
        self.mfts: dict[int, dict[int, int]] = {}   # switch GUID -> {mlid: mask} as programmed
        self.guidinfo = GuidInfo()              # alias GUIDs (GUIDInfoRecord Set): SR-IOV VFs
        self.set_subnet(subnet)
        # the RMPP transfers of table answers, to (SLID, source QP), told apart by (SLID, TID);
        # generous timeout: a resend after the reader is gone would reach the next client in its slot
        self.rmpp = MadAgent(timeout=1.0, retries=3, tid_mask=(1 << 64) - 1)

    @property
    def transfers(self) -> dict:
        """The RMPP transfers running, by (SLID, TID)."""
        return self.rmpp.transfers

    @property
    def counts(self) -> dict:
        return {"rmpp_transfers": self.rmpp.rmpp_transfers, "rmpp_aborted": self.rmpp.rmpp_aborted}

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
                    dlid: int | None = None, preference: int = 0, pkey: int = 0xFFFF, sl: int = 0,
                    level=None) -> bytes | None:
        """One path; ``slid``/``dlid``: the LIDs of the ports' LMC ranges asked for (default base);
        ``pkey``, ``sl``, ``level``: the path's (sa_pkey.path_pkey_sl; the QoS level's MTU and rate
        limits and packet lifetime)."""
        if self._hops(src, dst, dlid) is None:
            return None
        spi = PORT_INFO.decode(src.port_info) if src.port_info else {}
        dpi = PORT_INFO.decode(dst.port_info) if dst.port_info else {}
        mtu = min(spi.get("MtuCap", 4) or 4, dpi.get("MtuCap", 4) or 4)
        rate = _RATE_CODE.get(_gbps(spi), 3)
        life = PACKET_LIFE_TIME
        if level is not None:
            if level.mtu_limit is not None and mtu > level.mtu_limit:
                mtu = level.mtu_limit
            if level.rate_limit is not None and _GBPS.get(rate, 0) > _GBPS.get(level.rate_limit, 0):
                rate = level.rate_limit
            if level.pkt_life is not None and src is not dst:
                life = level.pkt_life
        return bytes(PATH_RECORD.encode(
            DGID=(GID_PREFIX << 64) | dst.guid, SGID=(GID_PREFIX << 64) | src.guid,
            DLID=dlid or dst.lid, SLID=slid or src.lid, Reversible=1, PKey=pkey, SL=sl, MtuSelector=2, Mtu=mtu,
            RateSelector=2, Rate=rate, PacketLifeTimeSelector=2, PacketLifeTime=life,
            Preference=preference))

    def pair_paths(self, src: Physp, dst: Physp, slid: int | None, dlid: int | None,
                   iterations: int | None, mask: int = 0, f: dict | None = None) -> list[bytes]:
        """pr_rcv_get_port_pair_paths: the paths between two ports over their LMC ranges (or the
        LIDs asked for): first base+i to base+i (preference 0), then the other pairs source-major
        (preference 2); at most ``iterations`` (None: all)."""
        slo, shi = (slid, slid) if slid else (src.lid, src.lid + (1 << src.lmc) - 1)
        dlo, dhi = (dlid, dlid) if dlid else (dst.lid, dst.lid + (1 << dst.lmc) - 1)
        out: list[bytes] = []
        if not slo or not dlo:
            return out
        ps = path_pkey_sl(self.subnet, src, dst, mask,
                          f or {"SL": 0, "PKey": 0, "RawTraffic": 0, "ServiceID": 0, "QosClass": 0}, self.log)
        if ps is None:
            return out              # no P_Key in common: no path
        pkey, sl, level = ps

        def more() -> bool:
            return iterations is None or len(out) < iterations
        s_, d_ = slo, dlo
        while more():
            if (r := self.path_record(src, dst, s_, d_, 0, pkey, sl, level)) is not None:
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
            if (r := self.path_record(src, dst, s_, d_, 2, pkey, sl, level)) is not None:
                out.append(r)
        return out

    # -- queries ---------------------------------------------------------------------------
    def port_by_gid(self, gid: int) -> Physp | None:
        """The port of a GID: its port GUID, or an alias GUID of it (GUIDInfoRecord)."""
        guid = gid & 0xFFFFFFFFFFFFFFFF
        p = self.subnet.ports.get(guid)
        if p is None and (base := self.guidinfo.port_guid_of(guid)) is not None:
            p = self.subnet.ports.get(base)
        if p is None and guid in getattr(self.subnet, "vports", {}):    # a vport (sm.virt): its port
            p = self.subnet.ports.get(self.subnet.vports[guid][0])
        return p

    @staticmethod
    def _cap_match(ph: Physp, cap: int | None, mod: int) -> bool:
        """PortInfoRecord's CapabilityMask component: bit 31 of the modifier asks
        for any of the bits (saquery -s), else for exactly these."""
        if cap is None:
            return True
        have = PORT_INFO.get(ph.port_info, "CapMask")
        return bool(have & cap) if mod & (1 << 31) else have == cap

    def query(self, attr: int, mask: int, rec, slid: int, mod: int = 0,
              trusted: bool = False, get: bool = False) -> tuple[list[bytes], int] | None:
        """(records, record size) for the request (``get``: SubnAdmGet, else GetTable), or None
        if the attribute is not served."""
        more = self._more(attr, mask, rec, trusted, slid)
        if more is not None:
            return more
        if attr == SaAttr.PKEY_TABLE_RECORD:        # (trusted requesters only: see handle)
            lid = int.from_bytes(rec[0:2], "big") if mask & PKTR_COMP_LID else None
            ports = [self.by_lid[lid]] if lid in self.by_lid else [] if lid is not None else \
                self.subnet.end_ports()
            return pkey_table_records(self.subnet, ports, mask, rec, self.by_lid.get(slid)), \
                PKEY_TABLE_RECORD_SIZE
        if attr == SaAttr.SL2VL_TABLE_RECORD:
            return sl2vl_records(self.subnet, self.by_lid, mask, rec, self.by_lid.get(slid)), SLVL_RECORD_SIZE
        if attr == SaAttr.VL_ARB_TABLE_RECORD:
            return vlarb_records(self.subnet, self.by_lid, mask, rec, self.by_lid.get(slid)), VLARB_RECORD_SIZE
        if attr == SaAttr.NODE_RECORD:
            want = int.from_bytes(rec[0:2], "big") if mask & NR_COMP_LID else None
            ports = [self.by_lid[want]] if want in self.by_lid else [] if want is not None else \
                [self.by_lid[lid] for lid in self.base_lids]
            return [self.node_record(p) for p in ports], NODE_RECORD_SIZE
        if attr == SaAttr.PORT_INFO_RECORD:
            lid = int.from_bytes(rec[0:2], "big") if mask & PIR_COMP_LID else None
            num = rec[2] if mask & PIR_COMP_PORTNUM else None
            cap = int.from_bytes(rec[4 + 20:4 + 24], "big") if mask & PIR_COMP_CAPMASK else None
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
                    if (num is None or ph.num == num) and ph.port_info and self._cap_match(ph, cap, mod):
                        out.append(self.port_info_record(elid, ph))
            return out, PORT_INFO_RECORD_SIZE
        if attr == SaAttr.PATH_RECORD:
            f = PATH_RECORD.decode(rec)
            src = self.port_by_gid(f["SGID"]) if mask & PR_COMP_SGID else \
                self.by_lid.get(f["SLID"]) if mask & PR_COMP_SLID else self.by_lid.get(slid)
            if mask & PR_COMP_DGID:
                dsts = [self.port_by_gid(f["DGID"])]
            elif mask & PR_COMP_DLID:
                dsts = [self.by_lid.get(f["DLID"])]
            else:
                dsts = [self.by_lid[lid] for lid in self.base_lids]
            if src is None:
                return [], 64
            # a LID asked for (SLID/DLID in the mask) may be any LID of the port's range
            slid_ = f["SLID"] if mask & PR_COMP_SLID and not mask & PR_COMP_SGID else None
            dlid_ = f["DLID"] if mask & PR_COMP_DLID and not mask & PR_COMP_DGID else None
            vport = getattr(self.subnet, "vports", {}).get(f["DGID"] & (1 << 64) - 1) if mask & PR_COMP_DGID else None
            if vport is not None:
                dlid_ = vport[1]                 # a vport's GID: its own LID
            # SubnAdmGet: one path per port pair (IBA 1.2 erratum); else NumbPath, or all
            iterations = 1 if get else f["NumbPath"] if mask & PR_COMP_NUMBPATH else None
            req = self.by_lid.get(slid)
            out = [r for d in dsts if d is not None and requester_shares(self.subnet, req, src, d)
                   for r in self.pair_paths(src, d, slid_, dlid_, iterations, mask, f)]
            if mask & (PR_COMP_DGID | PR_COMP_SGID):     # an alias GID asked for is the path's GID
                dgid = f["DGID"].to_bytes(16, "big") if mask & PR_COMP_DGID else None
                sgid = f["SGID"].to_bytes(16, "big") if mask & PR_COMP_SGID else None
                out = [r[:8] + (dgid or r[8:24]) + (sgid or r[24:40]) + r[40:] for r in out]
            return out, 64
        return None

    def _more(self, attr, mask, rec, trusted, slid=0):
        u16 = lambda o: int.from_bytes(rec[o:o + 2], "big")          # noqa: E731
        if attr == SaAttr.CLASS_PORT_INFO:
            return [bytes(CLASS_PORT_INFO.encode(
                BaseVersion=1, ClassVersion=2, CapabilityMask=SA_CAP_MASK, CapabilityMask2=SA_CAP_MASK2,
                RespTimeValue=SA_RESP_TIME_VALUE, RedirectQP=1, RedirectQKey=0x80010000,
                TrapQKey=0x80010000))], CLASS_PORT_INFO.size
        if attr == SaAttr.SWITCH_INFO_RECORD:
            return [sw.base_lid().to_bytes(2, "big") + bytes(2) + sw.switch_info[:20].ljust(20, b"\0")
                    for sw in self._switches_by_lid(u16(0) if mask & SWIR_COMP_LID else None)
                    if sw.switch_info], SWITCH_INFO_RECORD_SIZE
        if attr == SaAttr.SM_INFO_RECORD:
            me = self.subnet.ports.get(self.subnet.sm_port_guid)
            if me is None or self.sminfo is None or (mask & SMIR_COMP_LID and u16(0) != me.lid):
                return [], SM_INFO_RECORD_SIZE
            si = bytearray(self.sminfo.attr()[:21])
            if not trusted:
                si[8:16] = bytes(8)                   # SM_Key: only for a trusted requester
            return [me.lid.to_bytes(2, "big") + bytes(2) + bytes(si)], SM_INFO_RECORD_SIZE
        if attr == SaAttr.LINK_RECORD:
            return self._links(mask, rec), LINK_RECORD_SIZE
        if attr == SaAttr.GUIDINFO_RECORD:
            return self.guidinfo.records(mask, rec, self.by_lid, self.base_lids), GUIDINFO_RECORD_SIZE

        if attr == SaAttr.LFT_RECORD:
            out = []
            for sw in self._switches_by_lid(u16(0) if mask & LFTR_COMP_LID else None):
                lft = self.subnet.lfts.get(sw)
                if lft is None:
                    continue
                top = SWITCH_INFO.get(sw.switch_info, "LinearFdbTop") if sw.switch_info else len(lft) - 1
                for b in range(top // 64 + 1):
                    if mask & LFTR_COMP_BLOCK and b != u16(2):
                        continue
                    blk = bytes(lft[b * 64:(b + 1) * 64]).ljust(64, bytes([NO_PATH]))
                    out.append(sw.base_lid().to_bytes(2, "big") + b.to_bytes(2, "big") + bytes(4) + blk)
            return out, LFT_RECORD_SIZE
        if attr == SaAttr.MFT_RECORD:
            pb = u16(2)
            out = []
            for sw in self._switches_by_lid(u16(0) if mask & MFTR_COMP_LID else None):
                table = self.mfts.get(sw.guid, {})
                blocks = sorted({(m - 0xC000) // 32 for m in table})
                for b in blocks:
                    if mask & MFTR_COMP_BLOCK and b != pb & 0x1FF:
                        continue
                    for pos in range((sw.num_ports + 1 + 15) // 16):
                        if mask & MFTR_COMP_POSITION and pos != pb >> 12:
                            continue
                        masks = [(table.get(0xC000 + b * 32 + i, 0) >> (16 * pos)) & 0xFFFF for i in range(32)]
                        if any(masks):
                            out.append(sw.base_lid().to_bytes(2, "big") + ((pos << 12) | b).to_bytes(2, "big")
                                       + bytes(4) + b"".join(m.to_bytes(2, "big") for m in masks))
            return out, MFT_RECORD_SIZE
        if attr == SaAttr.MCMEMBER_RECORD:
            return self._mcmember_query(mask, rec, trusted, slid), MCMEMBER_RECORD_SIZE
        if attr == SaAttr.SERVICE_RECORD:
            return [r for r, _ in self.services if self._sr_match(r, rec, mask)], SERVICE_RECORD_SIZE
        return None

    def _switches_by_lid(self, lid):
        """Switches in LID order (only the one with ``lid`` unless None)."""
        return [self.by_lid[b].node for b in self.base_lids
                if self.by_lid[b].node.is_switch and lid in (None, b)]

    def _links(self, mask, rec) -> list[bytes]:
        """LinkRecords in (FromLID, FromPort) order: every linked port of every node."""
        f_lid, f_port, t_port, t_lid = (int.from_bytes(rec[0:2], "big"), rec[2], rec[3],
                                        int.from_bytes(rec[4:6], "big"))
        out = []
        for lid in self.base_lids:
            p = self.by_lid[lid]
            # a switch's links go by its port 0 LID, a CA port's by its own
            phs = [ph for num, ph in sorted(p.node.ports.items()) if num] if p.node.is_switch else [p]
            for ph in phs:
                num = ph.num
                if ph.remote is None:
                    continue
                to_lid = ph.remote.node.base_lid() if ph.remote.node.is_switch else ph.remote.lid
                if (mask & LR_COMP_FROM_LID and f_lid != lid or mask & LR_COMP_FROM_PORT and f_port != num
                        or mask & LR_COMP_TO_PORT and t_port != ph.remote.num
                        or mask & LR_COMP_TO_LID and t_lid != to_lid):
                    continue
                out.append(lid.to_bytes(2, "big") + bytes([num, ph.remote.num]) + to_lid.to_bytes(2, "big")
                           + bytes(2))
        return out

    # -- multicast -------------------------------------------------------------------------
    def _mcmember_query(self, mask, rec, trusted, slid: int = 0) -> list[bytes]:
        f = MCMEMBER_RECORD.decode(rec)
        out = []
        req = self.by_lid.get(slid)
        for g in self.groups.ordered():
            if req is not None and not has_pkey_of(self.subnet, req, g.rec["PKey"]):
                continue                # the requester is not in the group's partition
            if mask & MCR_COMP["MGID"] and f["MGID"] != int.from_bytes(g.mgid, "big"):
                continue
            if mask & MCR_COMP["MLID"] and f["MLID"] != g.mlid:
                continue
            if any(mask & MCR_COMP[k] and f[k] != g.rec[k] for k in ("QKey", "PKey", "TClass", "SL")):
                continue
            if mask & MCR_COMP["PortGID"]:
                gid = f["PortGID"].to_bytes(16, "big")
                if gid not in g.members:
                    continue
                js, px = g.members[gid]
                recs = [(gid, js, px)]
            elif trusted:
                recs = [(gid, js, px) for gid, (js, px) in sorted(g.members.items())]
            else:
                recs = [(bytes(16), g.rec["JoinState"], 0)]
            for gid, js, px in recs:
                if mask & MCR_COMP["JoinState"] and (f["JoinState"] & 0xF) != js:
                    continue
                if not trusted:
                    gid, js, px = bytes(16), 0, 0     # IBA p923: PortGID, JoinState, ProxyJoin zero
                out.append(g.record(gid, js, px))
        return out

    def _min_ca(self) -> tuple[int, int]:
        """(MTU, rate code) the slowest CA port allows: a new group's defaults (opensm's
        min_ca_mtu, min_ca_rate)."""
        pis = [PORT_INFO.decode(p.port_info) for p in self.subnet.ports.values()
               if not p.node.is_switch and p.port_info]
        if not pis:
            return 4, 3
        mtu = min(pi["MtuCap"] or 4 for pi in pis)
        return mtu, _RATE_CODE.get(min(_gbps(pi) for pi in pis), 3)

    def _set_or_delete(self, method: int, attr: int, mask: int, rec, slid: int, now: float):
        """(status, record) of an MCMemberRecord join/leave, a ServiceRecord register/remove or
        a GUIDInfoRecord's alias GUIDs set/removed."""
        if attr == SaAttr.GUIDINFO_RECORD:
            return self.guidinfo.set_or_delete(method, mask, rec, self.by_lid, self.log)
        if attr == SaAttr.MCMEMBER_RECORD:
            f = MCMEMBER_RECORD.decode(rec)
            requester = self.by_lid.get(slid)
            member = self.port_by_gid(f["PortGID"]) if f["PortGID"] >> 64 == GID_PREFIX else None
            if member is None or member.node.is_switch:
                return SA_STATUS_REQ_INVALID, bytes(rec[:MCMEMBER_RECORD_SIZE])     # not a port here
            try:
                if method == Method.SET:
                    g = self.groups.by_mgid.get(f["MGID"].to_bytes(16, "big"))
                    pk = g.rec["PKey"] if g is not None else f["PKey"] if mask & MCR_COMP["PKey"] else 0
                    if not has_pkey_of(self.subnet, member, pk):
                        if self.log:
                            self.log.error(f"mcmr_rcv_join_mgrp: ERR 1B14: Cannot join port 0x{member.guid:016x} "
                                           "- Port is not in partition of this MC group")
                        return SA_STATUS_REQ_INVALID, bytes(rec[:MCMEMBER_RECORD_SIZE])
                    g = self.groups.join(f, mask, *self._min_ca())
                    gid = f["PortGID"].to_bytes(16, "big")
                    js, px = g.members[gid]
                    if self.log:
                        self.log.info(f"SA: port {bytes(gid).hex()} joined MLID 0x{g.mlid:04x} "
                                      f"(join state 0x{js:x}){'' if requester is member else ' by proxy'}")
                    return 0, g.record(gid, js, px)
                g, left = self.groups.leave(f, mask)
                return 0, g.record(f["PortGID"].to_bytes(16, "big"), left, f["ProxyJoin"])
            except McastError as e:
                return e.status, bytes(rec[:MCMEMBER_RECORD_SIZE])
        if attr == SaAttr.SERVICE_RECORD:
            key_mask = SR_COMP_ID | SR_COMP_GID | SR_COMP_PKEY
            if method == Method.SET:
                if mask & key_mask != key_mask:
                    return SA_STATUS_INSUFFICIENT_COMPONENTS, bytes(rec[:SERVICE_RECORD_SIZE])
                r = bytes(rec[:SERVICE_RECORD_SIZE]).ljust(SERVICE_RECORD_SIZE, b"\0")
                self.services = [x for x in self.services if not self._same_service(x[0], r)]
                lease = SERVICE_RECORD.get(r, "ServiceLease")
                self.services.append([r, None if lease == LEASE_INFINITE else now + lease])
                return 0, r
            gone = [x for x in self.services if self._sr_match(x[0], rec, mask)]
            if not gone:
                return SA_STATUS_REQ_INVALID, bytes(rec[:SERVICE_RECORD_SIZE])
            self.services = [x for x in self.services if x not in gone]
            return 0, gone[0][0]
        return None

    @staticmethod
    def _same_service(a: bytes, b: bytes) -> bool:
        return a[0:26] == b[0:26]                       # ServiceID, ServiceGID, ServiceP_Key

    @staticmethod
    def _sr_match(r: bytes, q, mask: int) -> bool:
        q = bytes(q[:SERVICE_RECORD_SIZE]).ljust(SERVICE_RECORD_SIZE, b"\0")
        for bit, lo, hi in ((SR_COMP_ID, 0, 8), (SR_COMP_GID, 8, 24), (SR_COMP_PKEY, 24, 26),
                            (SR_COMP_LEASE, 28, 32), (SR_COMP_KEY, 32, 48),
                            (SR_COMP_NAME, SR_SERVICE_NAME, SR_SERVICE_NAME + 64)):
            if mask & bit and r[lo:hi] != q[lo:hi]:
                return False
        return True

    def expire_services(self, now: float) -> None:
        self.services = [x for x in self.services if x[1] is None or x[1] > now]

    def mcast_members_present(self) -> None:
        """Drop members whose ports are gone from the subnet (after a sweep); a member
        joined under an alias GUID or a vport's GUID stays while its port is there."""
        live = {port_gid(p) for p in self.subnet.ports.values() if not p.node.is_switch}
        live |= {gid for g in self.groups.by_mgid.values() for gid in g.members if gid not in live and
                 (p := self.port_by_gid(int.from_bytes(gid, "big"))) is not None and not p.node.is_switch}
        self.groups.drop_ports(live)

    def set_subnet(self, subnet: Subnet) -> None:
        """A new heavy sweep's view; what clients registered (groups, services) stays; the
        partitions' multicast groups are made (or dropped) as the partitions say."""
        self.subnet = subnet
        if subnet.partitions is not None:
            prtns = subnet.partitions
            # (a partition left without members went, with its groups)
            self.groups.partition_groups([g for g in prtns.mgroups if (g.pkey & 0x7FFF) in prtns.by_pkey])
        self.by_lid = subnet.port_by_lid()
        self.guidinfo.keep_ports(set(subnet.ports))
        # an LMC range answers to each of its LIDs, but a table lists a port once (base LID)
        self.base_lids = sorted(lid for lid, p in self.by_lid.items() if lid == p.lid)

    def handle(self, mad: bytearray, slid: int = 0, sqp: int = 1, now: float = 0.0) -> list:
        """Answers to one SA MAD: ``[(mad, length), ...]`` (length: what to report as
        received, for readers without RMPP; None = the whole MAD)."""
        if len(mad) < 24:
            return []
        if len(mad) < 256:
            mad.extend(bytes(256 - len(mad)))     # a short MAD: what is missing reads as zero
        method = mad[3]
        attr = int.from_bytes(mad[16:18], "big")
        try:
            hdr, rec = parse_sa(bytes(mad))
        except WireError:
            return []
        if hdr.rmpp_version and hdr.rmpp_flags & RMPP_FLAG_ACTIVE and hdr.rmpp_type != RMPP_TYPE_DATA:
            # an ACK/STOP/ABORT of one of our transfers
            self.rmpp.deliver(mad, now, slid)
            return [(m, None) for _dest, m in self.rmpp.take(now)]
        trusted = bool(hdr.sm_key) and self.sminfo is not None and hdr.sm_key == self.sminfo.sm_key
        self.expire_services(now)
        if method in (Method.SET, SaMethod.DELETE):
            done = self._set_or_delete(method, attr, hdr.comp_mask, rec, slid, now)
            if done is not None:
                status, record = done
                size = {SaAttr.MCMEMBER_RECORD: MCMEMBER_RECORD_SIZE, SaAttr.GUIDINFO_RECORD: GUIDINFO_RECORD_SIZE}.get(
                    attr, SERVICE_RECORD_SIZE)
                set_sa_response(mad, Method.GET_RESP if method == Method.SET else SaMethod.DELETE_RESP,
                                [record] if not status else [], size, status)
                mad[SA_DATA_OFFSET:SA_DATA_OFFSET + len(record)] = record    # an error echoes the request
                return [(bytes(mad), None)]
        if method not in (Method.GET, Method.SA_GET_TABLE):
            mad[3] = Method.GET_RESP if method != SaMethod.DELETE else SaMethod.DELETE_RESP
            mad[4:6] = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB.to_bytes(2, "big")
            return [(bytes(mad), None)]
        if attr == SaAttr.PKEY_TABLE_RECORD and not trusted:
            # IBA p922: P_KeyTableRecords only for a trusted requester (opensm's ERR 4608)
            if self.log:
                self.log.error("osm_pkey_rec_rcv_process: ERR 4608: Ignoring PKeyRecord request from "
                               f"non-trusted requester with SM_Key 0x{hdr.sm_key:016x}")
            set_sa_response(mad, Method.GET_RESP if method == Method.GET else Method.SA_GET_TABLE_RESP,
                            [], PKEY_TABLE_RECORD_SIZE, SA_STATUS_REQ_INVALID)
            return [(bytes(mad), None)]
        res = self.query(attr, hdr.comp_mask, rec, slid, int.from_bytes(mad[20:24], "big"), trusted,
                         get=method == Method.GET)
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
        # the request again (same SLID and TID): the agent starts over
        t = self.rmpp.send_rmpp(mad[:SA_DATA_OFFSET], data, (slid, sqp), now, peer=slid, done=self._ended)
        segs = [m for _dest, m in self.rmpp.take(now)]
        # a reader without RMPP (umad2sim) takes segment 1 alone, as long as this says:
        # the whole records in what it copies of it, which is what saquery counts
        return [(segs[0], t.first_length(words * 8, UMAD2SIM_MAD_VIEW))] + [(m, None) for m in segs[1:]]

    def tick(self, now: float) -> list:
        """Transfers past their deadline: ``[(dlid, dqp, mad), ...]`` to resend."""
        self.rmpp.tick(now)
        return [(dest[0], dest[1], m) for dest, m in self.rmpp.take(now)]

    def _ended(self, t) -> None:
        if t.aborted and self.log:
            self.log.info(f"SA: RMPP transfer to LID {t.dest[0]} given up (status {t.aborted}) "
                          f"after segment {t.last_ack} of {t.count}")
