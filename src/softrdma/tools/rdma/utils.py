"""``rdma``'s shared machinery, iproute2's rdma/utils.c and rdma.h: struct
rd (:class:`Rd`: the parsed words, the device map, the output through
json_print), the argument walking (``strcmpx``, ``rd_exec_cmd``,
``rd_exec_link``/``rd_exec_dev``), the filters (``rd_build_filter``,
``rd_is_filtered_attr``) and the daemon connection that stands in for the
RDMA netlink socket.
"""

from __future__ import annotations

import errno
import os
import sys

from ...uapi.rundir import SOCKET_NAME, default_run_dir
from ...verbs.connection import Connection
from ...verbs.errors import PyverbsError
from .json_writer import JsonWriter

NUMERIC_CSET = "1234567890,-"


def table_str(table, idx, default="UNKNOWN"):
    """One of iproute2's *_to_str(): the name at ``idx``, or ``default``."""
    return table[idx] if isinstance(idx, int) and 0 <= idx < len(table) else default


def strcmpx(s1: str, s2: str) -> bool:
    """iproute2's strcmpx() == 0: the typed word is a prefix of the keyword."""
    return len(s1) <= len(s2) and s2.startswith(s1)


def _lower(s: str) -> str:
    return s.translate(_LOWER)


_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def get_task_name(pid: int) -> str | None:
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
