"""The control protocol's commands, declared once: what the library sends
(``verbs.connection.Connection.call(CMD.create_cq, ...)``) and what the
daemon dispatches (``Daemon.command``: a ``cmd_<name>`` handler each).

Per command (``Command``): its name; the request's fields in the order the
daemon's handler reads them, each with its C width or kind (``Field``);
the fds the request carries and the reply returns; the reply's fields; the
errnos it may return besides the ones every command may (``COMMON_ERRNOS``);
and whether it needs a device opened on the connection.

``check_request`` is the check both sides run before the handler: the
command exists (EOPNOTSUPP), the connection has a device if the command
needs one (EINVAL), then the request's leading fields -- those the handler
reads before it looks at any state (an object, the device's limits, the
caller's capabilities) -- with the messages and errnos ``uapi.request``
gives.  Everything after the first state-dependent step stays the
handler's, so a request with several faults is answered as before: the
first fault the handler meets.  The library runs the same check before it
sends (``Connection.call``), so a request that would be refused this way
fails without a round trip, with the reply the daemon would have given.
"""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path
from typing import NamedTuple

from ..errors import VerbsError
from . import request as rq
from .capture import BOTH


def _abi_fingerprint() -> str:
    """This package's identity: a hash of its sources (the command table,
    the ring and WQE layouts, the limits -- all the library and the daemon
    share).  A daemon left running across an upgrade, or started from
    another installation, then answers with another value, and the library
    refuses it (as libibverbs skips a device whose kernel ABI it does not
    support) instead of misreading its rings."""
    h = hashlib.sha256()
    try:
        for path in sorted(Path(__file__).parent.glob("*.py")):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    except OSError:                          # (sources not on disk, as in a zip: no fingerprint to take)
        h = hashlib.sha256(b"sources unreadable")
    return h.hexdigest()[:16]


#: the protocol's version, in the ``devices`` and ``open`` replies
PROTOCOL_VERSION = _abi_fingerprint()
#: errnos any command may return: a malformed request (EINVAL), an unknown
#: command (EOPNOTSUPP), the daemon out of memory or failing inside (EIO)
COMMON_ERRNOS = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOMEM, errno.EIO)

# field kinds
UINT = "uint"            # an unsigned integer of ``limit`` at most (rq.uint)
HANDLE = "handle"        # an object handle, looked up as Client.get does ("no pd with handle 'x'")
U32_HANDLE = "u32handle"  # an object handle checked as a u32 first (rq.handle: the rdma_cm ids)
STRING = "string"        # text of ``limit`` characters at most (rq.string)
OBJ = "obj"              # a JSON object (rq.obj)
ANY = "any"              # a JSON value the handler checks itself (its own messages)
FDS = "fds"              # not a field: the count of fds the request carries, ``limit``, checked here
_REQUIRED = rq.REQUIRED


class Field(NamedTuple):
    name: str
    kind: str
    limit: int = rq.U32                 # UINT: the C field's max; STRING: its length; FDS: the count
    default: object = _REQUIRED         # UINT/STRING/OBJ: the value when absent (else: required)
    lo: int = 0                         # UINT: the least value
    of: str = ""                        # HANDLE/U32_HANDLE: the object kind; FDS: the refusal's message
    optional: bool = False              # HANDLE: 0/None/absent is "none"


def u8(name: str, default=_REQUIRED) -> Field:
    return Field(name, UINT, rq.U8, default)


def u16(name: str, default=_REQUIRED) -> Field:
    return Field(name, UINT, rq.U16, default)


def u32(name: str, default=_REQUIRED, limit: int = rq.U32) -> Field:
    return Field(name, UINT, limit, default)


def u64(name: str, default=_REQUIRED, lo: int = 0) -> Field:
    return Field(name, UINT, rq.U64, default, lo)


def handle(name: str, of: str | None = None, optional: bool = False) -> Field:
    return Field(name, HANDLE, rq.U32, of=of or name, optional=optional)


def cm_id() -> Field:
    return Field("id", U32_HANDLE, rq.U32, of="cm_id")


def string(name: str, limit: int = 64, default=_REQUIRED) -> Field:
    return Field(name, STRING, limit, default)


def obj(name: str, default=_REQUIRED) -> Field:
    return Field(name, OBJ, 0, default)


def any_(name: str) -> Field:
    return Field(name, ANY)


def fds(n: int, why: str) -> Field:
    """The request carries ``n`` fds; ``why`` is the refusal's message."""
    return Field("", FDS, n, of=why)


class Command(NamedTuple):
    name: str
    request: tuple = ()                 # Fields in the order the handler reads them
    reply: tuple = ()                   # the reply's fields (besides seq and errno)
    errnos: tuple = ()                  # beyond COMMON_ERRNOS
    device: bool = True                 # needs a device opened on the connection
    fds_out: int = 0                    # fds the reply carries
    state_first: bool = False           # the handler looks at state before any field: no field is pre-checked

    @property
    def fields(self) -> frozenset:
        """The request's field names."""
        return frozenset(f.name for f in self.request if f.kind != FDS)


_E = errno
# rdma_cm's binding of a source address and port (cma_check_port, cma_use_port,
# an address no device has), explicit or implicit (listen, resolve, join)
_BIND_ERRNOS = (_E.EADDRINUSE, _E.EADDRNOTAVAIL, _E.EACCES, _E.ENODEV)
_TABLE = (
    # -- the device (ibv_get_device_list, ibv_open_device, ibv_query_*)
    Command("devices", (), ("version", "devices"), device=False),
    Command("open", (string("device"),), ("version", "device", "node_guid", "attr"), (_E.ENODEV, _E.EMFILE), device=False),
    Command("query_port", (any_("port"),), ("attr",)),
    Command("query_gid", (any_("index"), any_("port")), ("gid", "type")),
    Command("query_pkey", (u8("port", 1), u16("index")), ("pkey",)),
    Command("query_gid_table", (u32("max_entries"),), ("entries",)),
    # -- PD, MR, MW
    Command("alloc_pd", (), ("pd",), state_first=True),
    Command("dealloc_pd", (handle("pd"),), (), (_E.EBUSY,)),
    # offset: where in the memfd the MR starts (an MR on part of an ibv_alloc_buf buffer)
    Command("reg_mr", (handle("pd"), u64("length", lo=1), u64("addr"), u32("access"), u64("offset", 0),
                       fds(1, "reg_mr needs the memory fd")),
            ("mr", "lkey", "rkey"), (_E.EPERM,)),
    Command("dereg_mr", (handle("mr"),)),
    # ibv_rereg_mr: the fields after flags are read only for the flags that name them
    # (a new translation: [addr, addr + length) of the process, as reg_user_mr)
    Command("rereg_mr", (handle("mr"), u32("flags"), handle("pd", optional=True), u32("access", 0),
                         u64("length", 0, lo=1), u64("addr", 0, lo=1)),
            ("lkey", "rkey"), (_E.EBUSY, _E.EPERM, _E.EFAULT)),
    Command("alloc_mw", (handle("pd"), any_("type")), ("mw", "rkey")),
    Command("dealloc_mw", (handle("mw"),)),
    # device memory (ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr)
    Command("alloc_dm", (u64("length", lo=1), u32("log_align_req", 0), fds(1, "alloc_dm needs the memory fd")),
            ("dm",)),
    Command("free_dm", (handle("dm"),), (), (_E.EBUSY,)),
    Command("reg_dm_mr", (handle("pd"), handle("dm"), u64("offset"), u64("length"), u32("access")),
            ("mr", "lkey", "rkey")),
    # -- completion channels and CQs
    Command("create_comp_channel", (), ("channel",), fds_out=1),
    Command("destroy_comp_channel", (handle("channel"),), (), (_E.EBUSY,)),
    Command("create_cq", (fds(1, "create_cq needs the ring fd"), handle("channel", optional=True), u32("cqe", 1),
                          u64("wc_flags", 0)),
            ("cq",)),
    Command("resize_cq", (handle("cq"), fds(1, "resize_cq needs the ring fd"), u32("cqe")), ("cqe",)),
    Command("destroy_cq", (handle("cq"),), (), (_E.EBUSY,)),
    # -- QPs (fds: the SQ ring, the RQ ring unless the QP has an SRQ, the
    #    doorbell -- 3 or 2, which the handler checks once it has the SRQ)
    Command("create_qp", (handle("pd"), handle("send_cq", "cq"), handle("recv_cq", "cq"),
                          handle("srq", optional=True), obj("cap", {}), u32("qp_type"), any_("sq_sig_all")),
            ("qp", "qp_num"), (_E.EPERM,)),
    Command("modify_qp", (handle("qp"), u32("mask"), obj("attr", {}))),
    Command("query_qp", (handle("qp"), u32("mask", 0)), ("attr",)),
    Command("destroy_qp", (handle("qp"),), (), (_E.EBUSY,)),
    Command("attach_mcast", (handle("qp"), any_("gid"), any_("lid")), (), (_E.EADDRNOTAVAIL,)),
    Command("detach_mcast", (handle("qp"), any_("gid"), any_("lid"))),
    # -- SRQs
    Command("create_srq", (handle("pd"), fds(2, "create_srq needs 2 fds"), u32("max_wr", 256), u32("max_sge", 4),
                           u32("srq_limit", 0)), ("srq",)),
    Command("modify_srq", (handle("srq"), u32("srq_limit"))),
    Command("resize_srq", (handle("srq"), fds(1, "resize_srq needs the ring fd"), u32("max_wr"),
                           u32("srq_limit", None)), ("max_wr",)),
    Command("query_srq", (handle("srq"),), ("max_wr", "max_sge", "srq_limit")),
    Command("destroy_srq", (handle("srq"),), (), (_E.EBUSY,)),
    # -- AHs
    Command("create_ah", (handle("pd"), any_("attr")), ("ah",)),
    Command("destroy_ah", (handle("ah"),)),
    # -- packet capture (ibdump)
    Command("capture_start", (fds(2, "capture_start needs the ring fd and the doorbell fd"),
                              u32("directions", BOTH)), ("capture", "entries")),
    Command("capture_stop", (handle("capture"),), ("packets", "bytes", "dropped")),
    # -- links and resources (rdma link, rdma resource): no device needed
    Command("links", (), ("links",), device=False),
    # type "rxe" (RoCEv2 on ``netdev``) or "ib" (an InfiniBand port on CA port ``port`` of the
    # fabric ``fabric``'s CA ``node``: its node description, topology name or 0x<node GUID>)
    Command("link_add", (string("name", 63), string("netdev", 15, ""), any_("gso"), string("type", 15, "rxe"),
                         string("fabric", 255, ""), string("node", 255, ""), u8("port", 1)), ("ifindex",),
            (_E.EPERM, _E.EEXIST, _E.ENODEV, _E.EADDRINUSE, _E.ENOENT, _E.EBUSY, _E.ECONNREFUSED,
             _E.ETIMEDOUT), device=False, state_first=True),
    Command("link_set", (string("name"), obj("faults", {}), u64("seed", None)), ("faults", "fault_counters"),
            (_E.EPERM, _E.ENODEV), device=False, state_first=True),
    Command("link_delete", (string("name"),), (), (_E.EPERM, _E.ENODEV, _E.EBUSY), device=False, state_first=True),
    # a umad file of an IB device's port (the diags' MADs through its QP1): the socket of uapi.umad
    # records; ``classes``: the management classes whose requests it takes (a server's); ``issm``:
    # the port has IsSM while the file is open (the kernel's issm device, for an SM bound to the port)
    Command("umad_open", (string("name"), u8("port", 1), any_("classes"), u8("issm", 0)),
            ("hi_tid", "lid", "sm_lid", "node_info", "port_info"), (_E.ENODEV, _E.EMFILE), device=False,
            fds_out=1),
    # -- PCI functions of ConnectX-like devices: identity (mst, flint q), NV configuration
    #    (mlxconfig), firmware (flint burn, mlxfwreset), SR-IOV (sriov_numvfs, ip link set PF vf N)
    Command("pci_functions", (), ("functions",), device=False),
    Command("nvconfig", (string("name"), obj("set", {}), any_("reset"), obj("cable", {})), ("rows", "cables"),
            (_E.EPERM, _E.ENODEV), device=False, state_first=True),
    Command("fw_reset", (string("name"),), ("nv_changed", "fw_changed", "totalvfs", "fw_running", "link_layer"),
            (_E.EPERM, _E.ENODEV, _E.EBUSY), device=False, state_first=True),
    Command("fw_burn", (string("name"), fds(1, "fw_burn needs the image fd"), any_("allow_psid_change")),
            ("version", "previous"), (_E.EPERM, _E.ENODEV, _E.EFBIG), device=False, state_first=True),
    Command("sriov_numvfs", (string("name"), any_("numvfs")), (),
            (_E.EPERM, _E.ENODEV, _E.ENOENT, _E.ERANGE, _E.EBUSY, _E.EEXIST), device=False, state_first=True),
    Command("vf_set", (string("name"), u32("vf"), obj("set")), (),
            (_E.EPERM, _E.ENODEV), device=False, state_first=True),
    # sub-functions (mlxdevm/devlink ``dev show``, ``port show|add|function set|del``): ``dev`` is a
    # devlink handle (``pci/<bdf>``), ``index`` a port index; errors carry mlx5_core's extack
    Command("devm_show", (any_("dev"), any_("index")), ("devs", "ports"), (_E.ENODEV,), device=False,
            state_first=True),
    Command("devm_port_add", (string("dev"), string("flavour"), any_("pfnum"), any_("sfnum"), any_("controller"),
                              any_("index")),
            ("port",), (_E.EPERM, _E.ENODEV, _E.EEXIST, _E.ENOSPC), device=False, state_first=True),
    Command("devm_port_set", (string("dev"), u32("index"), any_("hw_addr"), any_("state")), (),
            (_E.EPERM, _E.ENODEV, _E.EBUSY), device=False, state_first=True),
    Command("devm_port_del", (string("dev"), u32("index")), (), (_E.EPERM, _E.ENODEV, _E.EBUSY), device=False,
            state_first=True),
    # -- ECN / DCQCN settings (mlx5's ecn/roce_np, ecn/roce_rp; softrdma ecn)
    Command("ecn", (string("name"), obj("set", {})), ("ecn",), (_E.EPERM, _E.ENODEV), device=False,
            state_first=True),
    # -- IPoIB interfaces (ip link/neigh on ib0, its sysfs files: create_child, delete_child, mode, umcast)
    Command("ipoib", (string("action", 16, "show"), string("ifname", 15, ""), string("parent", 15, ""),
                      u32("pkey", 0), string("attr", 16, ""), string("value", 16, "")), ("interfaces",),
            (_E.EPERM, _E.ENODEV, _E.EEXIST), device=False, state_first=True),
    Command("resources", (), ("resources", "contexts"), device=False),
    # -- rdma statistic (RDMA_NLDEV_CMD_STAT_*) and softrdma top: netlink's own checks, device first
    Command("stat_get", (any_("dev"), any_("port"), any_("res"), any_("cntn"), any_("mode"), any_("quiet")),
            ("ifindex", "ifname", "port", "hwcounters", "names", "counters", "mode", "mask"), (_E.ENOENT,),
            device=False, state_first=True),
    Command("stat_dump", (any_("res"), any_("dev"), any_("port"), any_("start")),
            ("ifindex", "ifname", "names", "counters", "next"), device=False, state_first=True),
    Command("stat_set", (any_("dev"), any_("port"), any_("res"), any_("mode"), any_("mask"), any_("lqpn"),
                         any_("cntn"), any_("hwcounters")), ("ifindex", "ifname", "port", "cntn", "lqpn"),
            (_E.EPERM, _E.EBUSY, _E.ENOENT), device=False, state_first=True),
    Command("stat_del", (any_("res"), any_("dev"), any_("port"), any_("cntn"), any_("lqpn")),
            ("ifindex", "ifname", "port", "cntn", "lqpn"), (_E.EPERM, _E.ENOENT), device=False, state_first=True),
    Command("stat_get_status", (any_("dev"), any_("port")), ("ifindex", "ifname", "port", "hwcounters"),
            device=False, state_first=True),
    Command("stat_snapshot", (any_("start"),), ("names", "devices", "qps", "next"), device=False),
    # -- rdma_cm (ucma): an event channel needs no device
    Command("cm_create_id", (u16("ps"), string("qp_type", 4, "RC")), ("id",), device=False),
    Command("cm_destroy_id", (cm_id(),), device=False),
    Command("cm_set_option", (cm_id(), string("option", 32), any_("value")), (), (_E.ENOSYS,), device=False),
    Command("cm_bind_addr", (cm_id(), u32("family", 4, limit=27), any_("ip"), u16("port", 0)), ("info",),
            _BIND_ERRNOS, device=False),
    Command("cm_resolve_addr", (cm_id(), u32("timeout_ms", 2000), any_("src"), any_("dst"), u16("port", 0),
                                     u32("family", 0, limit=27)), (),
            _BIND_ERRNOS, device=False),
    Command("cm_resolve_route", (cm_id(), u32("timeout_ms", 2000)), (), (_E.EAGAIN,), device=False),
    Command("cm_listen", (cm_id(), u32("backlog", 0, limit=0x7FFFFFFF)), ("info",), _BIND_ERRNOS, device=False),
    Command("cm_connect", (cm_id(), any_("conn"), any_("private_data")), device=False),
    Command("cm_accept", (cm_id(), any_("conn"), any_("private_data")), device=False),
    Command("cm_reject", (cm_id(), any_("private_data")), device=False),
    Command("cm_disconnect", (cm_id(),), device=False),
    Command("cm_notify", (cm_id(),), device=False),
    Command("cm_init_qp_attr", (cm_id(), u32("qp_state", limit=6)), ("attr",), device=False),
    Command("cm_query", (cm_id(),), ("info",), device=False),
    Command("cm_channel_token", (), ("token",), device=False),
    Command("cm_migrate_id", (cm_id(), string("token")), ("id",), device=False),
    Command("cm_join_multicast", (cm_id(), any_("addr")), (), _BIND_ERRNOS, device=False),
    Command("cm_leave_multicast", (cm_id(), any_("addr")), (), (_E.EADDRNOTAVAIL,), device=False),
    # -- MRs on the process's own memory (ibv_reg_mr on a user address; with
    #    IBV_ACCESS_ON_DEMAND: ODP, implicit for addr 0 and length SIZE_MAX),
    #    and ibv_advise_mr (sg_list: [addr, length, lkey] rows)
    Command("reg_user_mr", (handle("pd"), u64("length", lo=1), u64("addr"), u32("access")),
            ("mr", "lkey", "rkey"), (_E.EPERM, _E.EFAULT)),
    Command("advise_mr", (handle("pd"), u32("advice"), u32("flags"), any_("sg_list")), (), (_E.EPERM, _E.EFAULT)),
    # -- raw packet QPs, WQs, RSS and flow steering (a raw QP itself is create_qp's IBV_QPT_RAW_PACKET)
    Command("create_rss_qp", (handle("pd"), handle("ind_table", "rwq_ind_table"), u8("hash_function"),
                              any_("hash_key"), u64("hash_fields_mask")), ("qp", "qp_num"), (_E.EPERM,)),
    Command("create_wq", (handle("pd"), handle("cq"), u32("wq_type"), u32("max_wr"), u32("max_sge"),
                          u32("create_flags", 0), fds(2, "create_wq needs the ring fd and the doorbell fd")),
            ("wq", "wq_num")),
    Command("modify_wq", (handle("wq"), u32("attr_mask"), u32("wq_state", 0), u32("curr_wq_state", 0),
                          u32("flags_mask", 0))),
    Command("destroy_wq", (handle("wq"),), (), (_E.EBUSY,)),
    Command("create_rwq_ind_table", (u32("log_size"), any_("wqs")), ("ind_table", "ind_tbl_num")),
    Command("destroy_rwq_ind_table", (handle("ind_table", "rwq_ind_table"),), (), (_E.EBUSY,)),
    Command("create_flow", (handle("qp"), u32("type"), u16("priority", 0), u8("port", 1), u32("flags", 0),
                            any_("specs")), ("flow",), (_E.EPERM,)),
    Command("destroy_flow", (handle("flow"),)),
    # -- importing objects into a context sharing the connection (ibv_import_pd/mr/dm): the
    # kernel's QUERY methods of each object
    Command("query_pd", (handle("pd"),)),
    Command("query_mr", (handle("mr"),), ("lkey", "rkey", "length")),
    Command("query_dm", (handle("dm"),), ("length",), fds_out=1),
    # -- tag matching (ibv_create_srq_ex with IBV_SRQT_TM, ibv_post_srq_ops): sizes, then the TM caps
    Command("create_tm_srq", (handle("pd"), fds(2, "create_tm_srq needs 2 fds"), u32("max_wr", 256),
                              u32("max_sge", 4), u32("srq_limit", 0), handle("cq"), u32("max_num_tags"),
                              u32("max_ops")), ("srq",)),
    Command("post_srq_ops", (handle("srq"), u64("wr_id", 0), u32("opcode"), u32("flags", 0),
                             u32("unexpected_cnt", 0), u32("handle", 0), u64("recv_wr_id", 0), any_("sg_list"),
                             u64("tag", 0), u64("mask", 0)), ("handle",)),
    # -- XRC (ibv_open_xrcd: the file's fd, or none for a private domain; an XRC SRQ on a
    #    domain, a PD and a CQ -- fds: its ring and doorbell; an XRC INI QP on a PD -- fds:
    #    its send ring and doorbell -- or a TGT QP on a domain, without fds)
    Command("open_xrcd", (u32("oflags", 0),), ("xrcd",), (_E.EBADF, _E.EAGAIN)),
    Command("close_xrcd", (handle("xrcd"),), (), (_E.EBUSY,)),
    Command("create_xrc_srq", (handle("xrcd"), handle("pd"), handle("cq"), fds(2, "create_xrc_srq needs 2 fds"),
                               u32("max_wr", 256), u32("max_sge", 4), u32("srq_limit", 0)), ("srq", "srq_num")),
    Command("create_xrc_qp", (u32("qp_type"), handle("pd", optional=True), handle("send_cq", "cq", optional=True),
                              handle("xrcd", optional=True), obj("cap", {}), any_("sq_sig_all")), ("qp", "qp_num")),
)

#: name -> Command
COMMANDS: dict[str, Command] = {c.name: c for c in _TABLE}
assert len(COMMANDS) == len(_TABLE)


class _Names:
    """``CMD.create_cq``: the commands by attribute, so a misspelt one is an
    AttributeError where it is written, not an EOPNOTSUPP at run time."""

    def __init__(self, table: dict[str, Command]):
        self.__dict__.update(table)


CMD = _Names(COMMANDS)


def _check(f: Field, msg: dict, nfds: int | None, out: dict) -> bool:
    """Check one field of ``msg`` as the handler would (raising what it
    raises); False when the handler looks at state next."""
    k = f.kind
    if k == UINT:
        out[f.name] = rq.uint(msg, f.name, f.limit, f.default, lo=f.lo)
    elif k == STRING:
        out[f.name] = rq.string(msg, f.name, f.limit, f.default)
    elif k == OBJ:
        out[f.name] = rq.obj(msg, f.name, f.default)
    elif k == HANDLE:
        h = msg.get(f.name)
        if not (f.optional and not h) and type(h) is not int:      # Client.get's refusal
            raise VerbsError(errno.EINVAL, f"no {f.of} with handle {h!r}")
        out[f.name] = h
        return False                                               # then the object is looked up
    elif k == U32_HANDLE:
        out[f.name] = rq.handle(msg, f.name)
        return False
    elif k == FDS:
        if nfds is not None and nfds != f.limit:
            raise VerbsError(errno.EINVAL, f.of)
    else:                                                          # ANY: the handler's own check
        return False
    return True


def lookup(name: str | Command) -> Command:
    """The command called ``name`` (or ``name`` itself, a Command);
    EOPNOTSUPP for no command."""
    if isinstance(name, Command):
        return name
    cmd = COMMANDS.get(name) if isinstance(name, str) else None
    if cmd is None:
        raise VerbsError(errno.EOPNOTSUPP, f"unknown command {name!r}")
    return cmd


def check_request(name: str | Command, msg: dict, nfds: int | None = None, has_device: bool = True) -> dict:
    """Check a request before its handler runs: the command exists, the
    connection has the device it needs, then the request's leading fields
    up to the first state-dependent step (``nfds``: the fds it carries, None
    to skip that check).  Returns the fields checked, as the handler reads
    them; raises ``VerbsError`` with the errno and message the handler
    would have given."""
    cmd = lookup(name)
    if cmd.device and not has_device:
        raise VerbsError(errno.EINVAL, "no device opened on this connection")
    out: dict = {}
    if not cmd.state_first:
        for f in cmd.request:
            if not _check(f, msg, nfds, out):
                break
    return out


__all__ = ["Command", "Field", "COMMANDS", "CMD", "COMMON_ERRNOS", "PROTOCOL_VERSION", "check_request", "lookup"]
