"""``ibv_devinfo [-d dev] [-i port] [-l] [-v]``: rdma-core 44's
``libibverbs/examples/devinfo.c`` over softrdma's verbs API.

Same options (glibc ``getopt_long`` with ``"d:i:lv"``, permuting, with
glibc's error messages), same output byte for byte, same errors and exit
statuses; docs/formats/ibv_devinfo.md is the reference.  The values come
from ``Context.query_device()``, ``query_port()``, ``query_gid()`` and
``query_gid_type()``; the few a softrdma Context does not report are rxe's,
from the ``RXE`` table below (the only place they are written down).

When no daemon runs, softrdma has no devices: that is libibverbs with the
uverbs module loaded and no device, so ``No IB devices found`` (exit 255),
and ``-l`` prints ``0 HCAs found:``.

``getopt_long`` and ``strtol`` come from ``tools.libc``.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from typing import Callable

from ..verbs import device as verbs_device
from ..verbs.errors import PyverbsError
from .libc import GetoptLong, c_int, strtol

#: What rxe reports that a softrdma Context does not (docs/formats/ibv_devinfo.md,
#: "rxe values"; rxe in kernel 6.1 sets none of the ibv_query_device_ex
#: extras).  A value the verbs API does report always wins over this table.
RXE = {
    # struct ibv_device
    "transport_type": 0,                # IBV_TRANSPORT_IB
    "board_id": None,                   # rxe has no sysfs board_id file: line absent
    # struct ibv_device_attr_ex beyond orig_attr
    "general_odp_caps": 0, "rc_odp_caps": 0, "uc_odp_caps": 0, "ud_odp_caps": 0, "xrc_odp_caps": 0,
    "completion_timestamp_mask": 0, "hca_core_clock": 0, "raw_packet_caps": 0,
    "max_tso": 0, "tso_supported_qpts": 0,
    "max_rwq_indirection_tables": 0, "max_rwq_indirection_table_size": 0,
    "rx_hash_function": 0, "rx_hash_fields_mask": 0, "rss_supported_qpts": 0,
    "max_wq_type_rq": 0,
    "qp_rate_limit_min": 0, "qp_rate_limit_max": 0, "pacing_supported_qpts": 0,
    "tm_max_num_tags": 0, "tm_max_rndv_hdr_size": 0, "tm_max_ops": 0, "tm_max_sge": 0, "tm_flags": 0,
    "max_cq_count": 0, "max_cq_period": 0,
    "max_dm_size": 0,
    # struct ibv_port_attr
    "port_cap_flags2": 0,
}
# device_cap_flags_ex: the kernel's 64-bit device_cap_flags, whose low 32
# bits are orig_attr.device_cap_flags; rxe sets no upper bit, so when the
# API has no device_cap_flags_ex it is device_cap_flags.

# --------------------------------------------------------------- devinfo.c v44 strings
TRANSPORT = {0: "InfiniBand", 1: "iWARP", 2: "usNIC", 3: "usNIC UDP", 4: "unspecified"}
PORT_STATE = {1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED", 4: "PORT_ACTIVE"}
PHYS_STATE = {1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING", 5: "LINK_UP",
              6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
ATOMIC_CAP = {0: "ATOMIC_NONE", 1: "ATOMIC_HCA", 2: "ATOMIC_GLOB"}
MTU = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
WIDTH = {1: "1", 2: "4", 4: "8", 8: "12", 16: "2"}
SPEED = {1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps", 32: "25.0 Gbps",
         64: "50.0 Gbps", 128: "100.0 Gbps"}
VL = {1: "1", 2: "2", 3: "4", 4: "8", 5: "15"}
LINK_LAYER = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}
IBV_LINK_LAYER_ETHERNET = 2
IBV_TRANSPORT_IB = 0

# enum ibv_gid_type_sysfs, and what devinfo.c uses when ibv_query_gid_type fails
GID_SYSFS_IB_ROCE_V1, GID_SYSFS_ROCE_V2, GID_INVALID = 0, 1, 2
GID_TYPE = {GID_SYSFS_IB_ROCE_V1: "RoCE v1", GID_SYSFS_ROCE_V2: "RoCE v2"}
# pyverbs' query_gid_type answers the sysfs type itself (ibv_query_gid_type)
_GID_TYPE_TO_SYSFS = {GID_SYSFS_IB_ROCE_V1: GID_SYSFS_IB_ROCE_V1, GID_SYSFS_ROCE_V2: GID_SYSFS_ROCE_V2}

# print_device_cap_flags(), in its order
DEVICE_CAP_FLAGS = [
    (1 << 0, "RESIZE_MAX_WR"), (1 << 1, "BAD_PKEY_CNTR"), (1 << 2, "BAD_QKEY_CNTR"), (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"), (1 << 5, "CHANGE_PHY_PORT"), (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"), (1 << 8, "SHUTDOWN_PORT"), (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"), (1 << 11, "SYS_IMAGE_GUID"), (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"), (1 << 14, "N_NOTIFY_CQ"), (1 << 17, "MEM_WINDOW"), (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"), (1 << 21, "MEM_MGT_EXTENSIONS"), (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"), (1 << 25, "RC_IP_CSUM"), (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
]
DEVICE_CAP_FLAGS_EX = [(1 << 34, "RAW_SCATTER_FCS"), (1 << 36, "PCI_WRITE_END_PADDING")]
ODP_GENERAL = [(1 << 0, "ODP_SUPPORT"), (1 << 1, "ODP_SUPPORT_IMPLICIT")]
ODP_TRANSPORT = [(1 << 0, "SUPPORT_SEND"), (1 << 1, "SUPPORT_RECV"), (1 << 2, "SUPPORT_WRITE"),
                 (1 << 3, "SUPPORT_READ"), (1 << 4, "SUPPORT_ATOMIC"), (1 << 5, "SUPPORT_SRQ")]
RAW_PACKET_CAPS = [(1 << 0, "C-VLAN stripping offload"), (1 << 1, "Scatter FCS offload"),
                   (1 << 2, "IP csum offload"), (1 << 3, "Delay drop")]
IBV_QPT_RC, IBV_QPT_UD, IBV_QPT_RAW_PACKET = 2, 4, 8
IBV_TM_CAP_RC = 1

USAGE = """\
Usage: {0}             print the ca attributes

Options:
  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)
  -i, --ib-port=<port>   use port <port> of IB device (default all ports)
  -l, --list             print only the IB devices names
  -v, --verbose          print all the attributes of the IB device(s)
"""

LONG_OPTIONS = [("ib-dev", 1, "d"), ("ib-port", 1, "i"), ("list", 0, "l"), ("verbose", 0, "v")]

_T5 = "\t" * 5


def guid_int(guid) -> int:
    """A GUID as the verbs API gives it (``"5054:00ff:fe77:0002"``, bytes
    or an int) as a host-order 64-bit number."""
    if isinstance(guid, int):
        return guid & (2**64 - 1)
    if isinstance(guid, (bytes, bytearray)):
        return int.from_bytes(guid, "big")
    return int(str(guid).replace(":", ""), 16)


def guid_str(guid) -> str:
    """devinfo.c's guid_str(): ``%04x:%04x:%04x:%04x``."""
    g = guid_int(guid)
    return ":".join(f"{(g >> s) & 0xFFFF:04x}" for s in (48, 32, 16, 0))


def perror(msg: str, err: int) -> None:
    sys.stderr.write(f"{msg}: {os.strerror(err)}\n")


def errno_of(e: BaseException) -> int:
    code = getattr(e, "error_code", None)
    if not isinstance(code, int) or code <= 0:
        code = getattr(e, "errno", None)
    return code if isinstance(code, int) and code > 0 else errno.EIO


def device_list() -> list:
    """``ibv_get_device_list()``: the devices, in the daemon's order.  No
    daemon = no devices (an empty list, not an error)."""
    return verbs_device.get_device_list()


# --------------------------------------------------------------- print_hca_cap()
def _flags(write: Callable[[str], None], value: int, table, unknown_fmt: str | None) -> None:
    known = 0
    for bit, name in table:
        known |= bit
        if value & bit:
            write(f"{_T5}{name}\n")
    if unknown_fmt and value & ~known:
        write(f"{_T5}Unknown flags: {unknown_fmt % (value & ~known)}\n")


def _supported_qp(write, qpts: int, kinds) -> None:
    write("\t\tsupported_qp:\n")
    known = 0
    for qpt, name in kinds:
        known |= 1 << qpt
        if qpts & (1 << qpt):
            write(f"{_T5}{name}\n")
    if qpts & ~known & 0xFFFFFFFF:
        write(f"{_T5}Unknown flags: 0x{qpts & ~known & 0xFFFFFFFF:X}\n")


def _verbose_device(write, a: dict, num_comp_vectors: int) -> None:
    d = c_int
    write(f"\tmax_mr_size:\t\t\t0x{a['max_mr_size'] & (2**64 - 1):x}\n")
    write(f"\tpage_size_cap:\t\t\t0x{a['page_size_cap'] & (2**64 - 1):x}\n")
    write(f"\tmax_qp:\t\t\t\t{d(a['max_qp'])}\n")
    write(f"\tmax_qp_wr:\t\t\t{d(a['max_qp_wr'])}\n")
    flags = a["device_cap_flags"] & 0xFFFFFFFF
    write(f"\tdevice_cap_flags:\t\t0x{flags:08x}\n")
    _flags(write, flags, DEVICE_CAP_FLAGS, "0x%X")
    write(f"\tmax_sge:\t\t\t{d(a['max_sge'])}\n")
    write(f"\tmax_sge_rd:\t\t\t{d(a['max_sge_rd'])}\n")
    write(f"\tmax_cq:\t\t\t\t{d(a['max_cq'])}\n")
    write(f"\tmax_cqe:\t\t\t{d(a['max_cqe'])}\n")
    write(f"\tmax_mr:\t\t\t\t{d(a['max_mr'])}\n")
    write(f"\tmax_pd:\t\t\t\t{d(a['max_pd'])}\n")
    write(f"\tmax_qp_rd_atom:\t\t\t{d(a['max_qp_rd_atom'])}\n")
    write(f"\tmax_ee_rd_atom:\t\t\t{d(a['max_ee_rd_atom'])}\n")
    write(f"\tmax_res_rd_atom:\t\t{d(a['max_res_rd_atom'])}\n")
    write(f"\tmax_qp_init_rd_atom:\t\t{d(a['max_qp_init_rd_atom'])}\n")
    write(f"\tmax_ee_init_rd_atom:\t\t{d(a['max_ee_init_rd_atom'])}\n")
    atomic = a["atomic_caps"]
    write(f"\tatomic_cap:\t\t\t{ATOMIC_CAP.get(atomic, 'invalid atomic capability')} ({d(atomic)})\n")
    write(f"\tmax_ee:\t\t\t\t{d(a['max_ee'])}\n")
    write(f"\tmax_rdd:\t\t\t{d(a['max_rdd'])}\n")
    write(f"\tmax_mw:\t\t\t\t{d(a['max_mw'])}\n")
    write(f"\tmax_raw_ipv6_qp:\t\t{d(a['max_raw_ipv6_qp'])}\n")
    write(f"\tmax_raw_ethy_qp:\t\t{d(a['max_raw_ethy_qp'])}\n")
    write(f"\tmax_mcast_grp:\t\t\t{d(a['max_mcast_grp'])}\n")
    write(f"\tmax_mcast_qp_attach:\t\t{d(a['max_mcast_qp_attach'])}\n")
    write(f"\tmax_total_mcast_qp_attach:\t{d(a['max_total_mcast_qp_attach'])}\n")
    write(f"\tmax_ah:\t\t\t\t{d(a['max_ah'])}\n")
    write(f"\tmax_fmr:\t\t\t{d(a['max_fmr'])}\n")
    if a["max_fmr"]:
        write(f"\tmax_map_per_fmr:\t\t{d(a['max_map_per_fmr'])}\n")
    write(f"\tmax_srq:\t\t\t{d(a['max_srq'])}\n")
    if a["max_srq"]:
        write(f"\tmax_srq_wr:\t\t\t{d(a['max_srq_wr'])}\n")
        write(f"\tmax_srq_sge:\t\t\t{d(a['max_srq_sge'])}\n")
    write(f"\tmax_pkeys:\t\t\t{d(a['max_pkeys'])}\n")
    write(f"\tlocal_ca_ack_delay:\t\t{d(a['local_ca_ack_delay'])}\n")
    # print_odp_caps()
    write("\tgeneral_odp_caps:\n")
    _flags(write, a["general_odp_caps"], ODP_GENERAL, "0x%X")
    for t in ("rc", "uc", "ud", "xrc"):
        write(f"\t{t}_odp_caps:\n")
        caps = a[f"{t}_odp_caps"] & 0xFFFFFFFF
        if not caps:
            write(f"{_T5}NO SUPPORT\n")
        else:
            _flags(write, caps, ODP_TRANSPORT, "0x%X")
    if a["completion_timestamp_mask"]:
        write(f"\tcompletion timestamp_mask:\t\t\t0x{a['completion_timestamp_mask']:016x}\n")
    else:
        write("\tcompletion_timestamp_mask not supported\n")
    if a["hca_core_clock"]:
        write(f"\thca_core_clock:\t\t\t{a['hca_core_clock']}kHZ\n")
    else:
        write("\tcore clock not supported\n")
    if a["raw_packet_caps"]:
        write("\traw packet caps:\n")
        _flags(write, a["raw_packet_caps"], RAW_PACKET_CAPS, None)
    flags_ex = a["device_cap_flags_ex"] & (2**64 - 1)
    write(f"\tdevice_cap_flags_ex:\t\t0x{flags_ex:X}\n")
    _flags(write, flags_ex & 0xFFFFFFFF00000000, DEVICE_CAP_FLAGS_EX, "0x%X")
    # print_tso_caps()
    write("\ttso_caps:\n")
    write(f"\t\tmax_tso:\t\t\t{d(a['max_tso'])}\n")
    if a["max_tso"]:
        _supported_qp(write, a["tso_supported_qpts"],
                      [(IBV_QPT_RAW_PACKET, "SUPPORT_RAW_PACKET"), (IBV_QPT_UD, "SUPPORT_UD")])
    # print_rss_caps()
    write("\trss_caps:\n")
    write(f"\t\tmax_rwq_indirection_tables:\t\t\t{a['max_rwq_indirection_tables'] & 0xFFFFFFFF}\n")
    write(f"\t\tmax_rwq_indirection_table_size:\t\t\t{a['max_rwq_indirection_table_size'] & 0xFFFFFFFF}\n")
    write(f"\t\trx_hash_function:\t\t\t\t0x{a['rx_hash_function'] & 0xFFFFFFFF:x}\n")
    write(f"\t\trx_hash_fields_mask:\t\t\t\t0x{a['rx_hash_fields_mask']:X}\n")
    if a["rss_supported_qpts"]:
        _supported_qp(write, a["rss_supported_qpts"],
                      [(IBV_QPT_RAW_PACKET, "SUPPORT_RAW_PACKET"), (IBV_QPT_UD, "SUPPORT_UD")])
    write(f"\tmax_wq_type_rq:\t\t\t{a['max_wq_type_rq'] & 0xFFFFFFFF}\n")
    # print_packet_pacing_caps()
    write("\tpacket_pacing_caps:\n")
    write(f"\t\tqp_rate_limit_min:\t{a['qp_rate_limit_min'] & 0xFFFFFFFF}kbps\n")
    write(f"\t\tqp_rate_limit_max:\t{a['qp_rate_limit_max'] & 0xFFFFFFFF}kbps\n")
    if a["qp_rate_limit_max"]:
        _supported_qp(write, a["pacing_supported_qpts"],
                      [(IBV_QPT_RAW_PACKET, "SUPPORT_RAW_PACKET"), (IBV_QPT_UD, "SUPPORT_UD")])
    # print_tm_caps()
    if a["tm_max_num_tags"]:
        write(f"\tmax_rndv_hdr_size:\t\t{a['tm_max_rndv_hdr_size']}\n")
        write(f"\tmax_num_tags:\t\t\t{a['tm_max_num_tags']}\n")
        write(f"\tmax_ops:\t\t\t{a['tm_max_ops']}\n")
        write(f"\tmax_sge:\t\t\t{a['tm_max_sge']}\n")
        write("\tflags:\n")
        if a["tm_flags"] & IBV_TM_CAP_RC:
            write(f"{_T5}IBV_TM_CAP_RC\n")
    else:
        write("\ttag matching not supported\n")
    # print_cq_moderation_caps()
    if a["max_cq_count"] and a["max_cq_period"]:
        write("\n\tcq moderation caps:\n")
        write(f"\t\tmax_cq_count:\t{a['max_cq_count']}\n")
        write(f"\t\tmax_cq_period:\t{a['max_cq_period']} us\n\n")
    if a["max_dm_size"]:
        write(f"\tmaximum available device memory:\t{a['max_dm_size']}Bytes\n\n")
    write(f"\tnum_comp_vectors:\t\t{d(num_comp_vectors)}\n")


def _gid_line(i: int, raw: bytes, gid_type: int, link_layer: int) -> str | None:
    """print_formated_gid(): None for a GID whose type is invalid."""
    suffix = f", {GID_TYPE.get(gid_type, 'Invalid gid type')}" if link_layer == IBV_LINK_LAYER_ETHERNET else ""
    if gid_type == GID_SYSFS_IB_ROCE_V1:
        h = raw.hex()
        return f"\t\t\tGID[{i:3d}]:\t\t{':'.join(h[k:k + 4] for k in range(0, 32, 4))}{suffix}\n"
    if gid_type == GID_SYSFS_ROCE_V2:
        return f"\t\t\tGID[{i:3d}]:\t\t{socket.inet_ntop(socket.AF_INET6, raw)}{suffix}\n"
    return None


def _print_all_port_gids(write, ctx, port_attr: dict, port: int) -> int:
    for i in range(c_int(port_attr["gid_tbl_len"])):
        try:
            raw = bytes(ctx.query_gid(port, i).raw)
        except (PyverbsError, OSError) as e:
            sys.stderr.write(f"Failed to query gid to port {port}, index {i}\n")
            return errno_of(e)
        if not any(raw[8:]):                 # null_gid(): no interface id
            continue
        try:
            gid_type = _GID_TYPE_TO_SYSFS.get(ctx.query_gid_type(port, i), GID_INVALID)
        except (PyverbsError, OSError):
            gid_type = GID_INVALID
        line = _gid_line(i, raw, gid_type, port_attr["link_layer"])
        if line:
            write(line)
    return 0


def print_hca_cap(dev, ib_port: int, verbose: bool, write: Callable[[str], None]) -> int:
    """devinfo.c's print_hca_cap(): 0, or 1 (open), 2 (query), 3 (close),
    4 (bad port) or the errno of a failed port/GID query."""
    ib_port &= 0xFF                      # print_hca_cap() takes a uint8_t
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    try:
        ctx = verbs_device.Context(name=name)
    except (PyverbsError, OSError):
        sys.stderr.write("Failed to open device\n")
        return 1
    rc = 0
    try:
        rc = _print_hca_cap(ctx, dev, name, ib_port, verbose, write)
    finally:
        try:
            ctx.close()
        except (PyverbsError, OSError):
            sys.stderr.write("Failed to close device")
            rc = 3
    return rc


def _board_id(name: str) -> str | None:
    """devinfo.c reads board_id from the device's sysfs directory (here the
    daemon's tree) and prints it when the read is not empty."""
    from ..uapi.rundir import default_run_dir
    try:
        with open(os.path.join(default_run_dir(), "sys", "class", "infiniband", name, "board_id")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _print_hca_cap(ctx, dev, name: str, ib_port: int, verbose: bool, write) -> int:
    try:
        a = {**RXE, **vars(ctx.query_device_ex())}
    except (PyverbsError, OSError):
        sys.stderr.write("Failed to query device props\n")
        return 2
    odp = a.get("odp_caps")
    if odp is not None:                          # ibv_odp_caps, as print_odp_caps reads them
        a.update(general_odp_caps=odp.general_caps, rc_odp_caps=odp.rc_odp_caps, uc_odp_caps=odp.uc_odp_caps,
                 ud_odp_caps=odp.ud_odp_caps, xrc_odp_caps=odp.xrc_odp_caps)
    a.setdefault("device_cap_flags_ex", a["device_cap_flags"])
    rss = a.get("rss_caps")                     # ibv_rss_caps, as print_rss_caps reads it
    if rss is not None:
        a.update({k: getattr(rss, k) for k in ("max_rwq_indirection_tables", "max_rwq_indirection_table_size",
                                               "rx_hash_function", "rx_hash_fields_mask")},
                 rss_supported_qpts=rss.supported_qpts)
    tm = a.get("tm_caps")                       # ibv_tm_caps, as print_tm_caps reads it
    if tm is not None:
        a.update(tm_max_rndv_hdr_size=tm.max_rndv_hdr_size, tm_max_num_tags=tm.max_num_tags, tm_max_ops=tm.max_ops,
                 tm_max_sge=tm.max_sge, tm_flags=tm.flags)
    a["board_id"] = _board_id(name)
    nports = a["phys_port_cnt"] & 0xFF
    if ib_port and ib_port > nports:
        sys.stderr.write("Invalid port requested for device\n")
        return 4
    transport = getattr(dev, "transport_type", a["transport_type"])
    write(f"hca_id:\t{name}\n")
    write(f"\ttransport:\t\t\t{TRANSPORT.get(transport, 'invalid transport')} ({transport})\n")
    if a["fw_version"]:
        write(f"\tfw_ver:\t\t\t\t{a['fw_version']}\n")
    write(f"\tnode_guid:\t\t\t{guid_str(a['node_guid'])}\n")
    write(f"\tsys_image_guid:\t\t\t{guid_str(a['sys_image_guid'])}\n")
    write(f"\tvendor_id:\t\t\t0x{a['vendor_id'] & 0xFFFFFFFF:04x}\n")
    write(f"\tvendor_part_id:\t\t\t{c_int(a['vendor_part_id'])}\n")
    write(f"\thw_ver:\t\t\t\t0x{a['hw_ver'] & 0xFFFFFFFF:X}\n")
    if a["board_id"]:
        write(f"\tboard_id:\t\t\t{a['board_id']}\n")
    write(f"\tphys_port_cnt:\t\t\t{nports}\n")
    if verbose:
        _verbose_device(write, a, ctx.num_comp_vectors)

    for port in range(1, nports + 1):
        if ib_port and port != ib_port:
            continue
        try:
            p = {**RXE, **vars(ctx.query_port(port))}
        except (PyverbsError, OSError) as e:
            sys.stderr.write(f"Failed to query port {port} props\n")
            return errno_of(e)
        write(f"\t\tport:\t{port}\n")
        write(f"\t\t\tstate:\t\t\t{PORT_STATE.get(p['state'], 'invalid state')} ({p['state']})\n")
        write(f"\t\t\tmax_mtu:\t\t{MTU.get(p['max_mtu'], 'invalid MTU')} ({p['max_mtu']})\n")
        write(f"\t\t\tactive_mtu:\t\t{MTU.get(p['active_mtu'], 'invalid MTU')} ({p['active_mtu']})\n")
        write(f"\t\t\tsm_lid:\t\t\t{p['sm_lid']}\n")
        write(f"\t\t\tport_lid:\t\t{p['lid']}\n")
        write(f"\t\t\tport_lmc:\t\t0x{p['lmc']:02x}\n")
        write(f"\t\t\tlink_layer:\t\t{LINK_LAYER.get(p['link_layer'], 'Unknown')}\n")
        if verbose:
            write(f"\t\t\tmax_msg_sz:\t\t0x{p['max_msg_sz'] & 0xFFFFFFFF:x}\n")
            write(f"\t\t\tport_cap_flags:\t\t0x{p['port_cap_flags'] & 0xFFFFFFFF:08x}\n")
            write(f"\t\t\tport_cap_flags2:\t0x{p['port_cap_flags2']:04x}\n")
            write(f"\t\t\tmax_vl_num:\t\t{VL.get(p['max_vl_num'], 'invalid value')} ({p['max_vl_num']})\n")
            write(f"\t\t\tbad_pkey_cntr:\t\t0x{p['bad_pkey_cntr']:x}\n")
            write(f"\t\t\tqkey_viol_cntr:\t\t0x{p['qkey_viol_cntr']:x}\n")
            write(f"\t\t\tsm_sl:\t\t\t{p['sm_sl']}\n")
            write(f"\t\t\tpkey_tbl_len:\t\t{p['pkey_tbl_len']}\n")
            write(f"\t\t\tgid_tbl_len:\t\t{c_int(p['gid_tbl_len'])}\n")
            write(f"\t\t\tsubnet_timeout:\t\t{p['subnet_timeout']}\n")
            write(f"\t\t\tinit_type_reply:\t{p['init_type_reply']}\n")
            write(f"\t\t\tactive_width:\t\t{WIDTH.get(p['active_width'], 'invalid width')}X "
                  f"({p['active_width']})\n")
            write(f"\t\t\tactive_speed:\t\t{SPEED.get(p['active_speed'], 'invalid speed')} "
                  f"({p['active_speed']})\n")
            if transport == IBV_TRANSPORT_IB:
                write(f"\t\t\tphys_state:\t\t{PHYS_STATE.get(p['phys_state'], 'invalid physical state')} "
                      f"({p['phys_state']})\n")
            rc = _print_all_port_gids(write, ctx, p, port)
            if rc:
                return rc
        write("\n")
    return 0


# --------------------------------------------------------------- main()
def main(argv: list[str], prog: str = "ibv_devinfo") -> int:
    write = sys.stdout.write
    ib_devname = None
    ib_port = 0
    verbose = False
    for c, optarg in GetoptLong(argv, prog, "d:i:lv", LONG_OPTIONS):
        if c == "d":
            ib_devname = optarg
        elif c == "i":
            ib_port = c_int(strtol(optarg))
            if ib_port <= 0:
                write(USAGE.format(prog))
                return 1
        elif c == "v":
            verbose = True
        elif c == "l":
            try:
                devs = device_list()
            except (PyverbsError, OSError) as e:
                perror("Failed to get IB devices list", errno_of(e))
                return 255
            write(f"{len(devs)} HCA{'s' if len(devs) != 1 else ''} found:\n")
            for d in devs:
                write(f"\t{d.name.decode()}\n")
            write("\n")
            return 0
        else:
            write(USAGE.format(prog))
            return 255
    try:
        devs = device_list()
    except (PyverbsError, OSError) as e:
        perror("Failed to get IB devices list", errno_of(e))
        return 255
    ret = 0
    if ib_devname is not None:
        dev = next((d for d in devs if d.name.decode() == ib_devname), None)
        if dev is None:
            sys.stderr.write(f"IB device '{ib_devname}' wasn't found\n")
            return 255
        ret |= print_hca_cap(dev, ib_port, verbose, write)
    else:
        if not devs:
            sys.stderr.write("No IB devices found\n")
            return 255
        for dev in devs:
            ret |= print_hca_cap(dev, ib_port, verbose, write)
    sys.stdout.flush()
    return ret & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog=os.path.basename(sys.argv[0])))
