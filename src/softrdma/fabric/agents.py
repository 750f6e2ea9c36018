"""The SMA and PMA of every node: answering SMPs and PerfMgt MADs.

Owns the attribute semantics of IBA ch. 14.2.5 (subnet management agent)
and 16.1 (performance management agent) over the model's state: what a
Get returns, what a Set changes and which status bits a bad request gets
(13.4.7: 2 = method not supported, 3 = method/attribute combination not
supported, 7 = invalid attribute or modifier value).

Both entry points take the node, the number of the port the MAD arrived
on (PortInfo/NodeInfo.LocalPortNum), method, attribute, modifier and the
request's data and return ``(status, data)`` for the response, or ``None``
when the MAD is not the agent's to answer (SMInfo and traps go to an SM
client; route.py delivers those).  Link-level effects of a Set (a port
disabled, a link retrained) are applied through route.py's callbacks so
that traps and counters stay in one place.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

from ..wire import smp
from ..wire.mad import Method
from ..wire.smp import PerfAttr, PhysState, PortState, SmpAttr, SmpStatus
from . import model
from .model import Node, Port
from .vports import HANDLERS as VPORT_HANDLERS
from ..wire.smp_virt import CAP2_IS_VIRT_SUPPORTED

_GET, _SET = int(Method.GET), int(Method.SET)        # plain ints: compared per MAD
_PORT_ATTRS = frozenset((SmpAttr.PORT_INFO, SmpAttr.PKEY_TABLE, SmpAttr.GUID_INFO, *VPORT_HANDLERS))
_NO_DATA = bytes(smp.SMP_DATA_SIZE)


# --- encoders of the model's state -------------------------------------------------------
def node_info(node: Node, arrival: int) -> bytes:
    # NodeInfo never changes for a (node, arrival port): built once -- a discovery
    # asks it of every node through every port, and encoding was 13% of the server's time
    cache = node.node_info_cache
    ni = cache.get(arrival)
    if ni is None:
        port_guid = node.guid if node.is_switch else node.ports[arrival].guid
        ni = cache[arrival] = bytes(smp.NODE_INFO.encode(
            BaseVers=1, ClassVers=1, NodeType=node.type, NumPorts=node.nports,
            SystemGuid=node.sysguid, Guid=node.guid, PortGuid=port_guid,
            PartCap=node.partition_cap, DevId=node.devid, Revision=node.revision,
            LocalPort=arrival, VendorId=node.vendid)).ljust(64, b"\0")
    return ni


# What ibsim keeps of a PortInfo it does not model: per kind of port (a
# switch's SMA port 0, a switch's external port, a CA port; cabled or not)
# the fields a Set does not change.  The rest comes from the model's state.
_SMA_PORT = dict(CapMask=model.SWITCH_CAPMASK, MkeyLeasePeriod=0xFF9, NeighborMTU=1, MtuCap=3,
                 VLStallCount=0, GuidCap=1, SubnetTimeout=31, RespTimeVal=8,
                 CapabilityMask2=model.CAPMASK2)
_SW_PORT = dict(CapMask=0, MkeyLeasePeriod=0, NeighborMTU=model.MTU_CAP, MtuCap=model.MTU_CAP,
                VLStallCount=7, GuidCap=0, SubnetTimeout=0, RespTimeVal=0, CapabilityMask2=0)
_SW_PORT_UNCABLED = dict(_SW_PORT, LocalPhysErr=4)
_CA_PORT = dict(CapMask=model.CA_CAPMASK, MkeyLeasePeriod=0xFF9, NeighborMTU=model.MTU_CAP,
                MtuCap=model.MTU_CAP, VLStallCount=7, GuidCap=model.GUID_CAP, SubnetTimeout=31,
                RespTimeVal=0, CapabilityMask2=model.CAPMASK2)
_CA_PORT_UNCABLED = dict(_CA_PORT, CapMask=model.CA_CAPMASK_UNCABLED)


def _port_kind(node: Node, p: Port) -> dict:
    if node.is_switch:
        return _SMA_PORT if p.num == 0 else _SW_PORT if p.remote is not None \
            else _SW_PORT_UNCABLED
    return _CA_PORT if p.remote is not None else _CA_PORT_UNCABLED


class PortInfoState(NamedTuple):
    """Every field of a port that its PortInfo is made of -- the only way
    ``build_port_info`` sees the port, and the PortInfo cache's key: a field
    added here is in both, one left out cannot be read."""
    gid_prefix: int
    lid: int
    smlid: int
    width_en: int
    width_act: int
    state: int
    phys: int
    lmc: int
    speed_act: int
    speed_en: int
    vl_cap: int
    hoqlife: int
    oper_vls: int
    part_enforce: int
    speed_ext_act: int
    speed_ext_en: int
    has_sm: bool
    vports: object              # a VPortTable or None (only whether there is one shows)
    rereg_sup: bool


_port_info_state = operator.attrgetter(*PortInfoState._fields)     # port -> a plain tuple
_PORT_INFO_CACHE: dict[tuple, bytes] = {}
_PORT_INFO_CACHE_MAX = 1 << 16


def port_info(node: Node, p: Port, arrival: int) -> bytes:
    """PortInfo as the SMA answers it: built once per distinct set of the fields it
    is made of (a sweep asks the same port for it several times; encoding costs 10x
    the look-up)."""
    kind = _port_kind(node, p)
    state = _port_info_state(p)
    key = (id(kind), arrival, state)
    out = _PORT_INFO_CACHE.get(key)
    if out is None:
        if len(_PORT_INFO_CACHE) >= _PORT_INFO_CACHE_MAX:
            _PORT_INFO_CACHE.clear()
        out = _PORT_INFO_CACHE[key] = build_port_info(kind, PortInfoState._make(state), arrival)
    return out


def build_port_info(kind: dict, p: PortInfoState, arrival: int) -> bytes:
    """PortInfo of a port of the given kind (``_port_kind``) in state ``p``
    (``PortInfoState``), arriving by ``arrival``."""
    ext = p.speed_ext_act
    f = dict(kind)
    f.update(
        GidPrefix=p.gid_prefix, Lid=p.lid, SMLid=p.smlid, LocalPort=arrival,
        LinkWidthEnabled=p.width_en, LinkWidthSupported=model.WIDTH_SUPPORTED,
        LinkWidthActive=p.width_act, LinkSpeedSupported=model.SPEED_SUPPORTED,
        LinkState=p.state, PhysLinkState=p.phys, LinkDownDefState=PhysState.POLLING,
        LMC=p.lmc, LinkSpeedActive=p.speed_act, LinkSpeedEnabled=p.speed_en,
        VLCap=p.vl_cap, VLArbHighCap=model.VLARB_CAP, VLArbLowCap=model.VLARB_CAP,
        HoqLife=p.hoqlife, OperVLs=p.oper_vls,
        PartEnforceInb=p.part_enforce & model.PART_ENFORCE_IN,
        PartEnforceOutb=(p.part_enforce & model.PART_ENFORCE_OUT) >> 1,
        # the extended speeds show only while the link runs at one (ibsim)
        LinkSpeedExtActive=ext, LinkSpeedExtEnabled=p.speed_ext_en if ext else 0,
        LinkSpeedExtSupported=(model.SPEED_EXT_SUPPORTED | (p.speed_ext_en & 8)) if ext else 0)
    if p.has_sm:
        f["CapMask"] = f["CapMask"] | smp.CAP_IS_SM
    if p.vports is not None:
        f["CapabilityMask2"] = f["CapabilityMask2"] | CAP2_IS_VIRT_SUPPORTED
    if p.rereg_sup:
        f["CapMask"] = f["CapMask"] | smp.CAP_IS_CLIENT_REREGISTRATION_SUPPORTED
    return bytes(smp.PORT_INFO.encode(f))


_PORT_INFO_SETS: dict[bytes, dict] = {}
# small: an SM sends its Sets switch by switch, the same data to a switch's ports in a
# row, and each decoded Set is a dict of ~50 fields (65,536 of them were 13 MB more
# peak RSS in a 2048-host sweep)
_PORT_INFO_SETS_MAX = 1024


def port_info_fields(data) -> dict:
    """A PortInfo Set's fields, decoded once per distinct 64 bytes (an SM's sweep
    sends the same Set to many ports: decoding was a third of a Set's cost).
    The dict is shared: read it, do not change it."""
    key = bytes(data[:smp.PORT_INFO.size])
    f = _PORT_INFO_SETS.get(key)
    if f is None:
        if len(_PORT_INFO_SETS) >= _PORT_INFO_SETS_MAX:
            _PORT_INFO_SETS.clear()
        f = _PORT_INFO_SETS[key] = smp.PORT_INFO.decode(key)
    return f


def switch_info(node: Node) -> bytes:
    return bytes(smp.SWITCH_INFO.encode(
        LinearFdbCap=model.LINEAR_FDB_CAP, McastFdbCap=model.MCAST_FDB_CAP,
        LinearFdbTop=node.lft_top, DefMcastPrimPort=0, DefMcastNotPrimPort=0,
        LifeTime=node.lifetime, StateChange=node.state_change,
        PartEnforceCap=model.SWITCH_PART_ENFORCE_CAP, EnhancedPort0=int(node.enhanced_sp0),
        FilterRawInbound=1, FilterRawOutbound=1, MulticastFDBTop=node.mft_top))


# --- the SMA -----------------------------------------------------------------------------
class Sma:
    """The subnet management agents of a fabric.  ``link`` is the object that
    carries out link-level changes (route.Router): ``disable(port)``,
    ``enable(port)``, ``retrain(port)``."""

    def __init__(self, link):
        self.link = link
        self._handlers = {
            SmpAttr.NODE_DESC: self._node_desc, SmpAttr.NODE_INFO: self._node_info,
            SmpAttr.SWITCH_INFO: self._switch_info, SmpAttr.PORT_INFO: self._port_info,
            SmpAttr.PKEY_TABLE: self._pkey_table, SmpAttr.SL_TO_VL_TABLE: self._sl2vl,
            SmpAttr.VL_ARB_TABLE: self._vlarb, SmpAttr.GUID_INFO: self._guid_info,
            SmpAttr.LINEAR_FWD_TABLE: self._lft, SmpAttr.MCAST_FWD_TABLE: self._mft,
            **VPORT_HANDLERS,                   # a CA port's virtual ports (fabric.vports)
        }

    def handles(self, method: int, attr: int) -> bool:
        """SMInfo, Notice and every method but Get/Set belong to an SM client."""
        return attr != SmpAttr.SM_INFO and method in (_GET, _SET) and attr != SmpAttr.NOTICE

    def process(self, node: Node, arrival: int, method: int, attr: int, mod: int, data):
        fn = self._handlers.get(attr)
        if fn is None:
            return SmpStatus.ATTR_UNSUPPORTED, bytes(data[:smp.SMP_DATA_SIZE])
        out = fn(node, arrival, method, mod, data)
        if method == _SET:
            # any Set may change a route; these also what a device attached to a port sees
            changed = getattr(self.link, "node_changed", None)
            if changed is not None:
                changed(node, attr in _PORT_ATTRS)
        return out

    # each handler: (status, 64 bytes)
    @staticmethod
    def _read_only(method, make):
        return (0 if method == _GET else SmpStatus.ATTR_UNSUPPORTED), make()

    def _node_desc(self, node, arrival, method, mod, data):
        return self._read_only(method, lambda: smp.encode_node_desc(node.desc))

    def _node_info(self, node, arrival, method, mod, data):
        # _read_only, inline: a discovery's most frequent Get
        return (0 if method == _GET else SmpStatus.ATTR_UNSUPPORTED), node_info(node, arrival)

    def _switch_info(self, node, arrival, method, mod, data):
        if not node.is_switch:
            return SmpStatus.ATTR_UNSUPPORTED, bytes(data)
        if method == _SET:
            f = smp.SWITCH_INFO.decode(data)
            if f["LinearFdbTop"] >= model.LINEAR_FDB_CAP or \
                    (f["MulticastFDBTop"] and not model.MCAST_LID_BASE - 1 <= f["MulticastFDBTop"]
                     < model.MCAST_LID_BASE + model.MCAST_FDB_CAP):
                return SmpStatus.BAD_PARAM, switch_info(node).ljust(64, b"\0")
            node.lft_top = f["LinearFdbTop"]
            node.lifetime = f["LifeTime"]
            node.mft_top = f["MulticastFDBTop"]
            if f["StateChange"]:                 # write 1 to clear (IBA 14.2.5.4)
                node.state_change = 0
        return 0, switch_info(node).ljust(64, b"\0")

    def _port_info(self, node, arrival, method, mod, data):
        num = mod & 0xFF
        if num == 0 and not node.is_switch:       # CA: modifier 0 means this port
            num = arrival
        if num > node.nports or (num == 0 and not node.is_switch):
            return SmpStatus.BAD_PARAM, bytes(data)
        p = node.ports[num]
        if method == _SET:
            if not node.is_switch and num != arrival:
                return SmpStatus.BAD_PARAM, port_info(node, p, arrival)
            st = self._set_port_info(node, p, port_info_fields(data))
            return st, port_info(node, p, arrival)
        return 0, port_info(node, p, arrival)

    def _set_port_info(self, node: Node, p: Port, f: dict) -> int:
        """ibsim's PortInfo Set: LID, SM LID, LMC, HOQ life, OperVLs, subnet
        prefix, the physical and the logical state and -- with no state change
        asked -- the enabled width and speeds; the other fields keep their
        values (a Set does not change them on ibsim either)."""
        # validate everything before changing anything
        state, phys = f["LinkState"], f["PhysLinkState"]
        if phys not in (0, PhysState.POLLING, PhysState.DISABLED):
            return SmpStatus.BAD_PARAM
        if state == PortState.INIT or state > PortState.ACTIVE:
            return SmpStatus.BAD_PARAM
        sma_port = node.is_switch and p.num == 0
        if state in (PortState.ARMED, PortState.ACTIVE) and not sma_port:
            if p.phys != PhysState.LINK_UP or p.state == PortState.DOWN:
                return SmpStatus.BAD_PARAM
            want_from = {PortState.ARMED: (PortState.INIT, PortState.ARMED),
                         PortState.ACTIVE: (PortState.ARMED, PortState.ACTIVE)}[state]
            if p.state not in want_from:
                return SmpStatus.BAD_PARAM
            r = p.remote
            if r is None or r.state == PortState.DOWN:
                return SmpStatus.BAD_PARAM
        vls = f["OperVLs"]
        if vls > f["VLCap"]:
            return SmpStatus.BAD_PARAM
        lid = f["Lid"]
        if (p.num == 0 or not node.is_switch) and lid >= model.MCAST_LID_BASE:
            return SmpStatus.BAD_PARAM
        # apply: LID, LMC and SM LID on every port -- on a switch's external ports the
        # IBA reserves them, and ibsim keeps and reports what a Set wrote there; they
        # route nothing (a switch's LIDs are its port 0's)
        p.lid = lid
        # a base switch port 0 has one LID; an enhanced one takes an LMC (IBA 14.2.5.6)
        p.lmc = f["LMC"] if not node.is_switch or p.num or node.enhanced_sp0 else 0
        p.smlid = f["SMLid"]
        if p.num == 0 or not node.is_switch:
            # kept, not reported (ibsim's PortInfo shows M_Key 0 and its own defaults)
            p.smsl = f["SMSL"]
            p.mkey = f["Mkey"]
            p.mkey_lease = f["MkeyLeasePeriod"]
            p.protect = f["ProtectBits"]
            p.subnet_timeout = f["SubnetTimeout"]
            if f["ClientReregister"]:        # pending until the attached device has it
                p.client_rereg = 1
        p.gid_prefix = f["GidPrefix"]
        p.oper_vls = vls
        if node.is_switch and p.num:               # what the switch port checks (IBA 14.2.5.6)
            p.part_enforce = (f["PartEnforceInb"] and model.PART_ENFORCE_IN) | \
                (f["PartEnforceOutb"] and model.PART_ENFORCE_OUT)
        p.vl_high_limit = f["VLHighLimit"]
        p.hoqlife = f["HoqLife"]
        p.vl_stall = f["VLStallCount"]
        if f["NeighborMTU"]:
            p.neighbor_mtu = f["NeighborMTU"]
        if f["LinkDownDefState"]:
            p.link_down_def = f["LinkDownDefState"]
        if phys == PhysState.DISABLED:
            self.link.disable(p)
        elif phys == PhysState.POLLING and p.phys == PhysState.DISABLED:
            self.link.enable(p)
        if sma_port:
            return 0                               # port 0 stays Active
        if state == PortState.DOWN:
            self.link.retrain(p)
        elif state in (PortState.ARMED, PortState.ACTIVE):
            p.state = state
        elif p.remote is not None:
            self._set_link_rates(p, f)
        return 0

    @staticmethod
    def _set_link_rates(p: Port, f: dict) -> None:
        """Enabled width/speed/extended speed: a valid choice retrains both
        ends at the widest / fastest it names (ibsim's rule)."""
        r = p.remote
        speed = f["LinkSpeedEnabled"]
        act = {1: 1, 3: 2, 5: 4, 7: 4}.get(speed)
        if act:
            p.speed_act = r.speed_act = act
            p.speed_en = speed
        ext = f["LinkSpeedExtEnabled"]
        if 1 <= ext <= 15:
            act = 8 if ext & 8 else 4 if ext & 4 else 2 if ext & 2 else 1
            p.speed_ext_act = r.speed_ext_act = act
            p.speed_ext_en = ext
        width = f["LinkWidthEnabled"]
        if 1 <= width <= 31:
            act = next(c for c in (8, 4, 2, 16, 1) if width & c)   # 12x 8x 4x 2x 1x
            p.width_act = r.width_act = act
            p.width_en = width

    def _table_port(self, node: Node, arrival: int, num: int):
        if not node.is_switch:
            return node.ports[arrival]
        return node.ports[num] if num <= node.nports else None

    def _pkey_table(self, node, arrival, method, mod, data):
        block = mod & 0xFFFF
        p = self._table_port(node, arrival, mod >> 16)
        if p is None:
            return SmpStatus.BAD_PARAM, bytes(data)
        cap = node.pkey_cap(p)
        if block * smp.PKEYS_PER_BLOCK >= cap:
            return SmpStatus.BAD_PARAM, bytes(data)
        lo = block * smp.PKEYS_PER_BLOCK
        n = min(smp.PKEYS_PER_BLOCK, cap - lo)
        if method == _SET:
            if p.pkeys is None:
                p.pkeys = [model.DEFAULT_PKEY] + [0] * (cap - 1)
            p.pkeys[lo:lo + n] = smp.decode_pkey_table(data)[:n]
        table = p.pkeys if p.pkeys is not None else [model.DEFAULT_PKEY]
        return 0, smp.encode_pkey_table(table[lo:lo + n])

    def _sl2vl(self, node, arrival, method, mod, data):
        if node.is_switch:
            inp, out = (mod >> 8) & 0xFF, mod & 0xFF
            if inp > node.nports or out > node.nports:
                return SmpStatus.BAD_PARAM, bytes(data)
            key = (inp, out)
        else:
            key = (0, arrival)
        if method == _SET:
            if node.sl2vl is None:
                node.sl2vl = {}
            node.sl2vl[key] = bytes(data[:8])
        table = (node.sl2vl or {}).get(key, model.DEFAULT_SL2VL)
        return 0, table.ljust(64, b"\0")

    def _vlarb(self, node, arrival, method, mod, data):
        block = mod >> 16
        p = self._table_port(node, arrival, mod & 0xFFFF)
        # blocks: 1 low 0-31, 2 low 32-63, 3 high 0-31, 4 high 32-63; caps are 8 entries
        if p is None or block not in (1, 3):
            return SmpStatus.BAD_PARAM, bytes(data)
        if method == _SET:
            if p.vlarb is None:
                p.vlarb = {}
            p.vlarb[block] = bytes(data[:2 * model.VLARB_CAP]).ljust(64, b"\0")
        table = (p.vlarb or {}).get(block)
        if table is None:
            table = default_vlarb(block == 3)
        return 0, table

    def _guid_info(self, node, arrival, method, mod, data):
        p = node.ports[0] if node.is_switch else node.ports[arrival]
        block = mod & 0xFF
        if block * smp.GUIDS_PER_BLOCK >= model.GUID_CAP:
            return SmpStatus.BAD_PARAM, bytes(data)
        lo = block * smp.GUIDS_PER_BLOCK
        if method == _SET:
            if p.guids is None:
                p.guids = {}
            for i, g in enumerate(smp.decode_guid_info(data)):
                if lo + i:                      # index 0 is the port GUID: read-only
                    p.guids[lo + i] = g
        guids = [(p.guid if lo + i == 0 else (p.guids or {}).get(lo + i, 0))
                 for i in range(smp.GUIDS_PER_BLOCK)]
        return 0, smp.encode_guid_info(guids)

    def _lft(self, node, arrival, method, mod, data):
        if not node.is_switch:
            return SmpStatus.ATTR_UNSUPPORTED, bytes(data)
        block = mod
        lo = block * smp.LFT_BLOCK
        if lo >= model.LINEAR_FDB_CAP:
            return SmpStatus.BAD_PARAM, bytes(data)
        lft = node.lft
        if method == _SET:
            if len(lft) < lo + smp.LFT_BLOCK:
                lft.extend(b"\xff" * (lo + smp.LFT_BLOCK - len(lft)))
            lft[lo:lo + smp.LFT_BLOCK] = bytes(data[:smp.LFT_BLOCK])
        out = bytes(lft[lo:lo + smp.LFT_BLOCK])
        return 0, out.ljust(smp.LFT_BLOCK, b"\xff")

    def _mft(self, node, arrival, method, mod, data):
        if not node.is_switch:
            return SmpStatus.ATTR_UNSUPPORTED, bytes(data)
        block, pos = smp.split_mft_attr_mod(mod)
        if block * smp.MFT_BLOCK >= model.MCAST_FDB_CAP or pos * 16 > node.nports:
            return SmpStatus.BAD_PARAM, bytes(data)
        lo, shift = block * smp.MFT_BLOCK, pos * 16
        if method == _SET:
            if node.mft is None:
                node.mft = {}
            for i, m in enumerate(smp.decode_mft(data)):
                old = node.mft.get(lo + i, 0)
                new = (old & ~(0xFFFF << shift)) | (m << shift)
                if new:
                    node.mft[lo + i] = new
                else:
                    node.mft.pop(lo + i, None)
        mft = node.mft or {}
        return 0, smp.encode_mft([(mft.get(lo + i, 0) >> shift) & 0xFFFF
                                  for i in range(smp.MFT_BLOCK)])


def default_vlarb(high: bool) -> bytes:
    """ibsim's defaults: high VL0 weight 4; low VL1..7 weight 4."""
    if high:
        entries = [(0, 4)] + [(vl, 0) for vl in range(1, model.VLARB_CAP)]
    else:
        entries = [(0, 0)] + [(vl, 4) for vl in range(1, model.VLARB_CAP)]
    return smp.encode_vlarb(entries)


# --- the PMA -------------------------------------------------------------------------------
_PC_FIELDS = (  # PortCounters field, model slot, width in bits
    ("SymbolErrorCounter", model.PC_SYMBOL_ERRORS, 16),
    ("LinkDownedCounter", model.PC_LINK_DOWNED, 8),
    ("PortRcvErrors", model.PC_RCV_ERRORS, 16),
    ("PortRcvSwitchRelayErrors", model.PC_RCV_SW_RELAY_ERRORS, 16),
    ("PortXmitDiscards", model.PC_XMIT_DISCARDS, 16),
    ("PortXmitConstraintErrors", model.PC_XMIT_CONSTRAINT, 8),
    ("PortRcvConstraintErrors", model.PC_RCV_CONSTRAINT, 8),
    ("VL15Dropped", model.PC_VL15_DROPPED, 16),
    ("PortXmitData", model.PC_XMIT_DATA, 32), ("PortRcvData", model.PC_RCV_DATA, 32),
    ("PortXmitPkts", model.PC_XMIT_PKTS, 32), ("PortRcvPkts", model.PC_RCV_PKTS, 32),
    ("PortXmitWait", model.PC_XMIT_WAIT, 32),
)
_PC_SLOT = {name: slot for name, slot, _ in _PC_FIELDS}
_EXT_SLOTS = {"PortXmitData": model.PC_XMIT_DATA, "PortRcvData": model.PC_RCV_DATA,
              "PortXmitPkts": model.PC_XMIT_PKTS, "PortRcvPkts": model.PC_RCV_PKTS,
              "PortMulticastXmitPkts": model.PC_MCAST_XMIT,
              "PortMulticastRcvPkts": model.PC_MCAST_RCV}


class Pma:
    """The performance management agents: ClassPortInfo, PortCounters,
    PortCountersExtended, over the counters route.py keeps."""

    def process(self, node: Node, arrival: int, method: int, attr: int, mod: int, data):
        if attr == PerfAttr.CLASS_PORT_INFO:
            cap = smp.PM_EXT_WIDTH_SUPPORTED | smp.PM_PC_XMIT_WAIT_SUP
            if node.is_switch:
                cap |= smp.PM_ALL_PORT_SELECT
            out = smp.CLASS_PORT_INFO.encode(BaseVersion=1, ClassVersion=1, CapabilityMask=cap,
                                             RespTimeVal=0x12)
            return (0 if method == _GET else SmpStatus.ATTR_UNSUPPORTED), bytes(out)
        if attr not in (PerfAttr.PORT_COUNTERS, PerfAttr.PORT_COUNTERS_EXT):
            return SmpStatus.ATTR_UNSUPPORTED, bytes(data)
        if method not in (_GET, _SET):
            return SmpStatus.METHOD_UNSUPPORTED, bytes(data)
        ext = attr == PerfAttr.PORT_COUNTERS_EXT
        lay = smp.PORT_COUNTERS_EXT if ext else smp.PORT_COUNTERS
        f = lay.decode(data)
        sel = f["PortSelect"]
        if sel == 0xFF and node.is_switch:
            ports = node.external_ports()
        elif sel == 0 and not node.is_switch:
            ports = [node.ports[arrival]]
        elif sel <= node.nports:
            ports = [node.ports[sel]]
        else:
            return SmpStatus.BAD_PARAM, bytes(data)
        if method == _SET:
            names = (smp.PORT_COUNTERS_EXT_SELECT if ext else smp.PORT_COUNTERS_SELECT)
            mask = f["CounterSelect"]
            slots = {(_EXT_SLOTS if ext else _PC_SLOT).get(n) for i, n in enumerate(names)
                     if mask & (1 << i)}
            if not ext and f["CounterSelect2"] & 1:
                slots.add(model.PC_XMIT_WAIT)
            if ext and mask & 0x30:               # unicast = all pkts here
                slots |= {model.PC_XMIT_PKTS, model.PC_RCV_PKTS}
            slots.discard(None)
            for p in ports:
                if p.pc is not None:
                    for s in slots:
                        p.pc[s] = 0
        tot = [0] * model.PC_COUNT
        for p in ports:
            if p.pc is not None:
                for i, v in enumerate(p.pc):
                    tot[i] += v
        if ext:
            vals = {n: min(tot[s], (1 << 64) - 1) for n, s in _EXT_SLOTS.items()}
            vals["PortUnicastXmitPkts"] = vals["PortXmitPkts"] - vals["PortMulticastXmitPkts"]
            vals["PortUnicastRcvPkts"] = vals["PortRcvPkts"] - vals["PortMulticastRcvPkts"]
        else:
            vals = {n: min(tot[s], (1 << w) - 1) for n, s, w in _PC_FIELDS}
        vals["PortSelect"] = sel
        vals["CounterSelect"] = f["CounterSelect"]
        return 0, bytes(lay.encode(vals))
