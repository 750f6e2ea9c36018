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
  (:mod:`.stat`, with the daemon's ``stat_*`` commands).

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

The package follows iproute2's rdma/ files: this module is rdma.c (the
options, the object words, batch mode); :mod:`.utils` is utils.c (struct rd,
argument walking, filters, the daemon connection), :mod:`.json_writer` is
lib/json_writer.c, and :mod:`.link`, :mod:`.dev`, :mod:`.res` and
:mod:`.stat` are link.c, dev.c, res*.c and stat*.c.
"""

from __future__ import annotations

import errno
import os
import shlex
import sys

from .dev import cmd_dev
from .link import cmd_link
from .res import cmd_res
from .stat import cmd_stat
from .utils import Failed, Rd

VERSION = "6.1.0"

HELP = ("Usage: {0} [ OPTIONS ] OBJECT {{ COMMAND | help }}\n"
        "       {0} [ -f[orce] ] -b[atch] filename\n"
        "where  OBJECT := {{ dev | link | resource | system | statistic | help }}\n"
        "       OPTIONS := {{ -V[ersion] | -d[etails] | -j[son] | -p[retty] -r[aw]}}\n")


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
                        ("statistic", lambda: cmd_stat(rd))], "object")


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
