"""``saquery [options] [query-name] [<name> | <lid> | <guid>]`` (infiniband-diags
44 saquery.c and ibdiag_sa.c): SA queries to the SM LID of the own port,
with saquery's options, record dumps and errors.

Unlike the real tool under umad2sim (one MAD per answer: a table is cut to
what fits in 200 bytes), this one does RMPP itself (``mgmt.agent``): it
ACKs the SA's segments and prints the whole table.  A single-MAD answer (an
SM that sends no segments, as opensm through umad2sim) is taken at the
length the fabric reports, as umad does.

A faithful port of a large C tool (saquery.c's every query, option and
dump in one place, as there): longer than the modules around it for that.
"""

from __future__ import annotations

import ipaddress
import os
import struct
import sys

from ..libc import strtoul
from . import common
from .common import Exit
from .dump import portinfo as dump_portinfo
from .rpc import GSI_QP, ibwarn

SA_CLASS = 0x03
GET, GET_TABLE = 0x01, 0x12
DATA_OFFS = 56
DEFAULT_SA_TIMEOUT_MS = 1000
NOT_DISPLAYED = "<not displayed>"

CLASS_PORT_INFO = 0x0001
ATTR = {"NR": 0x11, "PIR": 0x12, "SL2VL": 0x13, "SWIR": 0x14, "LFTR": 0x15, "MFTR": 0x17,
        "SMIR": 0x18, "LR": 0x20, "GIR": 0x30, "SR": 0x31, "PKTR": 0x33, "PR": 0x35,
        "VLAR": 0x36, "MCMR": 0x38, "IIR": 0xF3}

# ComponentMask bits (ib_types.h IB_*_COMPMASK_*)
NR_LID = 1 << 0
PIR_LID, PIR_PORTNUM, PIR_OPTIONS, PIR_CAPMASK = 1 << 0, 1 << 1, 1 << 2, 1 << 7
PR = {"SERVICEID": 3, "DGID": 1 << 2, "SGID": 1 << 3, "DLID": 1 << 4, "SLID": 1 << 5,
      "FLOWLABEL": 1 << 8, "HOPLIMIT": 1 << 9, "TCLASS": 1 << 10, "REVERSIBLE": 1 << 11,
      "NUMBPATH": 1 << 12, "PKEY": 1 << 13, "QOS_CLASS": 1 << 14, "SL": 1 << 15,
      "MTUSELEC": 1 << 16, "MTU": 1 << 17, "RATESELEC": 1 << 18, "RATE": 1 << 19,
      "PKTLIFETIMESELEC": 1 << 20, "PKTLIFETIME": 1 << 21}
MCR = {"MGID": 1 << 0, "PORT_GID": 1 << 1, "QKEY": 1 << 2, "MLID": 1 << 3, "MTU_SEL": 1 << 4,
       "MTU": 1 << 5, "TCLASS": 1 << 6, "PKEY": 1 << 7, "RATE_SEL": 1 << 8, "RATE": 1 << 9,
       "LIFE_SEL": 1 << 10, "LIFE": 1 << 11, "SL": 1 << 12, "FLOW": 1 << 13, "HOP": 1 << 14,
       "SCOPE": 1 << 15, "JOIN_STATE": 1 << 16, "PROXY": 1 << 17}
SMIR_LID = SWIR_LID = 1 << 0
LR_FROM_LID, LR_FROM_PORT, LR_TO_PORT, LR_TO_LID = 1 << 0, 1 << 1, 1 << 2, 1 << 3
SLVL_LID, SLVL_IN_PORT, SLVL_OUT_PORT = 1 << 0, 1 << 1, 1 << 2
VLA_LID, VLA_OUT_PORT, VLA_BLOCK = 1 << 0, 1 << 1, 1 << 2
PKEY_LID, PKEY_BLOCK, PKEY_PORT = 1 << 0, 1 << 1, 1 << 2
LFTR_LID, LFTR_BLOCK = 1 << 0, 1 << 1
MFTR_LID, MFTR_POSITION, MFTR_BLOCK = 1 << 0, 1 << 2, 1 << 3
GIR_LID, GIR_BLOCKNUM = 1 << 0, 1 << 1
IIR_SUBSCRIBERGID = 1 << 0
PORT_CAP_IS_SM, PORT_CAP_SM_DISAB = 1 << 1, 1 << 10

SA_ERRORS = ["SA_NO_ERROR", "SA_ERR_NO_RESOURCES", "SA_ERR_REQ_INVALID", "SA_ERR_NO_RECORDS",
             "SA_ERR_TOO_MANY_RECORDS", "SA_ERR_REQ_INVALID_GID", "SA_ERR_REQ_INSUFFICIENT_COMPONENTS",
             "SA_ERR_REQ_DENIED", "SA_ERR_STATUS_PRIO_SUGGESTED", "SA_ERR_UNKNOWN"]
MAD_ERRORS = ["MAD No invalid fields", "MAD Bad version", "MAD Method specified is not supported",
              "MAD Method/Attribute combination is not supported", "MAD Reserved", "MAD Reserved",
              "MAD Reserved", "MAD Invalid value in Attribute field(s) or Attribute Modifier",
              "MAD UNKNOWN ERROR"]

QUERIES = [  # name, alias, attribute, usage
    ("ClassPortInfo", "CPI", CLASS_PORT_INFO, None),
    ("NodeRecord", "NR", 0x11, "[lid]"),
    ("PortInfoRecord", "PIR", 0x12, "[[lid]/[port]/[options]]"),
    ("SL2VLTableRecord", "SL2VL", 0x13, "[[lid]/[in_port]/[out_port]]"),
    ("PKeyTableRecord", "PKTR", 0x33, "[[lid]/[port]/[block]]"),
    ("VLArbitrationTableRecord", "VLAR", 0x36, "[[lid]/[port]/[block]]"),
    ("InformInfoRecord", "IIR", 0xF3, "[subscriber_gid]"),
    ("LinkRecord", "LR", 0x20, "[[from_lid]/[from_port]] [[to_lid]/[to_port]]"),
    ("ServiceRecord", "SR", 0x31, None),
    ("PathRecord", "PR", 0x35, None),
    ("MCMemberRecord", "MCMR", 0x38, None),
    ("LFTRecord", "LFTR", 0x15, "[[lid]/[block]]"),
    ("MFTRecord", "MFTR", 0x17, "[[mlid]/[position]/[block]]"),
    ("GUIDInfoRecord", "GIR", 0x30, "[[lid]/[block]]"),
    ("SwitchInfoRecord", "SWIR", 0x14, "[lid]"),
    ("SMInfoRecord", "SMIR", 0x18, "[lid]"),
]

OPTS = [
    ("p", "p", 0, None, "get PathRecord info"),
    ("N", "N", 0, None, "get NodeRecord info"),
    ("L", "L", 0, None, "return the Lids of the name specified"),
    ("l", "l", 0, None, "return the unique Lid of the name specified"),
    ("G", "G", 0, None, "return the Guids of the name specified"),
    ("O", "O", 0, None, "return name for the Lid specified"),
    ("U", "U", 0, None, "return name for the Guid specified"),
    ("s", "s", 0, None, "return the PortInfoRecords with isSM or isSMdisabled capability mask bit on"),
    ("g", "g", 0, None, "get multicast group info"),
    ("m", "m", 0, None, "get multicast member info (if multicast group specified, list member GIDs "
                        "only for group specified, for example 'saquery -m 0xC000')"),
    ("x", "x", 0, None, "get LinkRecord info"),
    ("c", "c", 0, None, "get the SA's class port info"),
    ("S", "S", 0, None, "get ServiceRecord info"),
    ("I", "I", 0, None, "get InformInfoRecord (subscription) info"),
    ("list", "D", 0, None, "the node desc of the CA's"),
    ("src-to-dst", None, 1, "<src:dst>", "get a PathRecord for <src:dst> where src and dst are either "
                                         "node names or LIDs"),
    ("sgid-to-dgid", None, 1, "<sgid-dgid>", "get a PathRecord for <sgid-dgid> where sgid and dgid are "
                                             "addresses in IPv6 format"),
    ("node-name-map", None, 1, "<file>", "specify a node name map file"),
    ("smkey", None, 1, "<val>", "SA SM_Key value for the query. If non-numeric value (like 'x') is "
                                "specified then saquery will prompt for a value.  Default (when not "
                                "specified here or in ibdiag.conf) is to  use SM_Key == 0 (or "
                                "\"untrusted\")"),
    ("slid", None, 1, "<lid>", "Source LID (PathRecord)"),
    ("dlid", None, 1, "<lid>", "Destination LID (PathRecord)"),
    ("mlid", None, 1, "<lid>", "Multicast LID (MCMemberRecord)"),
    ("sgid", None, 1, "<gid>", "Source GID (IPv6 format) (PathRecord)"),
    ("dgid", None, 1, "<gid>", "Destination GID (IPv6 format) (PathRecord)"),
    ("gid", None, 1, "<gid>", "Port GID (MCMemberRecord)"),
    ("mgid", None, 1, "<gid>", "Multicast GID (MCMemberRecord)"),
    ("reversible", "r", 1, "", "Reversible path (PathRecord)"),
    ("numb_path", "n", 1, "", "Number of paths (PathRecord)"),
    ("pkey", None, 1, "", "P_Key (PathRecord, MCMemberRecord). If non-numeric value (like 'x') is "
                            "specified then saquery will prompt for a value"),
    ("qos_class", "Q", 1, "", "QoS Class (PathRecord)"),
    ("sl", None, 1, "", "Service level (PathRecord, MCMemberRecord)"),
    ("mtu", "M", 1, "", "MTU and selector (PathRecord, MCMemberRecord)"),
    ("rate", "R", 1, "", "Rate and selector (PathRecord, MCMemberRecord)"),
    ("pkt_lifetime", None, 1, "", "Packet lifetime and selector (PathRecord, MCMemberRecord)"),
    ("qkey", "q", 1, "", "Q_Key (MCMemberRecord). If non-numeric value (like 'x') is specified then "
                           "saquery will prompt for a value"),
    ("tclass", "T", 1, "", "Traffic Class (PathRecord, MCMemberRecord)"),
    ("flow_label", "F", 1, "", "Flow Label (PathRecord, MCMemberRecord)"),
    ("hop_limit", "H", 1, "", "Hop limit (PathRecord, MCMemberRecord)"),
    ("scope", None, 1, "", "Scope (MCMemberRecord)"),
    ("join_state", "J", 1, "", "Join state (MCMemberRecord)"),
    ("proxy_join", "X", 1, "", "Proxy join (MCMemberRecord)"),
    ("service_id", None, 1, "", "ServiceID (PathRecord)"),
]


def _usage_args() -> str:
    s = "[query-name] [<name> | <lid> | <guid>]\n\nSupported query names (and aliases):\n"
    for name, alias, _a, usage in QUERIES:
        s += f"  {name} ({alias}) {usage or ''}\n"
    return s + "\n  Queries node records by default."


def _gid(raw) -> str:
    return str(ipaddress.IPv6Address(bytes(raw)))


def _u(b, o, n):
    return int.from_bytes(b[o:o + n], "big")


def _cstr(raw) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("latin-1")


# --- record dumps (saquery.c's printf formats) ------------------------------------------
NODE_TYPE = {1: "Channel Adapter", 2: "Switch", 3: "Router"}


def dump_node_record(r, p) -> str:
    ni = r[4:44]
    return ("NodeRecord dump:\n"
            f"\t\tlid.....................{_u(r, 0, 2)}\n"
            f"\t\treserved................0x{_u(r, 2, 2):X}\n"
            f"\t\tbase_version............0x{ni[0]:X}\n"
            f"\t\tclass_version...........0x{ni[1]:X}\n"
            f"\t\tnode_type...............{NODE_TYPE.get(ni[2], 'UNKNOWN')}\n"
            f"\t\tnum_ports...............{ni[3]}\n"
            f"\t\tsys_guid................0x{_u(ni, 4, 8):016x}\n"
            f"\t\tnode_guid...............0x{_u(ni, 12, 8):016x}\n"
            f"\t\tport_guid...............0x{_u(ni, 20, 8):016x}\n"
            f"\t\tpartition_cap...........0x{_u(ni, 28, 2):X}\n"
            f"\t\tdevice_id...............0x{_u(ni, 30, 2):X}\n"
            f"\t\trevision................0x{_u(ni, 32, 4):X}\n"
            f"\t\tport_num................{ni[36]}\n"
            f"\t\tvendor_id...............0x{_u(ni, 37, 3):X}\n"
            f"\t\tNodeDescription.........{p.name(r)}\n")


def dump_path_record(r, p) -> str:
    return ("PathRecord dump:\n"
            f"\t\tservice_id..............0x{_u(r, 0, 8):016x}\n"
            f"\t\tdgid....................{_gid(r[8:24])}\n"
            f"\t\tsgid....................{_gid(r[24:40])}\n"
            f"\t\tdlid....................{_u(r, 40, 2)}\n"
            f"\t\tslid....................{_u(r, 42, 2)}\n"
            f"\t\thop_flow_raw............0x{_u(r, 44, 4):X}\n"
            f"\t\ttclass..................0x{r[48]:X}\n"
            f"\t\tnum_path_revers.........0x{r[49]:X}\n"
            f"\t\tpkey....................0x{_u(r, 50, 2):X}\n"
            f"\t\tqos_class...............0x{_u(r, 52, 2) >> 4:X}\n"
            f"\t\tsl......................0x{_u(r, 52, 2) & 0xF:X}\n"
            f"\t\tmtu.....................0x{r[54]:X}\n"
            f"\t\trate....................0x{r[55]:X}\n"
            f"\t\tpkt_life................0x{r[56]:X}\n"
            f"\t\tpreference..............0x{r[57]:X}\n"
            f"\t\tresv2...................0x{bytes(r[58:64]).hex().upper()}\n")


def dump_class_port_info(c) -> str:
    cm2 = _u(c, 4, 4)
    return ("SA ClassPortInfo:\n"
            f"\t\tBase version.............{c[0]}\n"
            f"\t\tClass version............{c[1]}\n"
            f"\t\tCapability mask..........0x{_u(c, 2, 2):04X}\n"
            f"\t\tCapability mask 2........0x{cm2 >> 5:08X}\n"
            f"\t\tResponse time value......0x{cm2 & 0x1F:02X}\n"
            f"\t\tRedirect GID.............{_gid(c[8:24])}\n"
            f"\t\tRedirect TC/SL/FL........0x{_u(c, 24, 4):08X}\n"
            f"\t\tRedirect LID.............{_u(c, 28, 2)}\n"
            f"\t\tRedirect PKey............0x{_u(c, 30, 2):04X}\n"
            f"\t\tRedirect QP..............0x{_u(c, 32, 4):08X}\n"
            f"\t\tRedirect QKey............0x{_u(c, 36, 4):08X}\n"
            f"\t\tTrap GID.................{_gid(c[40:56])}\n"
            f"\t\tTrap TC/SL/FL............0x{_u(c, 56, 4):08X}\n"
            f"\t\tTrap LID.................{_u(c, 60, 2)}\n"
            f"\t\tTrap PKey................0x{_u(c, 62, 2):04X}\n"
            f"\t\tTrap HL/QP...............0x{_u(c, 64, 4):08X}\n"
            f"\t\tTrap QKey................0x{_u(c, 68, 4):08X}\n")


def dump_portinfo_record(r, p) -> str:
    pi = r[4:68]
    return ("PortInfoRecord dump:\n"
            f"\t\tEndPortLid..............{_u(r, 0, 2)}\n"
            f"\t\tPortNum.................{r[2]}\n"
            f"\t\tbase_lid................{_u(pi, 16, 2)}\n"
            f"\t\tmaster_sm_base_lid......{_u(pi, 18, 2)}\n"
            f"\t\tcapability_mask.........0x{_u(pi, 20, 4):X}\n")


def dump_one_portinfo_record(r, p) -> str:
    body = dump_portinfo(bytes(r[4:68]), p.show_keys, tabs=2)
    return ("PortInfoRecord dump:\n\tRID\n"
            f"\t\tEndPortLid..............{_u(r, 0, 2)}\n"
            f"\t\tPortNum.................{r[2]}\n"
            f"\t\tOptions.................0x{r[3]:x}\n"
            "\tPortInfo dump:\n" + body)


def _mcm_fields(r):
    """(sl, flow label, hop limit, scope, join state) of an MCMemberRecord."""
    sfh = _u(r, 44, 4)
    return sfh >> 28, (sfh >> 8) & 0xFFFFF, sfh & 0xFF, r[48] >> 4, r[48] & 0xF


def dump_one_mcmember_record(r, p) -> str:
    sl, flow, hop, scope, join = _mcm_fields(r)
    return ("MCMember Record dump:\n"
            f"\t\tMGID....................{_gid(r[0:16])}\n"
            f"\t\tPortGid.................{_gid(r[16:32])}\n"
            f"\t\tqkey....................0x{_u(r, 32, 4):x}\n"
            f"\t\tmlid....................0x{_u(r, 36, 2):x}\n"
            f"\t\tmtu.....................0x{r[38]:x}\n"
            f"\t\tTClass..................0x{r[39]:x}\n"
            f"\t\tpkey....................0x{_u(r, 40, 2):x}\n"
            f"\t\trate....................0x{r[42]:x}\n"
            f"\t\tpkt_life................0x{r[43]:x}\n"
            f"\t\tSL......................0x{sl:x}\n"
            f"\t\tFlowLabel...............0x{flow:x}\n"
            f"\t\tHopLimit................0x{hop:x}\n"
            f"\t\tScope...................0x{scope:x}\n"
            f"\t\tJoinState...............0x{join:x}\n"
            f"\t\tProxyJoin...............0x{r[49] & 1:x}\n")


def dump_service_record(r, p) -> str:
    key = "0x" + bytes(r[32:48]).hex() if p.show_keys else NOT_DISPLAYED
    d8 = r[112:128]
    out = ["ServiceRecord dump:\n",
           f"\t\tServiceID...............0x{_u(r, 0, 8):016x}\n",
           f"\t\tServiceGID..............{_gid(r[8:24])}\n",
           f"\t\tServiceP_Key............0x{_u(r, 24, 2):X}\n",
           f"\t\tServiceLease............0x{_u(r, 28, 4):X}\n",
           f"\t\tServiceKey..............{key}\n",
           f"\t\tServiceName.............{_cstr(r[48:112])}\n"]
    for i in range(16):
        out.append(f"\t\t{'ServiceData8.' + str(i + 1):.<24}0x{d8[i]:X}\n")
    for i in range(8):
        out.append(f"\t\t{'ServiceData16.' + str(i + 1):.<24}0x{_u(r, 128 + 2 * i, 2):X}\n")
    for i in range(4):
        out.append(f"\t\t{'ServiceData32.' + str(i + 1):.<24}0x{_u(r, 144 + 4 * i, 4):X}\n")
    for i in range(2):
        out.append(f"\t\t{'ServiceData64.' + str(i + 1):.<24}0x{_u(r, 160 + 8 * i, 8):016x}\n")
    return "".join(out)


def dump_sm_info_record(r, p) -> str:
    return ("SMInfoRecord dump:\n\t\tRID\n"
            f"\t\tLID...................{_u(r, 0, 2)}\n"
            "\t\tSMInfo dump:\n"
            f"\t\tGUID..................0x{_u(r, 4, 8):016x}\n"
            f"\t\tSM_Key................0x{_u(r, 12, 8):016x}\n"
            f"\t\tActCount..............{_u(r, 20, 4)}\n"
            f"\t\tPriority..............{r[24] >> 4}\n"
            f"\t\tSMState...............{r[24] & 0xF}\n")


def dump_switch_info_record(r, p) -> str:
    s = r[4:]
    out = ("SwitchInfoRecord dump:\n\t\tRID\n"
           f"\t\tLID.....................................{_u(r, 0, 2)}\n"
           "\t\tSwitchInfo dump:\n"
           f"\t\tLinearFDBCap............................0x{_u(s, 0, 2):X}\n"
           f"\t\tRandomFDBCap............................0x{_u(s, 2, 2):X}\n"
           f"\t\tMulticastFDBCap.........................0x{_u(s, 4, 2):X}\n"
           f"\t\tLinearFDBTop............................0x{_u(s, 6, 2):X}\n"
           f"\t\tDefaultPort.............................{s[8]}\n"
           f"\t\tDefaultMulticastPrimaryPort.............{s[9]}\n"
           f"\t\tDefaultMulticastNotPrimaryPort..........{s[10]}\n"
           f"\t\tLifeTimeValue/PortStateChange/OpSL2VL...0x{s[11]:X}\n"
           f"\t\tLIDsPerPort.............................0x{_u(s, 12, 2):X}\n"
           f"\t\tPartitionEnforcementCap.................0x{_u(s, 14, 2):X}\n"
           f"\t\tflags...................................0x{s[16]:X}\n")
    if p.cpi and (_u(p.cpi, 4, 4) >> 5) & (1 << 3):
        out += f"\t\tMulticastFDBTop.........................0x{_u(s, 18, 2):X}\n"
    return out


def dump_inform_info_record(r, p) -> str:
    ii = r[24:]
    generic = ii[20]
    qpn_rt = _u(ii, 28, 4)
    qpn, rtv = qpn_rt >> 8, qpn_rt & 0x1F
    out = ("InformInfoRecord dump:\n\t\tRID\n"
           f"\t\tSubscriberGID...........{_gid(r[0:16])}\n"
           f"\t\tSubscriberEnum..........0x{_u(r, 16, 2):X}\n"
           "\t\tInformInfo dump:\n"
           f"\t\tgid.....................{_gid(ii[0:16])}\n"
           f"\t\tlid_range_begin.........{_u(ii, 16, 2)}\n"
           f"\t\tlid_range_end...........{_u(ii, 18, 2)}\n"
           f"\t\tis_generic..............0x{generic:X}\n"
           f"\t\tsubscribe...............0x{ii[21]:X}\n"
           f"\t\ttrap_type...............0x{_u(ii, 22, 2):X}\n")
    out += (f"\t\ttrap_num................{_u(ii, 24, 2)}\n" if generic
            else f"\t\tdev_id..................0x{_u(ii, 24, 2):X}\n")
    out += (f"\t\tqpn.....................0x{qpn:06X}\n" if p.show_keys
            else f"\t\tqpn.....................{NOT_DISPLAYED}\n")
    out += f"\t\tresp_time_val...........0x{rtv:X}\n"
    out += (f"\t\tnode_type...............0x{_u(ii, 33, 3):06X}\n" if generic
            else f"\t\tvendor_id...............0x{_u(ii, 33, 3):06X}\n")
    return out


def dump_one_link_record(r, p) -> str:
    return ("LinkRecord dump:\n"
            f"\t\tFromLID....................{_u(r, 0, 2)}\n"
            f"\t\tFromPort...................{r[2]}\n"
            f"\t\tToPort.....................{r[3]}\n"
            f"\t\tToLID......................{_u(r, 4, 2)}\n")


def dump_one_slvl_record(r, p) -> str:
    t = r[8:16]
    vls = "|".join(f"{(t[i // 2] >> (4 if i % 2 == 0 else 0)) & 0xF:2d}" for i in range(16))
    return ("SL2VLTableRecord dump:\n"
            f"\t\tLID........................{_u(r, 0, 2)}\n"
            f"\t\tInPort.....................{r[2]}\n"
            f"\t\tOutPort....................{r[3]}\n"
            "\t\tSL: 0| 1| 2| 3| 4| 5| 6| 7| 8| 9|10|11|12|13|14|15|\n"
            f"\t\tVL:{vls}|\n")


def dump_one_vlarb_record(r, p) -> str:
    e = r[8:72]
    out = ("VLArbTableRecord dump:\n"
           f"\t\tLID........................{_u(r, 0, 2)}\n"
           f"\t\tPort.......................{r[2]}\n"
           f"\t\tBlock......................{r[3]}\n")
    for i in range(0, 32, 16):
        vl = "|".join(f"{e[2 * (i + j)] & 0xF:2d}" for j in range(16))
        w = "|".join(f"{e[2 * (i + j) + 1]:2d}" for j in range(16))
        out += f"\t\tVL    :{vl}|\n\t\tWeight:{w}|\n"
    return out


def dump_one_pkey_tbl_record(r, p) -> str:
    out = ("PKeyTableRecord dump:\n"
           f"\t\tLID........................{_u(r, 0, 2)}\n"
           f"\t\tPort.......................{r[4]}\n"
           f"\t\tBlock......................{_u(r, 2, 2)}\n"
           "\t\tPKey Table:\n")
    for i in range(0, 32, 8):
        out += "\t\t" + " ".join(f"0x{_u(r, 8 + 2 * (i + j), 2):04x}" for j in range(8)) + "\n"
    return out + "\n"


def dump_one_lft_record(r, p) -> str:
    block = _u(r, 2, 2)
    out = ("LFT Record dump:\n"
           f"\t\tLID........................{_u(r, 0, 2)}\n"
           f"\t\tBlock......................{block}\n"
           "\t\tLFT:\n\t\tLID\tPort Number\n")
    out += "".join(f"\t\t{block * 64 + i}\t{r[8 + i]}\n" for i in range(64))
    return out + "\n"


def dump_one_guidinfo_record(r, p) -> str:
    out = ("GUIDInfo Record dump:\n"
           f"\t\tLID........................{_u(r, 0, 2)}\n"
           f"\t\tBlock......................{r[2]}\n")
    out += "".join(f"\t\tGUID {i}.....................0x{_u(r, 8 + 8 * i, 8):016x}\n" for i in range(8))
    return out


def dump_one_mft_record(r, p) -> str:
    pb = _u(r, 2, 2)
    position, block = pb >> 12, pb & 0x1FF
    out = ("MFT Record dump:\n"
           f"\t\tLID........................{_u(r, 0, 2)}\n"
           f"\t\tPosition...................{position}\n"
           f"\t\tBlock......................{block}\n"
           "\t\tMFT:\n\t\tMLID\tPort Mask\n")
    off = 0xC000 + block * 32
    out += "".join(f"\t\t0x{off + i:04x}\t0x{_u(r, 8 + 2 * i, 2):04x}\n" for i in range(32))
    return out + "\n"


def dump_multicast_group_record(r, p) -> str:
    return ("MCMemberRecord group dump:\n"
            f"\t\tMGID....................{_gid(r[0:16])}\n"
            f"\t\tMlid....................0x{_u(r, 36, 2):X}\n"
            f"\t\tMtu.....................0x{r[38]:X}\n"
            f"\t\tpkey....................0x{_u(r, 40, 2):X}\n"
            f"\t\tRate....................0x{r[42]:X}\n"
            f"\t\tSL......................0x{_u(r, 44, 4) >> 28:X}\n")


def dump_multicast_member_record(r, nodes, p) -> str:
    """``nodes``: NodeRecords (bytes), for the member's node description."""
    name = "<unknown>"
    guid = bytes(r[24:32])
    for nr in nodes:
        if bytes(nr[24:32]) == guid:                # NodeInfo.PortGUID
            name = p.name(nr)
            break
    mlid = _u(r, 36, 2)
    if p.requested_name:
        if strtoul(p.requested_name) == mlid:
            return f"\t\tPortGid.................{_gid(r[16:32])} ({name})\n"
        return ""
    return ("MCMemberRecord member dump:\n"
            f"\t\tMGID....................{_gid(r[0:16])}\n"
            f"\t\tMlid....................0x{mlid:X}\n"
            f"\t\tPortGid.................{_gid(r[16:32])}\n"
            f"\t\tScopeState..............0x{r[48]:X}\n"
            f"\t\tProxyJoin...............0x{r[49] & 1:X}\n"
            f"\t\tNodeDescription.........{name}\n")


# --- the SA handle (ibdiag_sa.c) -------------------------------------------------------------
class SaError(Exception):
    def __init__(self, code: int):
        super().__init__(os.strerror(code))
        self.code = code


class Result:
    """sa_query_result: the status and the records of one answer."""

    def __init__(self, mad: bytes, length: int):
        self.status = _u(mad, 4, 2)
        method = mad[3] & 0x7F
        offset = _u(mad, 44, 2) * 8
        self.mad = mad[:length] if length >= DATA_OFFS else mad
        if self.status:
            n = 0
        elif method != GET_TABLE:
            n = 1
        elif not offset:
            n = 0
        else:
            n = (length - DATA_OFFS) // offset
        self.records = [self.mad[DATA_OFFS + i * offset:DATA_OFFS + (i + 1) * offset]
                        if offset else self.mad[DATA_OFFS:] for i in range(n)]


class SaHandle:
    def __init__(self, prog: str, cfg):
        self.mp = common.open_port(prog, cfg)
        self.timeout = (cfg.timeout or DEFAULT_SA_TIMEOUT_MS) / 1000.0
        if not self.mp.sm_lid:
            self.mp.close()
            ibwarn("sa_get_handle", "No SM/SA found on port :0")
            raise Exit(255, f"{prog}: iberror: [pid {os.getpid()}] main: failed: Failed to bind to the SA",
                       stdout=False)
        self.sm_lid = cfg.sm_lid or self.mp.sm_lid

    def close(self):
        self.mp.close()

    def query(self, method: int, attr: int, mod: int = 0, comp_mask: int = 0, data: bytes = b"",
              sm_key: int = 0) -> Result:
        mad = bytearray(256)
        mad[0:4] = bytes([1, SA_CLASS, 2, method])
        mad[8:16] = self.mp.agent.alloc_tid().to_bytes(8, "big")
        mad[16:18] = attr.to_bytes(2, "big")
        mad[20:24] = mod.to_bytes(4, "big")
        mad[36:44] = sm_key.to_bytes(8, "big")
        mad[48:56] = comp_mask.to_bytes(8, "big")
        mad[DATA_OFFS:DATA_OFFS + len(data)] = data[:200]
        # one request, no retry (sa_query's umad_send(..., retries 0)): a second answer
        # would reach whichever client has this one's fabric slot by then.  The agent
        # ACKs the SA's RMPP segments (to the LID they came from) and restarts the
        # timer with each one, as umad does for an RMPP agent
        s = self.mp.post((self.sm_lid, GSI_QP, GSI_QP), mad, timeout=self.timeout, retries=0, rmpp=True)
        self.mp.run()
        if s.status:
            raise SaError(s.status if s.status < 256 else 110)
        if s.response is None:
            ibwarn("sa_query", f"umad_recv failed: attr 0x{attr:x}: {os.strerror(110)}")
            raise SaError(110)
        if s.rmpp is not None:
            if s.rmpp_status:
                raise SaError(5)
            return Result(s.response.ljust(256, b"\0"), len(s.response))
        length = s.length if 0 < s.length <= 256 else 256
        return Result(s.response, length)


def report_err(status: int) -> str:
    """sa_report_err()"""
    st = status & 0xFF
    mad = ""
    if st:
        mad = " ({}; {}; {})".format("BUSY" if st & 1 else "", "Redirection Required" if st & 2 else "",
                                      MAD_ERRORS[min(st >> 2, len(MAD_ERRORS) - 1)])
    sa = ""
    if status >> 8:
        sa = f" SA({SA_ERRORS[min(status >> 8, len(SA_ERRORS) - 1)]})"
    return f"ERROR: Query result returned 0x{status:04x}, {mad}{sa}\n"


# --- the tool -------------------------------------------------------------------------------
class Params:
    def __init__(self):
        self.service_id = 0
        self.sgid = self.dgid = self.gid = self.mgid = None
        self.slid = self.dlid = self.mlid = 0
        self.flow_label = 0
        self.hop_limit = -1
        self.tclass = 0
        self.reversible = self.numb_path = -1
        self.pkey = 0
        self.qos_class = self.sl = -1
        self.mtu = self.rate = self.pkt_life = 0
        self.qkey = 0
        self.scope = self.join_state = 0
        self.proxy_join = -1
        self.cpi = None
        self.show_keys = False
        self.requested_name = None
        self.print_desc = "ALL"
        self.requested_lid = 0
        self.requested_guid = 0
        self.name_map = {}

    def name(self, nr) -> str:
        guid = _u(nr, 4 + 12, 8)
        return self.name_map.get(guid, _cstr(nr[44:108]))


def _gid_bytes(text):
    try:
        return ipaddress.IPv6Address(text).packed
    except ValueError:
        return None


#: numeric options: Params attribute and the width the C tool casts the value to
_ALL = (1 << 64) - 1
_NUMERIC = {"\x01slid": ("slid", 0xFFFF), "\x01dlid": ("dlid", 0xFFFF), "\x01mlid": ("mlid", 0xFFFF),
            "r": ("reversible", _ALL), "n": ("numb_path", _ALL), "\x01pkey": ("pkey", 0xFFFF),
            "Q": ("qos_class", _ALL), "\x01sl": ("sl", _ALL), "M": ("mtu", 0xFF), "R": ("rate", 0xFF),
            "\x01pkt_lifetime": ("pkt_life", 0xFF), "q": ("qkey", 0xFFFFFFFF), "T": ("tclass", 0xFF),
            "F": ("flow_label", _ALL), "H": ("hop_limit", _ALL), "\x01scope": ("scope", 0xFF),
            "J": ("join_state", 0xFF), "X": ("proxy_join", _ALL), "\x01service_id": ("service_id", _ALL)}


class Tool:
    def __init__(self, prog: str):
        self.prog = prog
        self.p = Params()
        self.command = "QUERY"
        self.query_type = 0
        self.src = self.dst = None
        self.name_map_file = None
        self.sm_key = 0
        self.h: SaHandle | None = None

    # option handling (process_opt)
    def opt(self, c, arg):
        p = self.p
        if c == "\x01src-to-dst":
            if ":" not in arg:
                return False
            self.src, self.dst = arg.split(":", 1)
            p.numb_path, self.query_type = 0x7F, ATTR["PR"]
        elif c == "\x01sgid-to-dgid":
            a, sep, b = arg.partition("-")
            if not sep or _gid_bytes(a) is None or _gid_bytes(b) is None:
                return False
            p.sgid, p.dgid = _gid_bytes(a), _gid_bytes(b)
            p.numb_path, self.query_type = 0x7F, ATTR["PR"]
        elif c == "\x01node-name-map":
            self.name_map_file = arg
        elif c == "\x01smkey":
            self.sm_key = strtoul(arg)
        elif c == "p":
            self.query_type = ATTR["PR"]
        elif c in "DNLlGOU":
            self.command = "NODE_RECORD"
            p.print_desc = {"D": "ALL_DESC", "N": p.print_desc, "L": "LID_ONLY", "l": "UNIQUE_LID_ONLY",
                            "G": "GUID_ONLY", "O": "NAME_OF_LID", "U": "NAME_OF_GUID"}[c]
        elif c == "c":
            self.command = "CLASS_PORT_INFO"
        elif c in "SIx":
            self.query_type = {"S": ATTR["SR"], "I": ATTR["IIR"], "x": ATTR["LR"]}[c]
        elif c == "s":
            self.command = "ISSM"
        elif c == "g":
            self.command = "MCGROUPS"
        elif c == "m":
            self.command = "MCMEMBERS"
        elif c in _NUMERIC:
            attr, mask = _NUMERIC[c]
            setattr(p, attr, strtoul(arg) & mask)
        elif c in ("\x01sgid", "\x01dgid", "\x01gid", "\x01mgid"):
            g = _gid_bytes(arg)
            if g is None:
                return False
            setattr(p, c[1:], g)
        else:
            return False
        return None

    # queries
    def get_any(self, attr, mod=0, mask=0, data=b"") -> Result:
        try:
            r = self.h.query(GET_TABLE, attr, mod, mask, data, self.sm_key)
        except SaError as e:
            raise Exit(e.code, f"Query SA failed: {e}")
        if r.status:
            raise Exit(5, report_err(r.status).rstrip("\n"))
        return r

    def dump_any(self, attr, fn, mod=0, mask=0, data=b"") -> int:
        r = self.get_any(attr, mod, mask, data)
        sys.stdout.write("".join(fn(rec, self.p) for rec in r.records))
        return 0

    def lid_from_name(self, name: str) -> int:
        if name[:1].isalpha():
            for nr in self.get_any(ATTR["NR"]).records:
                if _cstr(nr[44:108]) == name[:64]:
                    return _u(nr, 0, 2)
            raise Exit(64, f'Failed to find lid for "{name}": {os.strerror(64)}')
        try:
            val = int(name, 0)
        except ValueError:
            val = strtoul(name)
        if val <= 0 or val > 0xFFFF:
            raise Exit(22, f'Invalid lid specified: "{name}"')
        return val

    def lid_and_ports(self, text, n=2):
        """parse_lid_and_ports(): "lid/port1/port2" (-1: not given)."""
        parts = text.split("/")
        lid = self.lid_from_name(parts[0]) if parts[0] else 0
        ports = []
        for i in range(n):
            t = parts[i + 1] if len(parts) > i + 1 else ""
            ports.append(strtoul(t) if t[:1].isdigit() else -1)
        return lid, ports

    def run_query(self, attr, args) -> int:
        p = self.p
        if attr == CLASS_PORT_INFO:
            sys.stdout.write(dump_class_port_info(p.cpi))
            return 0
        if attr == ATTR["NR"]:
            lid = self.lid_and_ports(args[0], 0)[0] if args else 0
            rec = struct.pack(">H", lid) + bytes(106)
            return self.dump_any(attr, dump_node_record, 0, NR_LID if lid else 0, rec)
        if attr == ATTR["PIR"]:
            lid, (port, opts) = self.lid_and_ports(args[0]) if args else (0, (-1, -1))
            mask = (PIR_LID if lid else 0) | (PIR_PORTNUM if port != -1 else 0) | \
                (PIR_OPTIONS if opts != -1 else 0)
            rec = struct.pack(">HBB", lid, port & 0xFF, opts & 0xFF) + bytes(64)
            return self.dump_any(attr, dump_one_portinfo_record, 0, mask, rec)
        if attr == ATTR["SL2VL"]:
            lid, (inp, outp) = self.lid_and_ports(args[0]) if args else (0, (-1, -1))
            mask = (SLVL_LID if lid else 0) | (SLVL_IN_PORT if inp != -1 else 0) | \
                (SLVL_OUT_PORT if outp != -1 else 0)
            rec = struct.pack(">HBB", lid, inp & 0xFF, outp & 0xFF) + bytes(12)
            return self.dump_any(attr, dump_one_slvl_record, 0, mask, rec)
        if attr in (ATTR["PKTR"], ATTR["VLAR"]):
            lid, (port, block) = self.lid_and_ports(args[0]) if args else (0, (-1, -1))
            if attr == ATTR["PKTR"]:
                mask = (PKEY_LID if lid else 0) | (PKEY_PORT if port != -1 else 0) | \
                    (PKEY_BLOCK if block != -1 else 0)
                rec = struct.pack(">HHB", lid, block & 0xFFFF, port & 0xFF) + bytes(67)
                return self.dump_any(attr, dump_one_pkey_tbl_record, 0, mask, rec)
            mask = (VLA_LID if lid else 0) | (VLA_OUT_PORT if port != -1 else 0) | \
                (VLA_BLOCK if block != -1 else 0)
            rec = struct.pack(">HBB", lid, port & 0xFF, block & 0xFF) + bytes(68)
            return self.dump_any(attr, dump_one_vlarb_record, 0, mask, rec)
        if attr == ATTR["IIR"]:
            mask, rec = 0, bytes(80)
            if args:
                g = _gid_bytes(args[0])
                if g is None:
                    raise Exit(22, f'Invalid SubscriberGID specified: "{args[0]}"')
                mask, rec = IIR_SUBSCRIBERGID, g + bytes(64)
            return self.dump_any(attr, dump_inform_info_record, 0, mask, rec)
        if attr == ATTR["LR"]:
            fl, (fp,) = self.lid_and_ports(args[0], 1) if args else (0, (-1,))
            tl, (tp,) = self.lid_and_ports(args[1], 1) if len(args) > 1 else (0, (-1,))
            mask = (LR_FROM_LID if fl else 0) | (LR_FROM_PORT if fp != -1 else 0) | \
                (LR_TO_LID if tl else 0) | (LR_TO_PORT if tp != -1 else 0)
            rec = struct.pack(">HBBH", fl, fp & 0xFF, tp & 0xFF, tl) + bytes(2)
            return self.dump_any(attr, dump_one_link_record, 0, mask, rec)
        if attr == ATTR["SR"]:
            return self.dump_any(attr, dump_service_record)
        if attr == ATTR["PR"]:
            return self.dump_any(attr, dump_path_record, 0, *self.path_query())
        if attr == ATTR["MCMR"]:
            return self.dump_any(attr, dump_one_mcmember_record, 0, *self.mcmember_query())
        if attr in (ATTR["LFTR"], ATTR["GIR"]):
            lid, (block,) = self.lid_and_ports(args[0], 1) if args else (0, (-1,))
            if attr == ATTR["LFTR"]:
                mask = (LFTR_LID if lid else 0) | (LFTR_BLOCK if block != -1 else 0)
                rec = struct.pack(">HH", lid, block & 0xFFFF) + bytes(68)
                return self.dump_any(attr, dump_one_lft_record, 0, mask, rec)
            mask = (GIR_LID if lid else 0) | (GIR_BLOCKNUM if block != -1 else 0)
            rec = struct.pack(">HB", lid, block & 0xFF) + bytes(69)
            return self.dump_any(attr, dump_one_guidinfo_record, 0, mask, rec)
        if attr == ATTR["MFTR"]:
            lid, (position, block) = self.lid_and_ports(args[0]) if args else (0, (-1, -1))
            mask = (MFTR_LID if lid else 0) | (MFTR_BLOCK if block != -1 else 0) | \
                (MFTR_POSITION if position != -1 else 0)
            pb = ((block & 0xFFFF) & 0x1FF) | (((position & 0xFF) if position != -1 else 0) << 12)
            rec = struct.pack(">HH", lid, pb & 0xFFFF) + bytes(68)
            return self.dump_any(attr, dump_one_mft_record, 0, mask, rec)
        if attr in (ATTR["SWIR"], ATTR["SMIR"]):
            lid = self.lid_and_ports(args[0], 0)[0] if args else 0
            rec = struct.pack(">H", lid) + bytes(30)
            fn = dump_switch_info_record if attr == ATTR["SWIR"] else dump_sm_info_record
            return self.dump_any(attr, fn, 0, 1 if lid else 0, rec)
        sys.stderr.write(f"Unknown query type {attr}\n")
        return 22

    def path_query(self):
        p, mask = self.p, 0
        rec = bytearray(64)
        if p.service_id:
            rec[0:8] = p.service_id.to_bytes(8, "big")
            mask |= PR["SERVICEID"]
        for g, off, bit in ((p.dgid, 8, "DGID"), (p.sgid, 24, "SGID")):
            if g is not None and any(g):
                rec[off:off + 16] = g
                mask |= PR[bit]
        for v, off, bit in ((p.dlid, 40, "DLID"), (p.slid, 42, "SLID")):
            if v:
                rec[off:off + 2] = v.to_bytes(2, "big")
                mask |= PR[bit]
        hfr = 0
        if p.hop_limit != -1:
            hfr = p.hop_limit & 0xFFFFFFFF
            mask |= PR["HOPLIMIT"]
        if p.flow_label & 0xFF:
            mask |= PR["FLOWLABEL"]
        hfr |= ((p.flow_label & 0xFF) << 8)
        rec[44:48] = (hfr & 0xFFFFFFFF).to_bytes(4, "big")
        if p.tclass:
            rec[48] = p.tclass
            mask |= PR["TCLASS"]
        rev = 0
        if p.reversible & 0xFF != 0xFF:
            rev = p.reversible & 0xFF
            mask |= PR["REVERSIBLE"]
        if p.numb_path & 0xFF != 0xFF:
            rec[49] = p.numb_path & 0xFF
            mask |= PR["NUMBPATH"]
        rec[49] |= (rev << 7) & 0xFF
        if p.pkey:
            rec[50:52] = p.pkey.to_bytes(2, "big")
            mask |= PR["PKEY"]
        qsl = 0
        if p.sl & 0xFFFF != 0xFFFF:
            qsl = p.sl & 0xFFFF
            mask |= PR["SL"]
        qos = 0
        if p.qos_class != -1:
            qos = p.qos_class
            mask |= PR["QOS_CLASS"]
        rec[52:54] = ((qsl & 0xF) | ((qos & 0xFFF) << 4) if qos else qsl & 0xFFFF).to_bytes(2, "big")
        for v, off, bit in ((p.mtu, 54, "MTU"), (p.rate, 55, "RATE"), (p.pkt_life, 56, "PKTLIFETIME")):
            if v:
                rec[off] = v
                mask |= PR[bit]
                if v & 0xC0:
                    mask |= PR[bit + "SELEC" if bit != "PKTLIFETIME" else "PKTLIFETIMESELEC"]
        return mask, bytes(rec)

    def mcmember_query(self):
        p, mask = self.p, 0
        rec = bytearray(56)
        for g, off, bit in ((p.mgid, 0, "MGID"), (p.gid, 16, "PORT_GID")):
            if g is not None and any(g):
                rec[off:off + 16] = g
                mask |= MCR[bit]
        if p.mlid:
            rec[36:38] = p.mlid.to_bytes(2, "big")
            mask |= MCR["MLID"]
        if p.qkey:
            rec[32:36] = p.qkey.to_bytes(4, "big")
            mask |= MCR["QKEY"]
        for v, off, bit, sel in ((p.mtu, 38, "MTU", "MTU_SEL"), (p.rate, 42, "RATE", "RATE_SEL"),
                                 (p.pkt_life, 43, "LIFE", "LIFE_SEL")):
            if v:
                rec[off] = v
                mask |= MCR[bit] | (MCR[sel] if v & 0xC0 else 0)
        if p.tclass:
            rec[39] = p.tclass
            mask |= MCR["TCLASS"]
        if p.pkey:
            rec[40:42] = p.pkey.to_bytes(2, "big")
            mask |= MCR["PKEY"]
        sl = flow = hop = 0
        if p.sl & 0xFF != 0xFF:
            sl = p.sl & 0xFF
            mask |= MCR["SL"]
        if p.flow_label & 0xFF:
            flow = p.flow_label & 0xFF
            mask |= MCR["FLOW"]
        if p.hop_limit & 0xFF != 0xFF:
            hop = p.hop_limit & 0xFF
            mask |= MCR["HOP"]
        rec[44:48] = (((sl & 0xF) << 28) | ((flow & 0xFFFFF) << 8) | hop).to_bytes(4, "big")
        if p.scope:
            mask |= MCR["SCOPE"]
        if p.join_state:
            mask |= MCR["JOIN_STATE"]
        rec[48] = ((p.scope & 0xF) << 4) | (p.join_state & 0xF) if (p.scope or p.join_state) else 0
        if p.proxy_join & 0xFF != 0xFF:
            rec[49] = p.proxy_join & 1
            mask |= MCR["PROXY"]
        return mask, bytes(rec)

    def print_node_records(self) -> int:
        p = self.p
        recs = self.get_any(ATTR["NR"]).records
        out = []
        if p.print_desc == "ALL_DESC":
            out.append('   LID "name"\n================\n')
        for nr in recs:
            if p.print_desc == "ALL_DESC":
                if nr[4 + 2] == 1:
                    out.append(f'{_u(nr, 0, 2):6d}  "{p.name(nr)}"\n')
            elif p.print_desc == "NAME_OF_LID":
                if p.requested_lid == _u(nr, 0, 2):
                    out.append(self.node_line(nr))
            elif p.print_desc == "NAME_OF_GUID":
                if p.requested_guid == _u(nr, 24, 8):
                    out.append(self.node_line(nr))
            else:
                want = p.requested_name
                if not want or want[:64] == _cstr(nr[44:108]) or want[:64] == p.name(nr):
                    out.append(self.node_line(nr))
                    if p.print_desc == "UNIQUE_LID_ONLY":
                        break
        sys.stdout.write("".join(out))
        return 0

    def node_line(self, nr) -> str:
        d = self.p.print_desc
        if d in ("LID_ONLY", "UNIQUE_LID_ONLY"):
            return f"{_u(nr, 0, 2)}\n"
        if d == "GUID_ONLY":
            return f"0x{_u(nr, 24, 8):016x}\n"
        if d in ("NAME_OF_LID", "NAME_OF_GUID"):
            return f"{self.p.name(nr)}\n"
        return dump_node_record(nr, self.p)

    def print_issm(self) -> int:
        out = ["IsSM ports\n"]
        for cap in (PORT_CAP_IS_SM, PORT_CAP_SM_DISAB):
            rec = bytes(4) + bytes(20) + cap.to_bytes(4, "big") + bytes(40)
            r = self.get_any(ATTR["PIR"], 1 << 31, PIR_CAPMASK, rec)
            if cap == PORT_CAP_SM_DISAB:
                out.append("\nIsSMdisabled ports\n")
            out += [dump_portinfo_record(x, self.p) for x in r.records]
        sys.stdout.write("".join(out))
        return 0

    def main(self, argv) -> int:
        cfg, args = common.parse(argv, self.prog, OPTS, "DGLsy", _usage_args(), None, self.opt)
        self.p.show_keys = cfg.show_keys
        if self.name_map_file:
            self.p.name_map = _read_name_map(self.name_map_file)
        q = None
        if not self.query_type and self.command == "QUERY":
            if args:
                q = next((x for x in QUERIES if args[0].lower() in (x[0].lower(), x[1].lower())), None)
            if q is None:
                self.query_type = ATTR["NR"]
            else:
                self.query_type = q[2]
                args = args[1:]
        p = self.p
        if args:
            if p.print_desc == "NAME_OF_LID":
                p.requested_lid = strtoul(args[0]) & 0xFFFF
            elif p.print_desc == "NAME_OF_GUID":
                p.requested_guid = strtoul(args[0])
            else:
                p.requested_name = args[0]
        if p.print_desc in ("LID_ONLY", "UNIQUE_LID_ONLY", "GUID_ONLY") and not p.requested_name:
            raise Exit(2, "ERROR: name not specified\n" + cfg.usage)
        if p.print_desc == "NAME_OF_LID" and not args:
            raise Exit(2, "ERROR: lid not specified\n" + cfg.usage)
        if p.print_desc == "NAME_OF_GUID" and not args:
            raise Exit(2, "ERROR: guid not specified\n" + cfg.usage)
        if p.print_desc == "NAME_OF_LID" and not p.requested_lid:
            raise Exit(2, "ERROR: lid invalid\n" + cfg.usage)
        self.h = SaHandle(self.prog, cfg)
        try:
            if self.src:
                p.slid = self.lid_from_name(self.src)
            if self.dst:
                p.dlid = self.lid_from_name(self.dst)
            if self.command == "CLASS_PORT_INFO" or self.query_type in (CLASS_PORT_INFO, ATTR["SWIR"]):
                try:
                    r = self.h.query(GET, CLASS_PORT_INFO, 0, 0, b"", self.sm_key)
                except SaError as e:
                    sys.stderr.write(f"Query SA failed: {e}\nFailed to query SA:ClassPortInfo\n")
                    return e.code
                if r.status:
                    sys.stderr.write(report_err(r.status) + "Failed to query SA:ClassPortInfo\n")
                    return 5
                p.cpi = r.records[0] if r.records else bytes(72)
            if self.command == "NODE_RECORD":
                return self.print_node_records()
            if self.command == "CLASS_PORT_INFO":
                sys.stdout.write(dump_class_port_info(p.cpi))
                return 0
            if self.command == "ISSM":
                return self.print_issm()
            if self.command == "MCGROUPS":
                return self.dump_any(ATTR["MCMR"], dump_multicast_group_record)
            if self.command == "MCMEMBERS":
                groups = self.get_any(ATTR["MCMR"]).records
                nodes = self.get_any(ATTR["NR"]).records
                sys.stdout.write("".join(dump_multicast_member_record(g, nodes, p) for g in groups))
                return 0
            return self.run_query(self.query_type, args)
        finally:
            self.h.close()


def _read_name_map(path):
    """node-name-map: "<guid> <name>" lines, '#' comments."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                guid, _, name = line.partition(" ")
                try:
                    out[int(guid, 0)] = name.strip().strip('"')
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def main(argv, prog="saquery") -> int:
    t = Tool(prog)
    return common.run(prog, lambda: t.main(argv))
