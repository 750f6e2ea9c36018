"""Context (an opened device), device discovery, device/port attributes."""

from __future__ import annotations

import errno
import os
import select
import socket
import stat
import subprocess
import sys
import time
import weakref

from ..enums import (IB_UVERBS_DEVICE_ATOMIC_WRITE, IB_UVERBS_DEVICE_FLUSH_GLOBAL, IB_UVERBS_DEVICE_FLUSH_PERSISTENT,
                     IBV_GID_TYPE_SYSFS_IB_ROCE_V1, IBV_GID_TYPE_SYSFS_ROCE_V2, IBV_NODE_CA, IBV_TM_CAP_RC, IBV_TRANSPORT_IB,
                     IBV_VALUES_MASK_RAW_CLOCK, ibv_device_cap_flags)
from ..uapi import clock
from ..uapi.commands import CMD, PROTOCOL_VERSION
from ..uapi.limits import MAX_DM_SIZE, MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH
from ..uapi.limits import TM_MAX_NUM_TAGS, TM_MAX_OPS, TM_MAX_RNDV_HDR_SIZE, TM_MAX_SGE
from ..uapi.raw import (MAX_RWQ_IND_TABLE_SIZE, MAX_RWQ_IND_TABLES, MAX_WQ_TYPE_RQ, RSS_SUPPORTED_QPTS,
                        RX_HASH_FUNCTIONS)
from ..uapi.rundir import socket_path
from ..wire.toeplitz import RX_HASH_FIELDS
from .addr import GID
from .base import VerbsObject
from .connection import Connection, gone_error
from .errors import PyverbsRDMAError


def _socket_path() -> str:
    return socket_path()


_announced = False
#: device_cap_flags: what this device does, named as rxe names its own
#: (rxe's 0x01a23c76) less what it does not do here -- automatic path
#: migration, changing a QP's port (one port), UD AV port enforcement, type
#: 2A windows (its type 2 windows are 2B) -- plus what it has beyond rxe:
#: XRC and flow steering on raw packet QPs
DEVICE_CAP_FLAGS = int(
    ibv_device_cap_flags.IBV_DEVICE_BAD_PKEY_CNTR | ibv_device_cap_flags.IBV_DEVICE_BAD_QKEY_CNTR
    | ibv_device_cap_flags.IBV_DEVICE_PORT_ACTIVE_EVENT | ibv_device_cap_flags.IBV_DEVICE_SYS_IMAGE_GUID
    | ibv_device_cap_flags.IBV_DEVICE_RC_RNR_NAK_GEN | ibv_device_cap_flags.IBV_DEVICE_SRQ_RESIZE
    | ibv_device_cap_flags.IBV_DEVICE_MEM_WINDOW | ibv_device_cap_flags.IBV_DEVICE_XRC
    | ibv_device_cap_flags.IBV_DEVICE_MEM_MGT_EXTENSIONS | ibv_device_cap_flags.IBV_DEVICE_MEM_WINDOW_TYPE_2B
    | ibv_device_cap_flags.IBV_DEVICE_MANAGED_FLOW_STEERING)
#: a port's effective bandwidth per lane, in 100 Mb/s (ibv_query_port_speed),
#: by ibv_port_attr.active_speed, and the lanes of each active_width
_LANE_SPEED = {1: 25, 2: 50, 4: 100, 8: 100, 16: 140, 32: 250, 64: 500, 128: 1000}
_LANES = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}

# what rxe adds to device_cap_flags_ex: IBA 1.5's FLUSH (both placement types) and ATOMIC WRITE
_CAP_FLAGS_EX = IB_UVERBS_DEVICE_FLUSH_GLOBAL | IB_UVERBS_DEVICE_FLUSH_PERSISTENT | IB_UVERBS_DEVICE_ATOMIC_WRITE


#: the embedded default a tool starts when no daemon runs
DEFAULT_DEVICE = "rxe0:lo"


class AutostartError(OSError):
    """softrdmad could not be started; ``strerror`` is the daemon's one-line
    reason (printed on stderr by ``connect`` unless told not to)."""


def connect(report: bool = True) -> Connection:
    """A connection to this run directory's softrdmad.  If none runs, start
    one with rxe0 on lo (the embedded default) and say so once on stderr;
    SOFTRDMA_AUTOSTART=0 turns that off, SOFTRDMA_PORT sets its UDP port.

    The start is ``softrdmad`` in background mode, which returns once the
    daemon serves (its pid file exists) or failed: then its one-line reason
    is printed at once (unless ``report`` is false: the caller says it) and
    AutostartError raised -- no polling, no wait."""
    global _announced
    path = _socket_path()
    try:
        return Connection(path)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ECONNREFUSED) or os.environ.get("SOFTRDMA_AUTOSTART", "1") == "0":
            raise
    run_dir = os.path.dirname(path)
    cmd = [sys.executable, "-m", "softrdma", "daemon", "--run-dir", run_dir, "--device", DEFAULT_DEVICE]
    if os.environ.get("SOFTRDMA_PORT"):
        cmd += ["--port", os.environ["SOFTRDMA_PORT"]]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    reason = proc.stderr.strip()
    # "already running"/"already serves": a concurrent starter won the run
    # directory; its daemon listens once it got that far (bounded wait)
    raced = proc.returncode != 0 and ("already running" in reason or "already serves" in reason)
    if proc.returncode != 0 and not raced:
        reason = reason or f"softrdmad: could not start in {run_dir} (exit status {proc.returncode})"
        if report:
            print(reason, file=sys.stderr)
        raise AutostartError(errno.EADDRINUSE if "already in use" in reason else errno.ENODEV, reason)
    end = time.monotonic() + (15 if raced else 0)
    while True:
        try:
            conn = Connection(path)
            break
        except OSError as e:
            if time.monotonic() >= end:
                reason = f"softrdmad: no daemon answers in {run_dir}: {e.strerror}"
                if report:
                    print(reason, file=sys.stderr)
                raise AutostartError(e.errno or errno.ENODEV, reason) from None
            time.sleep(0.02)
    if not _announced and proc.returncode == 0:
        _announced = True
        print(f"softrdma: no softrdmad was running; started one with rxe0 on lo (run dir {run_dir})",
              file=sys.stderr)
    return conn


class _Attr:
    """Attribute bag with a readable repr (pyverbs prints its attrs)."""

    def __init__(self, d: dict):
        self.__dict__.update(d)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class DeviceAttr(_Attr):
    pass


class PortAttr(_Attr):
    pass


class AsyncEvent(dict):
    """An async event (pyverbs.device.AsyncEvent, rdma-core 64): ``event_type``
    and ``ack()``; also the dict the daemon sent ({'event': ibv_event_type,
    'qp'/'cq'/...})."""

    @property
    def event_type(self) -> int:
        return self["event"]

    def ack(self) -> None:
        """ibv_ack_async_event: the library holds nothing an event pins."""


# ibv_device_attr_ex's capability groups, pyverbs' class names (their
# values: ``Context.query_device_ex``).
class ODPCaps(_Attr):
    pass


class TSOCaps(_Attr):
    pass


class RSSCaps(_Attr):
    pass


class PacketPacingCaps(_Attr):
    pass


class TMCaps(_Attr):
    pass


class CQModerationCaps(_Attr):
    pass


class PCIAtomicCaps(_Attr):
    pass


class DeviceAttrEx(_Attr):
    """ibv_device_attr_ex as pyverbs has it (orig_attr, odp_caps, ...,
    completion_timestamp_mask, hca_core_clock).  softrdma's object also
    carries orig_attr's fields directly, as the tools read them."""


class Device:
    """One entry of get_device_list() (ibv_device).  Every softrdma device is
    a RoCE channel adapter, as rxe is: node_type IBV_NODE_CA (sysfs
    ``1: CA``), transport IBV_TRANSPORT_IB (ibv_get_device_list derives it
    from the node type)."""

    def __init__(self, name: str, node_guid: str, netdev: str, index: int = 0):
        self.name = name.encode()
        self.node_guid = node_guid
        self.netdev = netdev
        self.guid = node_guid
        self.index = index
        self.node_type = IBV_NODE_CA
        self.transport_type = IBV_TRANSPORT_IB

    def __repr__(self) -> str:
        return f"Device {self.name.decode()}, node GUID {self.node_guid}"


def management() -> Connection:
    """A control connection for management commands (links, link_add,
    link_delete, resources), opened on no device."""
    try:
        return connect()
    except OSError as e:
        raise PyverbsRDMAError(f"softrdmad is not running ({e.strerror})", errno.ENODEV) from None


_abi_warned: set = set()


def same_abi(reply: dict) -> bool:
    """Whether the daemon that sent ``reply`` (``devices`` or ``open``)
    shares this library's uapi (``uapi.commands.PROTOCOL_VERSION``).  If
    not, it is a daemon from another softrdma (one left running across an
    upgrade): its devices are not this library's to use, and a warning
    says so once, as libibverbs warns of a device whose kernel ABI it does
    not support."""
    theirs = reply.get("version")
    if theirs == PROTOCOL_VERSION:
        return True
    if theirs not in _abi_warned:
        _abi_warned.add(theirs)
        sys.stderr.write(f"libibverbs: Warning: softrdmad at {socket_path()} is from another softrdma (uapi"
                         f" {theirs}, this library's {PROTOCOL_VERSION}): its devices are ignored; restart it"
                         f" (softrdmad stop, then start it again)\n")
    return False


def get_device_list() -> list[Device]:
    """The devices softrdmad serves (empty if none runs, or if it is from
    another softrdma: ``same_abi``)."""
    try:
        conn = connect()
    except OSError:
        return []
    try:
        reply, _ = conn.call(CMD.devices)
    finally:
        conn.close()
    if not same_abi(reply):
        return []
    return [Device(d["name"], d["node_guid"], d["netdev"], i) for i, d in enumerate(reply["devices"])]


class GIDEntry:
    """pyverbs.device.GIDEntry (struct ibv_gid_entry): one valid entry of
    a port's GID table."""

    def __init__(self, subnet_prefix: int = 0, interface_id: int = 0, gid_index: int = 0, port_num: int = 0,
                 gid_type: int = 0, ndev_ifindex: int = 0):
        self.gid_subnet_prefix = subnet_prefix
        self.gid_interface_id = interface_id
        self.gid_index = gid_index
        self.port_num = port_num
        self.gid_type = gid_type
        self.ndev_ifindex = ndev_ifindex

    def gid_str(self) -> str:
        return str(GID(self.gid_subnet_prefix.to_bytes(8, "big") + self.gid_interface_id.to_bytes(8, "big")))

    def __str__(self) -> str:
        f = "{:<24}: {:<20}\n"
        return (f.format("GID", self.gid_str()) + f.format("GID Index", self.gid_index)
                + f.format("Port number", self.port_num) + f.format("GID type", self.gid_type)
                + f.format("Ndev ifindex", self.ndev_ifindex))


def _gid_entry(e: dict) -> GIDEntry:
    raw = bytes.fromhex(e["gid"])
    return GIDEntry(int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big"), e["gid_index"], e["port_num"],
                    e["gid_type"], e["ndev_ifindex"])


#: the live contexts of this process (ibv_import_device finds the one whose
#: connection an fd is a dup of)
_contexts: "weakref.WeakSet[Context]" = weakref.WeakSet()


def _is_softrdma_socket(fd: int) -> bool:
    """Whether ``fd`` is a socket connected to a softrdmad (its peer is a
    run directory's control socket)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as s:
            peer = s.getpeername()
    except OSError:
        return False
    return isinstance(peer, str) and peer.endswith(os.path.basename(_socket_path()))


class Context(VerbsObject):
    """An opened device: ``Context(name='rxe0')``; closing it closes what
    was made on it first, in pyverbs' order (QPs, completion channels, CQs,
    PDs -- each PD its MRs, MWs, AHs and SRQs), then its control connection."""

    def __init__(self, name: str | bytes | None = None, **kw):
        self.imported_fd = -1
        if kw.get("cmd_fd") is not None:
            self._import(kw["cmd_fd"])
            return
        if isinstance(name, bytes):
            name = name.decode()
        try:
            self.conn = connect()
        except OSError as e:
            raise PyverbsRDMAError(f"Failed to open device {name}: softrdmad is not running ({e.strerror})",
                                   errno.ENODEV) from None
        if name is None:
            devs = self.conn.call(CMD.devices)[0]["devices"]
            if not devs:
                self.conn.close()
                raise PyverbsRDMAError("No IB devices found", errno.ENODEV)
            name = devs[0]["name"]
        try:
            reply, _ = self.conn.call(CMD.open, device=name)
        except PyverbsRDMAError:
            self.conn.close()
            raise
        if not same_abi(reply):
            self.conn.close()
            raise PyverbsRDMAError(f"Failed to open device {name}: softrdmad is from another softrdma (restart"
                                   f" it)", errno.ENODEV)
        self.name = name
        self.node_guid = reply["node_guid"]
        self._attr = reply["attr"]
        self._refs = weakref.WeakSet()
        self.closed = False
        self.closing = False
        _contexts.add(self)

    def _import(self, cmd_fd: int) -> None:
        """ibv_import_device(cmd_fd): a second context on the uverbs file
        of another -- here its control connection, whose socket ``cmd_fd``
        is a dup of; the context owns the fd (closed with it).  Objects of
        either context are the connection's, so a PD, MR or DM of one is
        imported into the other by its handle (PD/MR/DM(..., handle=h)).
        The connection carries one process's requests (a reply is read by
        whoever waits on the socket), so a context of another process --
        the fd passed over SCM_RIGHTS or inherited -- cannot be imported:
        EOPNOTSUPP; an fd that is no softrdma context's: EINVAL."""
        try:
            st = os.fstat(cmd_fd)
        except (OSError, TypeError, ValueError):
            raise PyverbsRDMAError("Failed to import device", errno.EBADF) from None
        me = os.getpid()
        for orig in list(_contexts):
            conn = orig.conn
            if orig.closed or orig.imported_fd >= 0 or conn.dead or conn._pid != me:
                continue
            try:
                ost = os.fstat(conn.fileno())
            except OSError:
                continue
            if (ost.st_dev, ost.st_ino) == (st.st_dev, st.st_ino):
                break
        else:
            if stat.S_ISSOCK(st.st_mode) and _is_softrdma_socket(cmd_fd):
                raise PyverbsRDMAError("Failed to import device: not a context of this process (softrdma's"
                                       " control connection carries one process's requests)", errno.EOPNOTSUPP)
            raise PyverbsRDMAError("Failed to import device", errno.EINVAL)
        conn.users += 1
        self.conn = conn
        self.imported_fd = cmd_fd
        self.name = orig.name
        self.node_guid = orig.node_guid
        self._attr = orig._attr
        self._refs = weakref.WeakSet()
        self.closed = False
        self.closing = False

    def add_ref(self, obj) -> None:
        """A PD, CQ or completion channel made on this context: closed
        before it (``ctx_close_rank`` order)."""
        self._refs.add(obj)

    def _close_children(self) -> None:
        # Each is closed (and its rings, fds, memory released) in pyverbs'
        # order; the daemon's objects go when the connection closes, all of
        # them, as the kernel destroys a uverbs file's objects on its close
        # -- also those whose Python object is already gone.
        # (a connection an imported context still uses stays: then what
        # this context made is destroyed one by one, as ibv_close_device's)
        self.closing = self.conn.users == 1
        for qp in [o for o in list(self.conn._tracked)
                   if not o.closed and hasattr(o, "qp_num") and getattr(o, "ctx", self) is self]:
            qp.close()
        for obj in sorted(list(self._refs), key=lambda o: o.ctx_close_rank):
            obj.close()

    def _release(self) -> None:
        _contexts.discard(self)
        self.conn.users -= 1
        if self.conn.users <= 0:
            self.conn.close()
        if self.imported_fd >= 0:
            os.close(self.imported_fd)
            self.imported_fd = -1

    @property
    def num_comp_vectors(self) -> int:
        return 1

    @property
    def cmd_fd(self) -> int:
        """ibv_context.cmd_fd: the fd the context's commands go through --
        here the control connection's socket (the uverbs file's role); an
        imported context's is the fd it was imported from."""
        return self.imported_fd if self.imported_fd >= 0 else self.conn.fileno()

    def query_device(self) -> DeviceAttr:
        a = self._attr
        guid = self.node_guid.replace(":", "")
        return DeviceAttr({
            "fw_version": a.get("fw_ver", "0.0.0"), "node_guid": self.node_guid, "sys_image_guid": self.node_guid,
            "max_mr_size": a.get("max_mr_size", (1 << 64) - 1), "page_size_cap": 0xFFFFF000, "vendor_id": a.get("vendor_id", 0xFFFFFF),
            "vendor_part_id": a.get("vendor_part_id", 0), "hw_ver": a.get("hw_ver", 0), "max_qp": a["max_qp"], "max_qp_wr": a["max_qp_wr"],
            "device_cap_flags": DEVICE_CAP_FLAGS, "max_sge": a["max_sge"], "max_sge_rd": a["max_sge"],
            "max_cq": a.get("max_cq", 1 << 16), "max_cqe": a.get("max_cqe", (1 << 15) - 1),
            "max_mr": a.get("max_mr", 1 << 16), "max_pd": a.get("max_pd", 1 << 16),
            "max_qp_rd_atom": a["max_qp_rd_atom"], "max_ee_rd_atom": 0, "max_res_rd_atom": 0,
            "max_qp_init_rd_atom": a["max_qp_init_rd_atom"], "max_ee_init_rd_atom": 0, "atomic_caps": 1,
            "max_ee": 0, "max_rdd": 0, "max_mw": a.get("max_mw", 1 << 16), "max_raw_ipv6_qp": 0, "max_raw_ethy_qp": 0,
            "max_mcast_grp": MAX_MCAST_GRP, "max_mcast_qp_attach": MAX_MCAST_QP_ATTACH,
            "max_total_mcast_qp_attach": MAX_TOTAL_MCAST_QP_ATTACH,
            "max_ah": a.get("max_ah", 1 << 15), "max_fmr": 0, "max_map_per_fmr": 0,
            "max_srq": a.get("max_srq", 1 << 16),
            "max_srq_wr": a["max_qp_wr"], "max_srq_sge": a["max_sge"], "max_pkeys": 1, "local_ca_ack_delay": 15,
            "phys_port_cnt": a.get("phys_port_cnt", 1), "guid": guid})

    def query_device_ex(self) -> DeviceAttrEx:
        """rxe's values but ODP (the daemon's, for this process: see
        device.odp) and RSS on raw packet QPs (``uapi.raw``, Toeplitz): no
        TSO, pacing or CQ moderation (device memory: the daemon's pool, see
        verbs.dm).  Beyond rxe also: a completion clock (hca_core_clock in
        kHz and completion_timestamp_mask from uapi.clock: extended CQs'
        timestamps, see cqex.py) and tag matching on RC (tm_caps from
        uapi.limits, see transport.tm)."""
        orig = self.query_device()
        return DeviceAttrEx({
            **vars(orig), "orig_attr": orig, "comp_mask": 0,
            "odp_caps": ODPCaps(self._attr.get("odp_caps") or {"general_caps": 0, "rc_odp_caps": 0, "uc_odp_caps": 0,
                                                               "ud_odp_caps": 0, "xrc_odp_caps": 0}),
            "completion_timestamp_mask": clock.TIMESTAMP_MASK, "hca_core_clock": clock.hca_core_clock_khz(),
            "device_cap_flags_ex": orig.device_cap_flags | _CAP_FLAGS_EX,
            "tso_caps": TSOCaps({"max_tso": 0, "supported_qpts": 0}),
            "rss_caps": RSSCaps({"supported_qpts": RSS_SUPPORTED_QPTS,
                                 "max_rwq_indirection_tables": MAX_RWQ_IND_TABLES,
                                 "max_rwq_indirection_table_size": MAX_RWQ_IND_TABLE_SIZE,
                                 "rx_hash_function": RX_HASH_FUNCTIONS, "rx_hash_fields_mask": RX_HASH_FIELDS}),
            "max_wq_type_rq": MAX_WQ_TYPE_RQ,
            "packet_pacing_caps": PacketPacingCaps({"qp_rate_limit_min": 0, "qp_rate_limit_max": 0,
                                                    "supported_qpts": 0}),
            "raw_packet_caps": 0,
            "tm_caps": TMCaps({"max_rndv_hdr_size": TM_MAX_RNDV_HDR_SIZE, "max_num_tags": TM_MAX_NUM_TAGS,
                               "flags": IBV_TM_CAP_RC, "max_ops": TM_MAX_OPS, "max_sge": TM_MAX_SGE}),
            "cq_mod_caps": CQModerationCaps({"max_cq_count": 0, "max_cq_period": 0}),
            "max_dm_size": MAX_DM_SIZE,
            "pci_atomic_caps": PCIAtomicCaps({"fetch_add": 0, "swap": 0, "compare_swap": 0}),
            "phys_port_cnt_ex": orig.phys_port_cnt})

    def query_port(self, port_num: int = 1) -> PortAttr:
        if not 1 <= port_num <= self._attr.get("phys_port_cnt", 1):
            raise PyverbsRDMAError(f"Failed to query port {port_num}", errno.EINVAL)
        # active_speed_ex (rdma-core 64): 0, as rxe's (its speed fits active_speed)
        return PortAttr({"active_speed_ex": 0, **self.conn.call(CMD.query_port, port=port_num)[0]["attr"]})

    def query_port_speed(self, port_num: int) -> int:
        """ibv_query_port_speed (rdma-core 64): the port's effective
        bandwidth in 100 Mb/s, its lanes times the speed of one (what the
        port reports as active_width and active_speed; rxe has no such op)."""
        try:
            a = self.query_port(port_num)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(f"Failed to query port speed for port {port_num}", e.error_code) from None
        speed, lanes = _LANE_SPEED.get(a.active_speed), _LANES.get(a.active_width)
        if speed is None or lanes is None:
            raise PyverbsRDMAError(f"Failed to query port speed for port {port_num}", errno.EINVAL)
        return speed * lanes

    def get_pkey_index(self, port_num: int, pkey: int) -> int:
        """ibv_get_pkey_index: the first index whose P_Key is ``pkey``
        (ibv_query_pkey until it fails, as libibverbs walks the table)."""
        i = 0
        while True:
            try:
                if self.query_pkey(port_num, i) == pkey:
                    return i
            except PyverbsRDMAError:
                raise PyverbsRDMAError(f"Failed to get pkey index of pkey = {pkey} of port {port_num}") from None
            i += 1

    def query_pkey(self, port_num: int, index: int) -> int:
        """ibv_query_pkey: entry ``index`` of the port's P_Key table (rxe's:
        one entry, the default P_Key 0xffff; an IB port's: as its SM
        programmed it); an index past pkey_tbl_len or another port is
        EINVAL as ib_query_pkey's check."""
        try:
            tbl_len = self.query_port(port_num).pkey_tbl_len
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(f"Failed to query pkey {index} of port {port_num}", e.error_code) from None
        if type(index) is not int or not 0 <= index < tbl_len:
            raise PyverbsRDMAError(f"Failed to query pkey {index} of port {port_num}", errno.EINVAL)
        try:
            return self.conn.call(CMD.query_pkey, port=port_num, index=index)[0]["pkey"]
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(f"Failed to query pkey {index} of port {port_num}", e.error_code) from None

    def query_gid(self, port_num: int, index: int) -> GID:
        reply, _ = self.conn.call(CMD.query_gid, port=port_num, index=index)
        return GID(bytes.fromhex(reply["gid"]))

    def query_gid_type(self, port_num: int, index: int) -> int:
        reply, _ = self.conn.call(CMD.query_gid, port=port_num, index=index)
        if reply["type"] is None:
            raise PyverbsRDMAError("Failed to query gid type", errno.ENODATA)
        # ibv_query_gid_type answers enum ibv_gid_type_sysfs (what sysfs's
        # gid_attrs/types says: "RoCE v2" -> IBV_GID_TYPE_SYSFS_ROCE_V2, 1),
        # not ibv_gid_type (query_gid_ex's, where RoCE v2 is 2); an IB
        # port's GIDs read "IB/RoCE v1" there
        return IBV_GID_TYPE_SYSFS_ROCE_V2 if reply["type"] == "RoCE v2" else IBV_GID_TYPE_SYSFS_IB_ROCE_V1

    def query_gid_table(self, max_entries: int, flags: int = 0) -> list[GIDEntry]:
        """ibv_query_gid_table: the valid GID entries of every port, at most
        ``max_entries`` (-EINVAL when they do not fit, as the kernel's
        rdma_query_gid_table; pyverbs passes the negative return on)."""
        if flags:
            raise PyverbsRDMAError("Failed to query gid tables of the device", -errno.EINVAL)
        try:
            reply, _ = self.conn.call(CMD.query_gid_table, max_entries=max_entries)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to query gid tables of the device", -abs(e.error_code)) from None
        return [_gid_entry(e) for e in reply["entries"]]

    def query_gid_ex(self, port_num: int, gid_index: int, flags: int = 0) -> GIDEntry:
        """ibv_query_gid_ex: the entry at ``gid_index`` of port ``port_num``;
        EINVAL for another port, an index past the table or flags, ENODATA
        for an empty index (ib_uverbs' QUERY_GID_ENTRY)."""
        msg = f"Failed to query gid table of port {port_num} in index {gid_index}"
        if flags or not 1 <= port_num <= self._attr.get("phys_port_cnt", 1):
            raise PyverbsRDMAError(msg, errno.EINVAL)
        if type(gid_index) is not int or not 0 <= gid_index < self.query_port(port_num).gid_tbl_len:
            raise PyverbsRDMAError(msg, errno.EINVAL)
        try:
            reply, _ = self.conn.call(CMD.query_gid_table, max_entries=gid_index + 1 + 0xFFFF)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(msg, abs(e.error_code)) from None
        for e in reply["entries"]:
            if e["gid_index"] == gid_index and e["port_num"] == port_num:
                return _gid_entry(e)
        raise PyverbsRDMAError(msg, errno.ENODATA)

    def query_rt_values_ex(self, comp_mask: int = IBV_VALUES_MASK_RAW_CLOCK) -> tuple[int, int]:
        """ibv_query_rt_values_ex: the device's raw clock, as pyverbs'
        (tv_sec, tv_nsec) of ``raw_clock``, which carries the free-running
        counter's cycles in tv_nsec and 0 in tv_sec as mlx5's
        mlx5_query_rt_values does (uapi.clock: the counter completions are
        stamped with).  IBV_VALUES_MASK_RAW_CLOCK is the only value a
        device has (verbs.h): mlx5 answers the bits it knows, and pyverbs
        raises when the comp_mask that comes back is not the one asked."""
        if comp_mask != comp_mask & IBV_VALUES_MASK_RAW_CLOCK:
            raise PyverbsRDMAError("Failed to query real time values with requested comp_mask")
        return 0, clock.read_free_running()

    def get_async_event(self, timeout: float | None = None) -> dict:
        """The next async event ({'event': ibv_event_type, 'qp'/'cq'/...})."""
        conn = self.conn
        conn.poll_events()
        while not conn.events:
            if conn.dead:                            # IBV_EVENT_DEVICE_FATAL was the last one
                raise gone_error("get async event")
            r, _, _ = select.select([conn], [], [], timeout)
            if not r:
                raise PyverbsRDMAError("Failed to get async event: timed out", errno.EAGAIN)
            conn.poll_events()
        return AsyncEvent(conn.events.popleft())
