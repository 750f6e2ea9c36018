"""A CA port's attributes as the fabric describes them, on the device's side.

The fabric pushes each change of a CA port's model as PORT_INFO
(``wire.fabriclink``: NodeInfo, PortInfo, the first GUIDInfo block, the
P_Key table).  This module owns what that message means for the port of
an IB device: ``PortInfo`` (the message decoded), the IBA speed, width and
rate tables, and ``PortInfoMirror``, the part of ``device.ib.IbPort`` that
mirrors it -- state and physical state, LID/LMC, SM LID and SL, GUIDs and
the GID table, P_Keys, MTU, capability mask -- into ``ibv_query_port``'s
attributes and turns each change into the port events the kernel sends
(PORT_ACTIVE / PORT_ERR, LID_CHANGE, SM_CHANGE, PKEY_CHANGE, GID_CHANGE,
CLIENT_REREGISTER); and the CapabilityMask bits the port holds (IsSM while
an issm file is open, IsClientReregistrationSupported), told to the fabric
whose SMA owns the port's PortInfo.
"""

from __future__ import annotations

from ..enums import (IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE, IBV_EVENT_LID_CHANGE,
                     IBV_EVENT_PKEY_CHANGE, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR, IBV_EVENT_SM_CHANGE)
from ..wire import fabriclink as fl
from ..wire import smp

LINK_LAYER_IB = 1                    # IBV_LINK_LAYER_INFINIBAND

DOWN, INIT, ARMED, ACTIVE = 1, 2, 3, 4
POLLING, LINK_UP = 2, 5
# ibv_port_attr.active_speed (IBV_SPEED_*) from LinkSpeedActive / LinkSpeedExtActive
_SPEED = {1: 1, 2: 2, 4: 4}
_SPEED_EXT = {1: 16, 2: 32, 4: 64, 8: 128}
_SPEED_NAME = {1: "SDR", 2: "DDR", 4: "QDR", 16: "FDR", 32: "EDR", 64: "HDR", 128: "NDR"}
LANE_MBPS = {"SDR": 2500, "DDR": 5000, "QDR": 10000, "FDR": 14062, "EDR": 25781, "HDR": 53125, "NDR": 106250}
# the port's own counters (PortCounters names; ``ib_counters``)
XMIT_DISCARDS, RCV_ERRORS, PKEY_VIOLATIONS, XMIT_PACKETS, XMIT_BYTES = range(5)
IB_COUNTERS = ("port_xmit_discards", "port_rcv_errors", "pkey_violations", "xmit_packets", "xmit_bytes")


def pkey_accepts(table) -> frozenset:
    """The BTH P_Keys a port with P_Key table ``table`` takes (IBA 10.9.3):
    same low 15 bits as an entry, and the packet's or the entry's
    membership bit full; an entry with zero low bits is invalid."""
    ok = set()
    for k in table:
        if k & 0x7FFF == 0:
            continue
        ok.add(k | 0x8000)                      # a full member's packets: any entry
        if k & 0x8000:
            ok.add(k & 0x7FFF)                  # a limited member's: only a full entry
    return frozenset(ok)


class PortInfo:
    """A CA port as the fabric last described it (PORT_INFO, decoded)."""

    def __init__(self, msg: fl.PortInfoMsg | None = None):
        if msg is None:
            self.node = {}
            self.pi = {}
            self.guids = ()
            self.pkeys = ()
            return
        self.node = smp.NODE_INFO.decode(msg.node_info)
        self.pi = smp.PORT_INFO.decode(msg.port_info)
        self.guids = smp.decode_guid_info(msg.guid_info)
        self.pkeys = tuple(msg.pkeys)


class PortInfoMirror:
    """``IbPort``'s attributes from the fabric's PORT_INFO (a mixin: the port
    has ``info``, ``gid_table``, ``pkeys``, ``ib_cnt``, ``link``, ``hca``,
    ``route_cache``, ``cap_held`` and ``port_events``; see the module)."""

    # -- the port's attributes
    @property
    def node_guid(self) -> bytes:
        return int(self.info.node.get("Guid", 0)).to_bytes(8, "big")

    @property
    def sys_image_guid(self) -> bytes:
        return int(self.info.node.get("SystemGuid", 0)).to_bytes(8, "big")

    @property
    def port_guid(self) -> bytes:
        g = self.info.guids[0] if self.info.guids else self.info.node.get("PortGuid", 0)
        return int(g).to_bytes(8, "big")

    @property
    def subnet_prefix(self) -> bytes:
        return int(self.info.pi.get("GidPrefix", 0)).to_bytes(8, "big")

    def gid(self, index: int) -> bytes | None:
        return self.gid_table.gid(index)

    @property
    def gids(self) -> list[bytes]:
        """GIDs by index up to the last used slot (free slots: zero GID)."""
        return self.gid_table.gids()

    @property
    def active_speed(self) -> int:
        pi = self.info.pi
        ext = pi.get("LinkSpeedExtActive", 0)
        if ext in _SPEED_EXT:
            return _SPEED_EXT[ext]
        return _SPEED.get(pi.get("LinkSpeedActive", 1), 1)

    @property
    def active_width(self) -> int:
        w = self.info.pi.get("LinkWidthActive", 1)
        return w if w in smp.LINK_WIDTH else 1

    @property
    def rate(self) -> tuple[str, int]:
        """(speed name, lanes): sysfs ``rate`` and ibstat's Rate."""
        return _SPEED_NAME[self.active_speed], smp.LINK_WIDTH[self.active_width]

    @property
    def cap_mask(self) -> int:
        return self.info.pi.get("CapMask", 0)

    @property
    def ib_counters(self) -> dict[str, int]:
        return dict(zip(IB_COUNTERS, self.ib_cnt))

    def port_attrs(self) -> dict:
        pi = self.info.pi
        return {"state": self.state, "max_mtu": self.max_mtu, "active_mtu": self.active_mtu,
                "gid_tbl_len": self.gid_table.capacity, "port_cap_flags": self.cap_mask,
                "max_msg_sz": self.hca.caps.max_msg_sz, "pkey_tbl_len": len(self.pkey_table),
                "lid": self.lid, "sm_lid": self.sm_lid, "lmc": self.lmc,
                "max_vl_num": {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}.get(pi.get("VLCap", 1), 1),
                "sm_sl": self.sm_sl, "subnet_timeout": pi.get("SubnetTimeout", 0),
                "init_type_reply": pi.get("InitReply", 0), "active_width": self.active_width,
                "active_speed": self.active_speed, "phys_state": self.phys_state,
                "link_layer": LINK_LAYER_IB, "bad_pkey_cntr": self.ib_cnt[PKEY_VIOLATIONS] & 0xFFFF,
                "qkey_viol_cntr": pi.get("QkeyViolations", 0)}

    # -- the fabric's word
    def apply(self, msg: fl.PortInfoMsg) -> list[int]:
        """Mirror a PORT_INFO; the port events it means (also appended to
        ``port_events``)."""
        new = PortInfo(msg)
        self.raw_info = msg
        pi = new.pi
        old_state, old_lid, old_sm = self.state, self.lid, (self.sm_lid, self.sm_sl)
        old_pkeys, old_gids = self.pkeys, self.gids
        first = not self.seen_info
        self.info = new
        self.seen_info = True
        self.state = pi["LinkState"] or DOWN
        self.phys_state = pi["PhysLinkState"] or POLLING
        self.lid, self.lmc = pi["Lid"], pi["LMC"]
        self.lmc_mask = (1 << self.lmc) - 1
        self.sm_lid, self.sm_sl = pi["SMLid"], pi["SMSL"]
        self.pkeys = new.pkeys or (0xFFFF,)
        self.accepts_pkey = pkey_accepts(self.pkeys)
        prefix = self.subnet_prefix
        self.gid_table.assign([prefix + int(g).to_bytes(8, "big") if g else bytes(16) for g in new.guids])
        self._set_mtu(pi)
        self.route_cache.clear()
        evs = []
        if old_state != ACTIVE and self.state == ACTIVE:
            evs.append(IBV_EVENT_PORT_ACTIVE)
        elif old_state == ACTIVE and self.state != ACTIVE:
            evs.append(IBV_EVENT_PORT_ERR)
        if not first:
            if self.lid != old_lid:
                evs.append(IBV_EVENT_LID_CHANGE)
            if (self.sm_lid, self.sm_sl) != old_sm:
                evs.append(IBV_EVENT_SM_CHANGE)
            if self.pkeys != old_pkeys:
                evs.append(IBV_EVENT_PKEY_CHANGE)
            if self.gids != old_gids:
                evs.append(IBV_EVENT_GID_CHANGE)
            if pi.get("ClientReregister"):
                evs.append(IBV_EVENT_CLIENT_REREGISTER)
        self.port_events.extend(evs)
        return evs

    def _set_mtu(self, pi: dict) -> None:
        cap = pi.get("MtuCap") or 5
        self.max_mtu = cap
        self.active_mtu = min(pi.get("NeighborMTU") or cap, cap)
        # the table has PartitionCap entries (NodeInfo); those the SM left unset are 0
        n = max(self.info.node.get("PartCap", 0), len(self.pkeys))
        self.pkey_table = tuple(self.pkeys) + (0,) * (n - len(self.pkeys))
        caps = getattr(self, "caps", None)
        if caps is not None and self.num == 1:    # the device's caps: its first port's
            caps.max_mtu, caps.active_mtu, caps.pkey_table = self.max_mtu, self.active_mtu, self.pkey_table

    def link_lost(self) -> list[int]:
        """The fabric connection ended: the port is Down (Polling: a port
        with no peer), until the fabric is back."""
        evs = [IBV_EVENT_PORT_ERR] if self.state == ACTIVE else []
        self.state, self.phys_state = DOWN, POLLING
        self.route_cache.clear()
        self.port_events.extend(evs)
        return evs

    def set_port_cap(self, set_mask: int, clear_mask: int) -> None:
        """ib_modify_port's set/clear of CapabilityMask bits (IsSM while an
        issm file is open): told to the fabric, whose SMA owns the port's
        PortInfo; it answers with PORT_INFO.  Held across reconnects."""
        self.cap_held = (self.cap_held | set_mask) & ~clear_mask
        if self.link.connected:
            self.link.send_control(fl.pack_port_cap(set_mask, clear_mask))

    def attached(self) -> None:
        """A new fabric connection: the bits this port holds, again."""
        if self.cap_held:
            self.link.send_control(fl.pack_port_cap(self.cap_held, 0))


__all__ = ["ACTIVE", "ARMED", "DOWN", "IB_COUNTERS", "INIT", "LANE_MBPS", "LINK_LAYER_IB", "LINK_UP", "POLLING",
           "PortInfo", "PortInfoMirror", "pkey_accepts"]
