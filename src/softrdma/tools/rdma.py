"""softrdma rdma: iproute2's ``rdma`` tool (6.1) over softrdmad.

Same command words (any prefix, as ``strcmpx`` allows), same options, same
text and JSON, same messages and exit codes as iproute2 6.1's rdma/*.c
(docs/formats/rdma_tool.md), with the daemon's management commands
(``links``, ``link_add``, ``link_delete``, ``resources``) standing in for
RDMA netlink:

* ``rdma [-j [-p]] [-d] link [show [DEV/PORT]]``, ``link add NAME type rxe
  netdev NETDEV``, ``link delete NAME``;
* ``rdma dev [show [DEV]]``;
* ``rdma resource [show [DEV]]`` (the per-device summary) and ``rdma resource
  show qp|cm_id|cq|mr|pd|ctx|srq [link DEV/PORT | dev DEV] [FILTER VALUE]...``
  with iproute2's filters (numbers, ranges ``1-10,12``, strings, prefixes);
* ``rdma statistic ...``: hw counters, per-QP counters, counter modes
  (``rdma_stat``, with the daemon's ``stat_*`` commands).

The kernel-side choices are the kernel's: a QP shows its port once it left
RESET (``link rxe0/-`` before), keys (``rkey``, ``lkey``, ``local_dma_lkey``)
are shown only to callers with CAP_NET_ADMIN, ``comm`` is read from
/proc/PID/comm by the tool.  No daemon is what no RDMA netlink is: "Failed to
open NETLINK_RDMA socket", exit 1 -- the tool never starts a daemon (a query
must not create the devices it reports on).

Two 6.1 behaviours that surprise (both from the source, utils.c): ``link
show`` wants DEV/PORT -- a bare DEV is "Wrong device name" (strict ports
since 5.3) --, and an unknown command word prints "Unknown ... '...'." but
exits 0 (``rd_exec_cmd`` returns 0).

Not here (yet): ``system``, ``dev set`` (the daemon cannot
rename devices or move them between namespaces), ``-r`` (accepted, no raw
data: rxe has none), the CM's cm_ids (rdma_cm IDs that have a device).
"""

from __future__ import annotations

import errno
import os
import shlex
import socket
import sys

from ..uapi.rundir import SOCKET_NAME, default_run_dir
from ..verbs.connection import Connection
from ..verbs.errors import PyverbsError

VERSION = "6.1.0"

# ---------------------------------------------------------------- string tables (iproute2 6.1)
LINK_STATES = ("NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER")
PHYS_STATES = ("NOP", "SLEEP", "POLLING", "DISABLED", "ARMED", "LINK_UP", "LINK_ERROR_RECOVER", "PHY_TEST",
               "UNKNOWN", "OPA_OFFLINE", "UNKNOWN", "OPA_TEST")
NODE_TYPES = ("unknown", "ca", "switch", "router", "rnic", "usnic", "usnic_udp", "unspecified")
DEV_CAPS = {0: "RESIZE_MAX_WR", 1: "BAD_PKEY_CNTR", 2: "BAD_QKEY_CNTR", 3: "RAW_MULTI", 4: "AUTO_PATH_MIG",
            5: "CHANGE_PHY_PORT", 6: "UD_AV_PORT_ENFORCE_PORT_ENFORCE", 7: "CURR_QP_STATE_MOD",
            8: "SHUTDOWN_PORT", 9: "INIT_TYPE", 10: "PORT_ACTIVE_EVENT", 11: "SYS_IMAGE_GUID",
            12: "RC_RNR_NAK_GEN", 13: "SRQ_RESIZE", 14: "N_NOTIFY_CQ", 15: "LOCAL_DMA_LKEY", 17: "MEM_WINDOW",
            18: "UD_IP_CSUM", 19: "UD_TSO", 20: "XRC", 21: "MEM_MGT_EXTENSIONS", 22: "BLOCK_MULTICAST_LOOPBACK",
            23: "MEM_WINDOW_TYPE_2A", 24: "MEM_WINDOW_TYPE_2B", 25: "RC_IP_CSUM", 26: "RAW_IP_CSUM",
            27: "CROSS_CHANNEL", 29: "MANAGED_FLOW_STEERING", 30: "SIGNATURE_HANDOVER", 31: "ON_DEMAND_PAGING",
            32: "SG_GAPS_REG", 33: "VIRTUAL_FUNCTION", 34: "RAW_SCATTER_FCS", 35: "RDMA_NETDEV_OPA_VNIC",
            36: "PCI_WRITE_END_PADDING"}
QP_TYPES = ("SMI", "GSI", "RC", "UC", "UD", "RAW_IPV6", "RAW_ETHERTYPE", "UNKNOWN", "RAW_PACKET", "XRC_INI",
            "XRC_TGT")
QP_STATES = ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR")
PATH_MIG = ("MIGRATED", "REARM", "ARMED")
SRQ_TYPES = ("BASIC", "XRC", "TM")
POLL_CTX = ("DIRECT", "SOFTIRQ", "WORKQUEUE", "UNBOUND_WORKQUEUE")
NUMERIC_CSET = "1234567890,-"


def _name(table, idx, default="UNKNOWN"):
    return table[idx] if isinstance(idx, int) and 0 <= idx < len(table) else default


def qp_type_str(t: int) -> str:
    return "DRIVER" if t == 0xFF else _name(QP_TYPES, t)


# filters per object: (name, is_number), in res.h's order
FILTERS = {
    "pd": (("dev", False), ("users", True), ("pid", True), ("ctxn", True), ("pdn", True), ("ctxn", True)),
    "mr": (("dev", False), ("rkey", True), ("lkey", True), ("mrlen", True), ("pid", True), ("mrn", True),
           ("pdn", True)),
    "cq": (("dev", False), ("users", True), ("poll-ctx", False), ("pid", True), ("cqn", True), ("ctxn", True)),
    "cm_id": (("link", False), ("lqpn", True), ("qp-type", False), ("state", False), ("ps", False),
              ("dev-type", False), ("transport-type", False), ("pid", True), ("src-addr", False),
              ("src-port", True), ("dst-addr", False), ("dst-port", True), ("cm-idn", True)),
    "qp": (("link", False), ("lqpn", True), ("rqpn", True), ("pid", True), ("sq-psn", True), ("rq-psn", True),
           ("type", False), ("path-mig-state", False), ("state", False), ("pdn", True)),
    "ctx": (("dev", False), ("pid", True), ("ctxn", True)),
    "srq": (("dev", False), ("pid", True), ("srqn", True), ("type", False), ("pdn", True), ("cqn", True),
            ("lqpn", True)),
}

HELP = ("Usage: {0} [ OPTIONS ] OBJECT {{ COMMAND | help }}\n"
        "       {0} [ -f[orce] ] -b[atch] filename\n"
        "where  OBJECT := {{ dev | link | resource | system | statistic | help }}\n"
        "       OPTIONS := {{ -V[ersion] | -d[etails] | -j[son] | -p[retty] -r[aw]}}\n")
LINK_HELP = ("Usage: {0} link show [DEV/PORT_INDEX]\n"
             "Usage: {0} link add NAME type TYPE netdev NETDEV\n"
             "Usage: {0} link delete NAME\n")
# softrdma's extensions, left out of the help so that it prints what iproute2 prints:
#   link set NAME faults { off | [loss P%] [dup P%] [reorder P%] [corrupt P%] [delay TIME] }
#   link add NAME type rxe netdev NETDEV [ gso { on | off } ]   (shown by link show when off)
DEV_HELP = ("Usage: {0} dev show [DEV]\n"
            "       {0} dev set [DEV] name DEVNAME\n"
            "       {0} dev set [DEV] netns NSNAME\n"
            "       {0} dev set [DEV] adaptive-moderation [on|off]\n")
RES_HELP = ("Usage: {0} resource\n"
            "          resource show [DEV]\n"
            "          resource show [qp|cm_id|pd|mr|cq|ctx|srq]\n"
            "          resource show qp link [DEV/PORT]\n"
            "          resource show qp link [DEV/PORT] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show cm_id link [DEV/PORT]\n"
            "          resource show cm_id link [DEV/PORT] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show cq link [DEV/PORT]\n"
            "          resource show cq link [DEV/PORT] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show pd dev [DEV]\n"
            "          resource show pd dev [DEV] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show mr dev [DEV]\n"
            "          resource show mr dev [DEV] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show ctx dev [DEV]\n"
            "          resource show ctx dev [DEV] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show srq dev [DEV]\n"
            "          resource show srq dev [DEV] [FILTER-NAME FILTER-VALUE]\n")


def strcmpx(s1: str, s2: str) -> bool:
    """iproute2's strcmpx() == 0: the typed word is a prefix of the keyword."""
    return len(s1) <= len(s2) and s2.startswith(s1)


def _lower(s: str) -> str:
    return s.translate(_LOWER)


_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _task_name(pid: int) -> str | None:
    """lib get_task_name(): the first line of /proc/PID/comm, or None."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            line = f.readline(63)
    except OSError:
        return None
    return line.decode(errors="replace").split("\n", 1)[0]


def _cap_net_admin() -> bool:
    """Does this process have CAP_NET_ADMIN (the daemon, as the kernel,
    sends it keys only then)?"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 12))
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0


# ---------------------------------------------------------------- JSON writer (lib/json_writer.c)
def _jquote(s: str) -> str:
    out = ['"']
    for ch in s:
        out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\b": "\\b", "\\": "\\\\",
                    '"': '\\"'}.get(ch, ch))
    out.append('"')
    return "".join(out)


class JsonWriter:
    def __init__(self, write, pretty: bool):
        self.write = write
        self.pretty = pretty
        self.depth = 0
        self.sep = ""

    def _eol(self):
        if self.pretty:
            self.write("\n" + "    " * self.depth)

    def _eor(self):
        if self.sep:
            self.write(self.sep)
        self.sep = ","

    def _begin(self, c):
        self._eor()
        self.write(c)
        self.depth += 1
        self.sep = ""

    def _end(self, c):
        self.depth -= 1
        if self.sep:
            self._eol()
        self.write(c)
        self.sep = ","

    def name(self, name: str):
        self._eor()
        self._eol()
        self.sep = ""
        self.write(_jquote(name) + (": " if self.pretty else ":"))

    def value(self, v):
        self._eor()
        if isinstance(v, bool):
            self.write("true" if v else "false")
        elif isinstance(v, int):
            self.write(str(v))
        else:
            self.write(_jquote(str(v)))

    def start_object(self):
        self._begin("{")

    def end_object(self):
        self._end("}")

    def start_array(self):
        self._begin("[")
        if self.pretty:
            self.write(" ")

    def end_array(self):
        if self.pretty and self.sep:
            self.write(" ")
        self.sep = ""
        self._end("]")


class Failed(Exception):
    """No daemon: what rd_send_msg() says when the RDMA netlink socket cannot be opened."""


class Rd:
    """struct rd: the parsed command line, the device map, the output."""

    def __init__(self, prog: str, json_output: bool, pretty: bool, details: bool, driver_details: bool):
        self.prog = prog
        self.json_output = json_output
        self.pretty = pretty
        self.show_details = details
        self.show_driver_details = driver_details
        self.argv: list[str] = []
        self.jw: JsonWriter | None = None
        self.conn: Connection | None = None
        self.dev_map: list[dict] = []
        self.filters: list[tuple[str, str]] = []
        self.dev: dict | None = None
        self.port_idx = 0
        self._res = None

    # ---------------------------------------------------------------- output (lib/json_print.c)
    @staticmethod
    def out(s: str) -> None:
        sys.stdout.write(s)

    @staticmethod
    def err(s: str) -> None:
        sys.stdout.flush()
        sys.stderr.write(s + "\n")
        sys.stderr.flush()

    def new_json_obj(self):
        if self.json_output:
            self.jw = JsonWriter(self.out, self.pretty)
            self.jw.start_array()

    def delete_json_obj(self):
        if self.jw is not None:
            self.jw.end_array()
            self.out("\n")
            self.jw = None

    def open_obj(self):
        if self.jw is not None:
            self.jw.start_object()

    def newline(self):
        if self.jw is not None:
            self.jw.end_object()
        else:
            self.out("\n")

    def pr(self, key: str | None, value, text: str | None):
        """print_*(PRINT_ANY, key, fmt, value): ``text`` is the formatted text."""
        if self.jw is not None:
            if key is not None:
                self.jw.name(key)
            self.jw.value(value)
        elif text is not None:
            self.out(text)

    def pj(self, key: str, value):
        """PRINT_JSON only."""
        if self.jw is not None:
            self.jw.name(key)
            self.jw.value(value)

    def pt(self, text: str):
        """PRINT_FP only."""
        if self.jw is None:
            self.out(text)

    def open_array(self, key: str, text: str | None):
        if self.jw is not None:
            self.jw.name(key)
            self.jw.start_array()
        elif text is not None:
            self.out(text)

    def close_array(self, text: str | None):
        if self.jw is not None:
            self.jw.end_array()
        elif text is not None:
            self.out(text)

    def on_off(self, key: str, value: bool):
        self.pr(key, bool(value), f"{key} {'on' if value else 'off'} ")

    def u(self, key: str, value: int, present: bool = True):
        """res_print_u32/u64: only if the attribute is there."""
        if present:
            self.pr(key, value, f"{key} {value} ")

    def key(self, key: str, value: int, present: bool):
        """print_key: text 0x%lx, JSON the hex digits as a string."""
        if present:
            self.pr(key, format(value & 0xFFFFFFFF, "x"), f"{key} 0x{value:x} ")

    def comm(self, comm: str | None, kernel: bool = False):
        if comm is None:
            return
        text = comm if (not kernel or self.jw is not None) else f"[{comm}]"
        text = text.encode()[:17].decode(errors="ignore")
        self.pr("comm", text, f"comm {text} ")

    def print_dev(self):
        self.pj("ifindex", self.dev["ifindex"])
        self.pr("ifname", self.dev["ifname"], f"dev {self.dev['ifname']} ")

    def print_link(self, port: int | None):
        name = self.dev["ifname"]
        self.pj("ifindex", self.dev["ifindex"])
        self.pj("ifname", name)
        if port is not None:
            self.pj("port", port)
        self.pt(f"link {name}/{port if port is not None else '-'} ")

    # ---------------------------------------------------------------- the daemon (netlink)
    def connect(self) -> None:
        try:
            self.conn = Connection(os.path.join(default_run_dir(), SOCKET_NAME))
        except OSError:
            raise Failed() from None
        try:
            links, fds = self.conn.call("links")
        except PyverbsError:
            self.conn.sock.close()
            raise Failed() from None
        for fd in fds:
            os.close(fd)
        self.dev_map = sorted(links["links"], key=lambda d: d["ifindex"])
        for d in self.dev_map:
            d.setdefault("num_ports", 1)

    def call(self, op: str, quiet: bool = False, **kw):
        """One request; a failure is the kernel's extended ack message, if
        any ("Error: ...", nl_dump_ext_ack), then perror("error") in
        rd_recv_msg -- nothing with ``quiet`` -- and returns None."""
        try:
            reply, fds = self.conn.call(op, **kw)
        except PyverbsError as e:
            code = e.error_code if e.error_code > 0 else errno.EIO
            if not quiet:
                extack = getattr(e, "extack", None)
                if extack:
                    self.err(f"Error: {extack}")
                self.err(f"error: {os.strerror(code)}")
            return None
        for fd in fds:
            os.close(fd)
        return reply

    def links_now(self) -> dict | None:
        reply = self.call("links")
        return None if reply is None else {d["ifindex"]: d for d in reply["links"]}

    def resources(self):
        if self._res is None:
            reply = self.call("resources")
            if reply is None:
                return None
            self._res = reply
        return self._res

    # ---------------------------------------------------------------- argument walking (rdma/utils.c)
    def no_arg(self) -> bool:
        return not self.argv

    def argv0(self) -> str:
        return self.argv[0]

    def arg_inc(self):
        if self.argv:
            self.argv.pop(0)

    def argv_match(self, pattern: str) -> bool:
        return bool(self.argv) and strcmpx(self.argv[0], pattern)

    def exec_cmd(self, cmds, what: str) -> int:
        if self.no_arg():
            return cmds[0][1]()
        for name, func in cmds[1:]:
            if self.argv_match(name):
                self.arg_inc()
                return func()
        self.err(f"Unknown {what} '{self.argv0()}'.")
        return 0

    def dev_map_lookup(self, allow_port_index: bool):
        if self.no_arg():
            return None
        name = self.argv0()
        if allow_port_index and "/" in name:
            name = name[:name.rindex("/")]
        return next((d for d in self.dev_map if d["ifname"] == name), None)

    def port_from_argv(self, strict: bool):
        """get_port_from_argv(): (error, port, is_dump_all)."""
        port, dump_all = 0, not strict
        arg = self.argv0()
        if "/" in arg:
            rest = arg[arg.index("/") + 1:]
            if rest[:1] == "-":
                if strict:
                    return True, 0, dump_all
                return False, 0, False
            if rest[:1] and rest[0] in "0123456789":
                dump_all = False
                digits = ""
                for ch in rest:
                    if ch not in "0123456789":
                        break
                    digits += ch
                port = int(digits) & 0xFFFFFFFF
            if not port and rest:
                return True, port, dump_all
        if strict and port == 0:
            return True, port, dump_all
        return False, port, dump_all

    def exec_link(self, cb, strict: bool) -> int:
        self.new_json_obj()
        try:
            if self.no_arg():
                for dev in self.dev_map:
                    self.dev = dev
                    for port in range(1 if strict else 0, dev["num_ports"] + 1):
                        self.port_idx = port
                        ret = cb()
                        if ret:
                            return ret
                return 0
            dev = self.dev_map_lookup(True)
            bad, port, dump_all = self.port_from_argv(strict)
            if dev is None or port > dev["num_ports"] or (not port and bad):
                self.err("Wrong device name")
                return -errno.ENOENT
            self.arg_inc()
            self.dev = dev
            self.port_idx = port
            while self.port_idx < dev["num_ports"] + 1:
                ret = cb()
                if ret:
                    return ret
                if not dump_all:
                    break
                self.port_idx += 1
            return 0
        finally:
            self.delete_json_obj()

    def exec_dev(self, cb) -> int:
        self.new_json_obj()
        try:
            if self.no_arg():
                for dev in self.dev_map:
                    self.dev = dev
                    ret = cb()
                    if ret:
                        return ret
                return 0
            dev = self.dev_map_lookup(False)
            if dev is None:
                self.err(f"Wrong device name - {self.argv0()}")
                return -errno.ENOENT
            self.arg_inc()
            self.dev = dev
            return cb()
        finally:
            self.delete_json_obj()

    def exec_require_dev(self, cb) -> int:
        if self.no_arg():
            self.err("Please provide device name.")
            return -errno.EINVAL
        return self.exec_dev(cb)

    # ---------------------------------------------------------------- filters
    def build_filter(self, valid) -> int:
        if not valid or self.no_arg():
            return 0
        args = self.argv
        if len(args) == 1:
            self.err(f"No filter data was supplied to filter option {args[0]}")
            return -errno.EINVAL
        if len(args) % 2:
            self.err("There is filter option without data")
            return -errno.EINVAL
        for i in range(0, len(args), 2):
            k, v = args[i], args[i + 1]
            spec = next((s for s in valid if strcmpx(k, s[0])), None)
            if spec is None:
                self.err(f"Unsupported filter option: {k}")
                return -errno.EINVAL
            if spec[1] and any(ch not in NUMERIC_CSET for ch in v):
                self.err(f'{k} filter accepts "{NUMERIC_CSET}" characters only')
                return -errno.EINVAL
            self.filters.append((k, _lower(v)))
        return 0

    def set_arg_to_devname(self) -> int:
        while not self.no_arg():
            if self.argv_match("dev") or self.argv_match("link"):
                self.arg_inc()
                if self.no_arg():
                    self.err("No device name was supplied")
                    return -errno.EINVAL
                return 0
            self.arg_inc()
        return 0

    def key_exist(self, key: str) -> bool:
        return any(strcmpx(k, key) for k, _ in self.filters)

    def filtered(self, key: str, val: int, present: bool = True) -> bool:
        """rd_is_filtered_attr(): numbers, lists and ranges of 32-bit values."""
        if not present:
            return self.key_exist(key)
        val &= 0xFFFFFFFF
        for k, spec in self.filters:
            if not strcmpx(k, key):
                continue
            left = fe = 0
            rng = False
            i = 0
            while i < len(spec):
                if spec[i] in "0123456789":
                    j = i
                    while j < len(spec) and spec[j] in "0123456789":
                        j += 1
                    fe = min(int(spec[i:j]), (1 << 63) - 1) & 0xFFFFFFFF      # strtol, then u32
                    if fe == val or (rng and left < val < fe):
                        return False
                    rng = False
                    i = j
                else:
                    if spec[i] == "-":
                        left = fe
                        rng = True
                    i += 1
            return True
        return False

    def str_filtered(self, key: str, val: str) -> bool:
        """rd_is_string_filtered_attr(): comma-separated, case-insensitive."""
        for k, spec in self.filters:
            if not strcmpx(k, key):
                continue
            for tok in spec.split(","):
                if tok and len(tok) == len(val) and _lower(tok) == _lower(val):
                    return False
            return True
        return False


# ==================================================================== link
def cmd_link(rd: Rd) -> int:
    def link_help():
        rd.out(LINK_HELP.format(rd.prog))
        return 0

    def link_no_args():
        links = rd.links_now()
        if links is None:
            return -errno.EIO
        d = links.get(rd.dev["ifindex"])
        if d is None or rd.port_idx != d.get("port", 1):
            rd.err(f"error: {os.strerror(errno.EINVAL)}")
            return -errno.EINVAL
        pa = d.get("port_attr", {})
        rd.open_obj()
        rd.pj("ifindex", d["ifindex"])
        rd.pr("ifname", d["ifname"], f"link {d['ifname']}/")
        rd.pr("port", rd.port_idx, f"{rd.port_idx} ")
        state = pa.get("state", 4)
        phys = pa.get("phys_state", 5 if state == 4 else 3)
        rd.pr("state", _name(LINK_STATES, state), f"state {_name(LINK_STATES, state)} ")
        rd.pr("physical_state", _name(PHYS_STATES, phys), f"physical_state {_name(PHYS_STATES, phys)} ")
        if d.get("netdev"):
            rd.pr("netdev", d["netdev"], f"netdev {d['netdev']} ")
            idx = d.get("netdev_index", 0)
            rd.pr("netdev_index", idx, f"netdev_index {idx} " if rd.show_details else "")
        if d.get("gso") is False:
            rd.pr("gso", "off", "gso off ")
        rd.newline()
        return 0

    def link_one_show():
        if not rd.port_idx:
            return 0
        return rd.exec_cmd([(None, link_no_args)], "parameter")

    def link_show():
        return rd.exec_link(link_one_show, True)

    def link_add():
        if rd.no_arg():
            rd.err("Please provide a link name to add.")
            return -errno.EINVAL
        name = rd.argv0()
        rd.arg_inc()

        def add_type():
            if rd.no_arg():
                rd.err("Please provide a link type name.")
                return -errno.EINVAL
            ltype = rd.argv0()
            rd.arg_inc()

            def add_netdev():
                if rd.no_arg():
                    rd.err("Please provide a net device name.")
                    return -errno.EINVAL
                netdev = rd.argv0()
                rd.arg_inc()
                gso = True
                if not rd.no_arg():             # softrdma's extension: gso on|off
                    if rd.argv != ["gso", "on"] and rd.argv != ["gso", "off"]:
                        rd.err(f"Unknown parameter '{' '.join(rd.argv)}'.")
                        return -errno.EINVAL
                    gso = rd.argv[1] == "on"
                    rd.argv = []
                return _newlink(rd, name, ltype, netdev, gso)

            return rd.exec_cmd([(None, link_help), ("netdev", add_netdev)], "parameter")

        return rd.exec_cmd([(None, link_help), ("type", add_type)], "parameter")

    def link_del():
        def _del():
            if not rd.no_arg():
                rd.err(f"Unknown parameter {rd.argv0()}")
                return -errno.EINVAL
            return 0 if rd.call("link_delete", name=rd.dev["ifname"]) is not None else -errno.EIO

        return rd.exec_require_dev(_del)

    def link_set():
        if rd.no_arg():
            rd.err("Please provide a link name.")
            return -errno.EINVAL
        name = rd.argv0()
        rd.arg_inc()
        if not rd.argv_match("faults"):
            rd.err(f"Unknown parameter '{rd.argv0() if not rd.no_arg() else ''}'.")
            return -errno.EINVAL
        rd.arg_inc()
        try:
            faults = parse_faults(rd.argv)
        except ValueError as e:
            rd.err(f"Error: {e}")
            return -errno.EINVAL
        rd.argv = []
        return 0 if rd.call("link_set", name=name, faults=faults) is not None else -errno.EIO

    return rd.exec_cmd([(None, link_show), ("add", link_add), ("delete", link_del), ("show", link_show),
                        ("list", link_show), ("help", link_help), ("set", link_set)], "link command")


_FAULT_RATES = ("loss", "dup", "reorder", "corrupt")
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "usec": 1e-6, "msec": 1e-3, "sec": 1.0}


def parse_faults(args: list[str]) -> dict:
    """softrdma's extension: ``faults off`` or ``faults [loss P] [dup P]
    [reorder P] [corrupt P] [delay T]``, P as ``10%`` or a fraction, T as
    ``1ms``/``100us``/``0.5s`` (netem's words)."""
    if args == ["off"]:
        return {}
    if not args or len(args) % 2:
        raise ValueError("faults needs KEY VALUE pairs: loss|dup|reorder|corrupt PERCENT, delay TIME, or 'off'")
    out = {}
    for key, val in zip(args[::2], args[1::2]):
        if key in _FAULT_RATES:
            v = float(val[:-1]) / 100 if val.endswith("%") else float(val)
            if not 0 <= v <= 1:
                raise ValueError(f"{key} {val}: a rate is 0..100%")
            out[key] = v
        elif key == "delay":
            num = val.rstrip("abcdefghijklmnopqrstuvwxyz")
            unit = val[len(num):] or "s"
            if unit not in _UNITS:
                raise ValueError(f"delay {val}: unit must be s, ms or us")
            out["delay"] = float(num) * _UNITS[unit]
        else:
            raise ValueError(f"unknown fault '{key}'")
    return out


def _newlink(rd: Rd, name: str, ltype: str, netdev: str, gso: bool = True) -> int:
    """RDMA_NLDEV_CMD_NEWLINK, checked in nldev_newlink()'s order: the name,
    the netdev, the link type (only rxe exists here), then the driver."""
    def fail(code):
        rd.err(f"error: {os.strerror(code)}")
        return -code

    if not name or "%" in name or len(name.encode()) >= 64 or not netdev:
        return fail(errno.EINVAL)
    try:
        socket.if_nametoindex(netdev)
    except OSError:
        return fail(errno.ENODEV)
    if ltype != "rxe":
        return fail(errno.EINVAL)
    extra = {} if gso else {"gso": False}
    return 0 if rd.call("link_add", name=name, netdev=netdev, **extra) is not None else -errno.EIO


# ==================================================================== dev
def cmd_dev(rd: Rd) -> int:
    def dev_help():
        rd.out(DEV_HELP.format(rd.prog))
        return 0

    def dev_no_args():
        links = rd.links_now()
        if links is None:
            return -errno.EIO
        d = links.get(rd.dev["ifindex"])
        if d is None:
            rd.err(f"error: {os.strerror(errno.EINVAL)}")
            return -errno.EINVAL
        rd.open_obj()
        rd.pr("ifindex", d["ifindex"], f"{d['ifindex']}: ")
        rd.pr("ifname", d["ifname"], f"{d['ifname']}: ")
        nt = _name(NODE_TYPES, d.get("node_type", 1), "unknown")
        rd.pr("node_type", nt, f"node_type {nt} ")
        if d.get("fw"):
            rd.pr("fw", d["fw"], f"fw {d['fw']} ")
        rd.pr("node_guid", d["node_guid"], f"node_guid {d['node_guid']} ")
        rd.pr("sys_image_guid", d["sys_image_guid"], f"sys_image_guid {d['sys_image_guid']} ")
        if rd.show_details:
            rd.on_off("adaptive-moderation", bool(d.get("dim", False)))
            caps = int(d.get("caps", 0))
            rd.pt("\n    caps: <")
            rd.open_array("caps", None)
            idx = 0
            while caps:
                if caps & 1:
                    nm = DEV_CAPS.get(idx, "UNKNOWN")
                    rd.pr(None, nm, f"{nm}, " if caps >> 1 else nm)
                caps >>= 1
                idx += 1
            rd.close_array(">")
        rd.newline()
        return 0

    def dev_one_show():
        return rd.exec_cmd([(None, dev_no_args)], "parameter")

    def dev_show():
        return rd.exec_dev(dev_one_show)

    def dev_set():
        def unsupported():
            rd.err(f"error: {os.strerror(errno.EOPNOTSUPP)}")
            return -errno.EOPNOTSUPP

        def set_name():
            if rd.no_arg():
                rd.err("Please provide device new name.")
                return -errno.EINVAL
            return unsupported()

        def one_set():
            return rd.exec_cmd([(None, dev_help), ("name", set_name), ("netns", unsupported),
                                ("adaptive-moderation", unsupported)], "parameter")

        return rd.exec_require_dev(one_set)

    return rd.exec_cmd([(None, dev_show), ("show", dev_show), ("list", dev_show), ("set", dev_set),
                        ("help", dev_help)], "dev command")


# ==================================================================== resource
def _objects(rd: Rd, kind: str) -> list[dict] | None:
    res = rd.resources()
    if res is None:
        return None
    objs = [r for r in res["resources"] if r["kind"] == kind and r.get("dev") == rd.dev["ifname"]]
    return sorted(objs, key=lambda r: (r.get("id", r.get("handle", 0)), r.get("handle", 0)))


def _pid_comm(rd: Rd, r: dict):
    pid = r.get("pid")
    return pid, (_task_name(pid) if pid is not None else None)


def res_summary_line(rd: Rd) -> int:
    res = rd.resources()
    if res is None:
        return -errno.EIO
    name = rd.dev["ifname"]
    count = {k: 0 for k in ("pd", "cq", "qp", "cm_id", "mr", "ctx", "srq")}
    for r in res["resources"]:
        if r.get("dev") == name and r["kind"] in count:
            count[r["kind"]] += 1
    count["ctx"] = sum(1 for c in res.get("contexts", ()) if c.get("dev") == name)
    rd.open_obj()
    rd.pr("ifindex", rd.dev["ifindex"], f"{rd.dev['ifindex']}: ")
    rd.pr("ifname", name, f"{name}: ")
    for k, v in count.items():
        rd.u(k, v)
    rd.newline()
    return 0


def res_qp(rd: Rd) -> int:
    qps = _objects(rd, "qp")
    if qps is None:
        return -errno.EIO
    for r in qps:
        port = r.get("port") or 0
        if port != rd.port_idx:
            continue
        t = r["type"]
        connected = t in (2, 3)                       # RC, UC: rqpn, rq-psn
        mig = t in (2, 3, 9, 10)                      # RC, UC, XRC: path-mig-state
        pdn = r.get("pdn")
        if rd.filtered("lqpn", r["lqpn"]) or rd.filtered("pdn", pdn or 0, pdn is not None):
            continue
        if rd.filtered("rqpn", r.get("rqpn", 0), connected) or rd.filtered("rq-psn", r.get("rq_psn", 0), connected):
            continue
        if rd.filtered("sq-psn", r.get("sq_psn", 0)):
            continue
        mig_state = _name(PATH_MIG, r.get("path_mig_state", 0) if mig else 0)
        if rd.str_filtered("path-mig-state", mig_state):
            continue
        if rd.str_filtered("type", qp_type_str(t)) or rd.str_filtered("state", _name(QP_STATES, r["state"])):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        rd.open_obj()
        rd.print_link(r.get("port"))
        rd.u("lqpn", r["lqpn"])
        if connected:
            rd.pr("rqpn", r.get("rqpn", 0), f"rqpn {r.get('rqpn', 0)} ")
        rd.pr("type", qp_type_str(t), f"type {qp_type_str(t)} ")
        rd.pr("state", _name(QP_STATES, r["state"]), f"state {_name(QP_STATES, r['state'])} ")
        if connected:
            rd.pr("rq-psn", r.get("rq_psn", 0), f"rq-psn {r.get('rq_psn', 0)} ")
        rd.u("sq-psn", r.get("sq_psn", 0))
        if mig:
            rd.pr("path-mig-state", mig_state, f"path-mig-state {mig_state} ")
        rd.u("pdn", pdn or 0, pdn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


CM_ID_STATES = ("IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT",
                "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING")
CM_ID_PS = {0x0002: "IPoIB", 0x013F: "IPoIB", 0x0106: "TCP", 0x0111: "UDP"}   # res-cmid.c's (IB prints IPoIB)


def res_cm_id(rd: Rd) -> int:
    """res_cm_id_parse_cb: link, state, ps, pid, comm, cm-idn, src-addr, dst-addr."""
    ids = _objects(rd, "cm_id")
    if ids is None:
        return -errno.EIO
    for r in ids:
        port = r.get("port") or 0
        if port and port != rd.port_idx:
            continue
        ps = CM_ID_PS.get(r["ps"], "---")
        st = CM_ID_STATES[r["state"]] if r["state"] < len(CM_ID_STATES) else "UNKNOWN"
        if rd.str_filtered("ps", ps) or rd.str_filtered("state", st):
            continue
        src, sport = r["src_addr"]
        dst, dport = r["dst_addr"]
        if rd.str_filtered("src-addr", src) or rd.filtered("src-port", sport):
            continue
        if rd.str_filtered("dst-addr", dst) or rd.filtered("dst-port", dport):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0) or rd.filtered("cm-idn", r.get("id", 0)):
            continue
        rd.open_obj()
        rd.print_link(r.get("port"))
        rd.pr("state", st, f"state {st} ")
        rd.pr("ps", ps, f"ps {ps} ")
        rd.u("pid", pid or 0)
        rd.comm(comm)
        rd.u("cm-idn", r.get("id", 0))
        rd.pr("src-addr", f"{src}:{sport}", f"src-addr {src}:{sport} ")
        rd.pr("dst-addr", f"{dst}:{dport}", f"dst-addr {dst}:{dport} ")
        rd.newline()
    return 0


def res_cq(rd: Rd) -> int:
    cqs = _objects(rd, "cq")
    if cqs is None:
        return -errno.EIO
    for r in cqs:
        users = r.get("users", 0)
        if rd.filtered("users", users) or rd.str_filtered("poll-ctx", _name(POLL_CTX, 0)):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        ctxn = r.get("ctxn")
        if rd.filtered("cqn", r.get("id", 0), "id" in r) or rd.filtered("ctxn", ctxn or 0, ctxn is not None):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("cqn", r.get("id", 0), "id" in r)
        rd.u("cqe", r["cqe"])
        rd.u("users", users)
        rd.on_off("adaptive-moderation", bool(r.get("dim", False)))
        rd.u("ctxn", ctxn or 0, ctxn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def res_mr(rd: Rd) -> int:
    mrs = _objects(rd, "mr")
    if mrs is None:
        return -errno.EIO
    for r in mrs:
        if rd.filtered("mrlen", r["mrlen"]):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        pdn = r.get("pdn")
        if rd.filtered("mrn", r.get("id", 0), "id" in r) or rd.filtered("pdn", pdn or 0, pdn is not None):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("mrn", r.get("id", 0), "id" in r)
        # the daemon sends keys only to CAP_NET_ADMIN, as the kernel does
        rd.key("rkey", r.get("rkey", 0), "rkey" in r)
        rd.key("lkey", r.get("lkey", 0), "lkey" in r)
        rd.u("mrlen", r["mrlen"])
        rd.u("pdn", pdn or 0, pdn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def res_pd(rd: Rd) -> int:
    pds = _objects(rd, "pd")
    if pds is None:
        return -errno.EIO
    for r in pds:
        users = r.get("users", 0)
        if rd.filtered("users", users):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        ctxn = r.get("ctxn")
        if rd.filtered("ctxn", ctxn or 0, ctxn is not None) or rd.filtered("pdn", r.get("id", 0), "id" in r):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("pdn", r.get("id", 0), "id" in r)
        rd.key("local_dma_lkey", r.get("local_dma_lkey", 0), "local_dma_lkey" in r)
        rd.u("users", users)
        rd.u("ctxn", ctxn or 0, ctxn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def res_ctx(rd: Rd) -> int:
    res = rd.resources()
    if res is None:
        return -errno.EIO
    ctxs = sorted((c for c in res.get("contexts", ()) if c.get("dev") == rd.dev["ifname"]),
                  key=lambda c: c["ctxn"])
    for c in ctxs:
        pid, comm = _pid_comm(rd, c)
        if rd.filtered("pid", pid or 0, pid is not None) or rd.filtered("ctxn", c["ctxn"]):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("ctxn", c["ctxn"])
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def _srq_qps(rd: Rd, qpns: list[int]) -> str | None:
    """get_srq_qps(): the kernel's runs of consecutive QPNs, filtered by lqpn,
    as "17,19-21"; None when the line is filtered out."""
    if not qpns:
        return None if rd.key_exist("lqpn") else ""
    runs, start, prev = [], None, None
    for q in sorted(qpns):
        if start is None:
            start = prev = q
        elif q > prev + 1:
            runs.append((start, prev))
            start = prev = q
        else:
            prev = q
    runs.append((start, prev))
    parts = []
    for lo, hi in runs:
        if lo == hi:
            if not rd.filtered("lqpn", lo):
                parts.append(str(lo))
            continue
        a = b = 0
        for q in range(lo, hi + 1):
            if rd.filtered("lqpn", q):
                if a:
                    parts.append(f"{a}-{b}" if b else str(a))
                    a = b = 0
                continue
            if not a:
                a = q
            else:
                b = q
        if a:
            parts.append(f"{a}-{b}" if b else str(a))
    return ",".join(parts) or None


def res_srq(rd: Rd) -> int:
    srqs = _objects(rd, "srq")
    if srqs is None:
        return -errno.EIO
    for r in srqs:
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None) or rd.filtered("srqn", r.get("id", 0), "id" in r):
            continue
        st = _name(SRQ_TYPES, r.get("type", 0))
        pdn = r.get("pdn")
        if rd.str_filtered("type", st) or rd.filtered("pdn", pdn or 0, pdn is not None):
            continue
        if rd.filtered("cqn", r.get("cqn") or 0, r.get("cqn") is not None):
            continue
        qps = _srq_qps(rd, list(r.get("lqpn", ())))
        if qps is None:
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("srqn", r.get("id", 0), "id" in r)
        rd.pr("type", st, f"type {st} ")
        if qps:
            rd.open_array("lqpn", "lqpn")
            rd.pt(" ")
            toks = qps.split(",")
            for i, tok in enumerate(toks):
                rd.pr(None, tok, tok)
                if i + 1 < len(toks):
                    rd.pt(",")
            rd.pt(" ")
            rd.close_array(None)
        rd.u("pdn", pdn or 0, pdn is not None)
        rd.u("cqn", r.get("cqn") or 0, r.get("cqn") is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def cmd_res(rd: Rd) -> int:
    def res_help():
        rd.out(RES_HELP.format(rd.prog))
        return 0

    def res_func(kind, line, strict):
        def run():
            ret = rd.build_filter(FILTERS.get(kind))
            if ret:
                return ret
            if FILTERS.get(kind):
                ret = rd.set_arg_to_devname()
                if ret:
                    return ret
            if strict:
                return rd.exec_dev(lambda: line(rd))
            return rd.exec_link(lambda: line(rd), False)
        return run

    def res_show():
        if len(rd.argv) == 1 and rd.dev_map_lookup(False) is not None:
            return rd.exec_dev(lambda: res_summary_line(rd))
        return rd.exec_cmd([(None, res_func(None, res_summary_line, True)),
                            ("qp", res_func("qp", res_qp, False)),
                            ("cm_id", res_func("cm_id", res_cm_id, False)),
                            ("cq", res_func("cq", res_cq, True)),
                            ("mr", res_func("mr", res_mr, True)),
                            ("pd", res_func("pd", res_pd, True)),
                            ("ctx", res_func("ctx", res_ctx, True)),
                            ("srq", res_func("srq", res_srq, True))], "parameter")

    return rd.exec_cmd([(None, res_show), ("show", res_show), ("list", res_show), ("help", res_help)],
                       "resource command")


def cmd_not_here(word: str):
    def run(rd: Rd) -> int:
        rd.err(f"{rd.prog}: '{word}' is not implemented by softrdma yet")
        return -errno.EOPNOTSUPP
    return run


# ==================================================================== main
def rd_cmd(rd: Rd, args: list[str]) -> int:
    rd.argv = list(args)
    rd.filters = []
    rd._res = None

    def cmd_help():
        rd.out(HELP.format(rd.prog))
        return 0

    return rd.exec_cmd([(None, cmd_help), ("help", cmd_help), ("dev", lambda: cmd_dev(rd)),
                        ("link", lambda: cmd_link(rd)), ("resource", lambda: cmd_res(rd)),
                        ("system", lambda: cmd_not_here("system")(rd)),
                        ("statistic", lambda: _cmd_stat(rd))], "object")


def _cmd_stat(rd: Rd) -> int:
    from .rdma_stat import cmd_stat        # rdma_stat builds on this module
    return cmd_stat(rd)


_LONG = {"version": ("V", False), "help": ("h", False), "json": ("j", False), "pretty": ("p", False),
         "details": ("d", False), "raw": ("r", False), "force": ("f", False), "batch": ("b", True)}


def _getopt(argv: list[str]):
    """getopt_long(":Vhdrpjfb:") with GNU permutation: options may follow
    words; "--" ends them.  Yields (opt, value) in order, '?' unknown, ':'
    missing argument; returns the words through the second list."""
    opts, words = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            words += argv[i + 1:]
            break
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            matches = [name] if name in _LONG else [k for k in _LONG if k.startswith(name)]
            if len(matches) != 1:
                opts.append(("?", None))
            else:
                ch, needs = _LONG[matches[0]]
                if needs:
                    if eq:
                        opts.append((ch, val))
                    elif i + 1 < len(argv):
                        i += 1
                        opts.append((ch, argv[i]))
                    else:
                        opts.append((":", ch))
                elif eq:
                    opts.append(("?", None))
                else:
                    opts.append((ch, None))
        elif a.startswith("-") and a != "-":
            j = 1
            while j < len(a):
                ch = a[j]
                if ch not in "Vhdrpjfb":
                    opts.append(("?", ch))
                elif ch == "b":
                    if j + 1 < len(a):
                        opts.append(("b", a[j + 1:]))
                    elif i + 1 < len(argv):
                        i += 1
                        opts.append(("b", argv[i]))
                    else:
                        opts.append((":", "b"))
                    break
                else:
                    opts.append((ch, None))
                j += 1
        else:
            words.append(a)
        i += 1
    return opts, words


def _batch(rd: Rd, name: str, force: bool) -> int:
    try:
        if name == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(name) as f:
                lines = f.read().splitlines()
    except OSError as e:
        rd.err(f'Cannot open file "{name}" for reading: {os.strerror(e.errno or errno.EIO)}')
        return e.errno or errno.EIO
    ret = 0
    lineno = 0
    pending = ""
    for raw in lines:
        lineno += 1
        if raw.endswith("\\"):
            pending += raw[:-1]
            continue
        line, pending = pending + raw, ""
        try:
            args = shlex.split(line, comments=True)
        except ValueError:
            args = line.split("#", 1)[0].split()
        if not args:
            continue
        ret = rd_cmd(rd, args)
        if ret:
            rd.err(f"Command failed {name}:{lineno}")
            if not force:
                break
    return ret


def main(argv: list[str] | None = None, prog: str = "rdma") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = os.path.basename(prog) or "rdma"
    opts, words = _getopt(argv)
    json_output = pretty = details = driver_details = force = False
    batch = None
    for ch, val in opts:
        if ch == "V":
            sys.stdout.write(f"{prog} utility, iproute2-{VERSION}\n")
            return 0
        if ch == "h":
            sys.stdout.write(HELP.format(prog))
            return 0
        if ch == ":":
            sys.stderr.write(f"-{val} option requires an argument\n")
            return 1
        if ch == "?":
            sys.stderr.write("Unknown option.\n")
            sys.stderr.flush()
            sys.stdout.write(HELP.format(prog))
            return 1
        if ch == "p":
            pretty = True
        elif ch == "d":
            if details:
                driver_details = True
            details = True
        elif ch == "j":
            json_output = True
        elif ch == "f":
            force = True
        elif ch == "b":
            batch = val
    rd = Rd(prog, json_output, pretty, details, driver_details)
    try:
        rd.connect()
    except Failed:
        sys.stderr.write("Failed to open NETLINK_RDMA socket\n")
        return 1
    try:
        ret = _batch(rd, batch, force) if batch is not None else rd_cmd(rd, words)
    finally:
        sys.stdout.flush()
        rd.conn.sock.close()
    return 1 if ret else 0
