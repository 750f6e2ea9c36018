"""libibmad's text for attribute fields (libibmad/dump.c, fields.c):
``Name:....value`` with the value at column 33, and the value formats
(node types, link widths and speeds, port states, MTUs, VL caps, the
capability-mask bit names).  The values come from ``softrdma.wire.smp``'s
layouts; only the printing lives here.
"""

from __future__ import annotations

from ...wire import smp


def field(name: str, val) -> str:
    """mad_dump_field(): name, ':', dots to column 33, the value."""
    return f"{name}:{'.' * max(0, 32 - len(name))}{val}\n"


NODE_TYPE = {1: "Channel Adapter", 2: "Switch", 3: "Router"}
PORT_STATE = {0: "NoChange", 1: "Down", 2: "Initialize", 3: "Armed", 4: "Active"}
PHYS_STATE = {0: "NoChange", 1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
              5: "LinkUp", 6: "LinkErrorRecovery", 7: "PhyTest"}
LINKDOWN_DEF = {0: "NoChange", 1: "Sleep", 2: "Polling"}
MTU = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
VLCAP = {1: "VL0", 2: "VL0-1", 3: "VL0-3", 4: "VL0-7", 5: "VL0-14"}
WIDTH = {1: "1X", 2: "4X", 4: "8X", 8: "12X", 16: "2X"}
SPEED = {1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps"}
SPEED_EXT = {0: "No Extended Speed", 1: "14.0625 Gbps", 2: "25.78125 Gbps", 4: "53.125 Gbps",
             8: "106.25 Gbps", 32: "212.5 Gbps"}
CAPMASK_BITS = {
    1: "IsSM", 2: "IsNoticeSupported", 3: "IsTrapSupported", 4: "IsOptionalIPDSupported",
    5: "IsAutomaticMigrationSupported", 6: "IsSLMappingSupported", 7: "IsMKeyNVRAM",
    8: "IsPKeyNVRAM", 9: "IsLedInfoSupported", 10: "IsSMdisabled",
    11: "IsSystemImageGUIDsupported", 12: "IsPkeySwitchExternalPortTrapSupported",
    13: "IsCableInfoSupported", 14: "IsExtendedSpeedsSupported", 15: "IsCapabilityMask2Supported",
    16: "IsCommunicatonManagementSupported", 17: "IsSNMPTunnelingSupported",
    18: "IsReinitSupported", 19: "IsDeviceManagementSupported", 20: "IsVendorClassSupported",
    21: "IsDRNoticeSupported", 22: "IsCapabilityMaskNoticeSupported",
    23: "IsBootManagementSupported", 24: "IsLinkRoundTripLatencySupported",
    25: "IsClientRegistrationSupported", 26: "IsOtherLocalChangesNoticeSupported",
    27: "IsLinkSpeedWidthPairsTableSupported", 28: "IsVendorSpecificMadsTableSupported",
    29: "IsMcastPkeyTrapSuppressionSupported", 30: "IsMulticastFDBTopSupported",
    31: "IsHierarchyInfoSupported",
}


# mad_dump_portcapmask2 of rdma-core 44's libibmad
CAPMASK2_BITS = {
    0: "IsSetNodeDescriptionSupported", 1: "IsPortInfoExtendedSupported", 2: "IsVirtualizationSupported",
    3: "IsSwitchPortStateTableSupported", 4: "IsLinkWidth2xSupported", 5: "IsLinkSpeedHDRSupported",
    6: "IsMKeyProtectBitsExtSupported", 7: "IsEnhancedTrap128Supported", 8: "IsPartitionTopSupported",
    9: "IsEnhancedQoSArbiterSupported", 10: "IsLinkSpeedNDRSupported",
}


def _undef(v):
    return f"undefined ({v})"


def width(v):
    return WIDTH.get(v, _undef(v))


def width_bits(v):
    names = [n for b, n in ((1, "1X"), (2, "4X"), (4, "8X"), (8, "12X"), (16, "2X")) if v & b]
    s = " or ".join(names)
    if v >> 5:
        s = (s + " or " if s else "") + _undef(v)
    return s or str(v)


def speed(v):
    return SPEED.get(v, _undef(v))


def speed_bits(v):
    names = [n for b, n in ((1, "2.5 Gbps"), (2, "5.0 Gbps"), (4, "10.0 Gbps")) if v & b]
    s = " or ".join(names)
    if v >> 3:
        s = (s + " or " if s else "") + _undef(v)
    return s or str(v)


def speed_ext(v):
    return SPEED_EXT.get(v, _undef(v))


def speed_ext_bits(v, enabled=False):
    if enabled and v == 30:
        return "Extended link speeds disabled"
    if v == 0:
        return "0"
    names = [n for b, n in ((1, "14.0625 Gbps"), (2, "25.78125 Gbps"), (4, "53.125 Gbps"),
                            (8, "106.25 Gbps")) if v & b]
    s = " or ".join(names)
    if v >> 4:
        s = (s + " or " if s else "") + _undef(v)
    return s


def port_state(v):
    return PORT_STATE.get(v, _undef(v))


def phys_state(v):
    return PHYS_STATE.get(v, _undef(v))


def node_type(v):
    return NODE_TYPE.get(v, "?")


def nodeinfo(data) -> str:
    ni = smp.NODE_INFO.decode(data)
    return "".join([
        field("BaseVers", ni["BaseVers"]), field("ClassVers", ni["ClassVers"]),
        field("NodeType", node_type(ni["NodeType"])), field("NumPorts", ni["NumPorts"]),
        field("SystemGuid", f"0x{ni['SystemGuid']:016x}"), field("Guid", f"0x{ni['Guid']:016x}"),
        field("PortGuid", f"0x{ni['PortGuid']:016x}"), field("PartCap", ni["PartCap"]),
        field("DevId", f"0x{ni['DevId']:04x}"), field("Revision", f"0x{ni['Revision']:08x}"),
        field("LocalPort", ni["LocalPort"]), field("VendorId", f"0x{ni['VendorId']:06x}"),
    ])


def switchinfo(data) -> str:
    si = smp.SWITCH_INFO.decode(data)
    out = []
    for name, _o, _w in smp.SWITCH_INFO.fields:
        v = si[name]
        out.append(field(name, f"0x{v:04x}" if name == "MulticastFDBTop" else v))
    return "".join(out)


def capmask(v, names=CAPMASK_BITS) -> str:
    s = f"0x{v:x}\n"
    for bit in range(32):
        if v & (1 << bit) and bit in names:
            s += f"\t\t\t\t{names[bit]}\n"
    return s


def portinfo(data, show_keys: bool = False, tabs: int = 0) -> str:
    """dump_portinfo(pi, tabs) of ibdiag_common.c with mad_dump_portinfo's fields: each
    field's line after ``tabs`` tabs (a CapMask's bit names ride on its line, unindented)."""
    pi = smp.PORT_INFO.decode(data)
    f = []
    f.append(field("Mkey", f"0x{pi['Mkey']:016x}" if show_keys else "<not displayed>"))
    f.append(field("GidPrefix", f"0x{pi['GidPrefix']:016x}"))
    f.append(field("Lid", pi["Lid"]))
    f.append(field("SMLid", pi["SMLid"]))
    f.append(field("CapMask", capmask(pi["CapMask"])).rstrip("\n") + "\n")
    f.append(field("DiagCode", f"0x{pi['DiagCode']:04x}"))
    f.append(field("MkeyLeasePeriod", pi["MkeyLeasePeriod"]))
    f.append(field("LocalPort", pi["LocalPort"]))
    f.append(field("LinkWidthEnabled", width_bits(pi["LinkWidthEnabled"])))
    f.append(field("LinkWidthSupported", width_bits(pi["LinkWidthSupported"])))
    f.append(field("LinkWidthActive", width(pi["LinkWidthActive"])))
    f.append(field("LinkSpeedSupported", speed_bits(pi["LinkSpeedSupported"])))
    f.append(field("LinkState", port_state(pi["LinkState"])))
    f.append(field("PhysLinkState", phys_state(pi["PhysLinkState"])))
    f.append(field("LinkDownDefState", LINKDOWN_DEF.get(pi["LinkDownDefState"],
                                                        _undef(pi["LinkDownDefState"]))))
    f.append(field("ProtectBits", pi["ProtectBits"]))
    f.append(field("LMC", pi["LMC"]))
    f.append(field("LinkSpeedActive", speed(pi["LinkSpeedActive"])))
    f.append(field("LinkSpeedEnabled", speed_bits(pi["LinkSpeedEnabled"])))
    f.append(field("NeighborMTU", MTU.get(pi["NeighborMTU"], _undef(pi["NeighborMTU"]))))
    f.append(field("SMSL", pi["SMSL"]))
    f.append(field("VLCap", VLCAP.get(pi["VLCap"], _undef(pi["VLCap"]))))
    f.append(field("InitType", f"0x{pi['InitType']:02x}"))
    f.append(field("VLHighLimit", pi["VLHighLimit"]))
    f.append(field("VLArbHighCap", pi["VLArbHighCap"]))
    f.append(field("VLArbLowCap", pi["VLArbLowCap"]))
    f.append(field("InitReply", f"0x{pi['InitReply']:02x}"))
    f.append(field("MtuCap", MTU.get(pi["MtuCap"], _undef(pi["MtuCap"]))))
    f.append(field("VLStallCount", pi["VLStallCount"]))
    f.append(field("HoqLife", pi["HoqLife"]))
    f.append(field("OperVLs", VLCAP.get(pi["OperVLs"], "No change" if pi["OperVLs"] == 0
                                        else _undef(pi["OperVLs"]))))
    for name in ("PartEnforceInb", "PartEnforceOutb", "FilterRawInb", "FilterRawOutb",
                 "MkeyViolations", "PkeyViolations", "QkeyViolations", "GuidCap",
                 "ClientReregister", "McastPkeyTrapSuppressionEnabled", "SubnetTimeout",
                 "RespTimeVal", "LocalPhysErr", "OverrunErr", "MaxCreditHint", "RoundTrip"):
        f.append(field(name, pi[name]))
    # IB_PORT_CAPMASK2_F .. IB_PORT_LINK_SPEED_EXT_LAST_F, whatever CapMask says
    f.append(field("CapabilityMask2", capmask(pi["CapabilityMask2"], CAPMASK2_BITS)).rstrip("\n") + "\n")
    f.append(field("LinkSpeedExtActive", speed_ext(pi["LinkSpeedExtActive"])))
    f.append(field("LinkSpeedExtSupported", speed_ext_bits(pi["LinkSpeedExtSupported"])))
    f.append(field("LinkSpeedExtEnabled", speed_ext_bits(pi["LinkSpeedExtEnabled"], True)))
    return "".join("\t" * tabs + line for line in f)


def sltovl(data) -> str:
    """mad_dump_sltovl(): '| 0| 1|...|' of the 16 SLs."""
    vls = smp.decode_sl2vl(data)
    return "|" + "".join(f"{v:2d}|" for v in vls) + "\n"


def vlarbitration(data, n_entries: int) -> str:
    """mad_dump_vlarbitration(): VL and weight rows of ``n_entries``."""
    ent = smp.decode_vlarb(data)[:n_entries]
    vl = "".join(f"0x{v:<2x}|" for v, _w in ent)
    wt = "".join(f"0x{w:<2x}|" for _v, w in ent)
    return f"\nVL    : |{vl}\nWEIGHT: |{wt}\n"
