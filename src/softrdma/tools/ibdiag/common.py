"""ibdiag_common.c of infiniband-diags 44: the options every diag takes,
its usage text, IBEXIT/IBWARN, and resolve_portid_str() (LID, directed
route "0,1,3", GUID -- which needs the SA, absent here, so it fails as
the real tool does without one).

A tool calls ``parse(argv, prog, tool_opts, exclude, usage_args,
examples, handler)``: glibc getopt_long over the tool's options and the
common ones not in ``exclude``; ``-h`` or a bad option prints the usage on
stderr and exits 2, ``-V`` prints the version on stderr and exits 0.
"""

from __future__ import annotations

import sys

from ...sm.umad import TransportError
from ..libc import GetoptLong, strtol, strtoul
from .rpc import MadPort, PortId

IBDIAG_VERSION = "44.0"

DEST_LID, DEST_DRPATH, DEST_GUID, DEST_DRSLID = "lid", "drpath", "guid", "drslid"

#: (long name, short char or None, takes an argument, argument name, help)
COMMON = [
    ("config", "z", 1, "<config>", "use config file, default: /etc/infiniband-diags/ibdiag.conf"),
    ("Ca", "C", 1, "<ca>", "Ca name to use"),
    ("Port", "P", 1, "<port>", "Ca port number to use"),
    ("Direct", "D", 0, None, "use Direct address argument"),
    ("Lid", "L", 0, None, "use LID address argument"),
    ("Guid", "G", 0, None, "use GUID address argument"),
    ("timeout", "t", 1, "<ms>", "timeout in ms"),
    ("sm_port", "s", 1, "<lid>", "SM port lid"),
    ("show_keys", "K", 0, None, "display security keys in output"),
    ("m_key", "y", 1, "<key>", "M_Key to use in request"),
    ("errors", "e", 0, None, "show send and receive errors"),
    ("verbose", "v", 0, None, "increase verbosity level"),
    ("debug", "d", 0, None, "raise debug level"),
    ("help", "h", 0, None, "help message"),
    ("version", "V", 0, None, "show version"),
]


class Exit(Exception):
    """Leave the tool with ``code`` (after the message, if any, on stderr)."""

    def __init__(self, code: int, msg: str | None = None):
        super().__init__(msg)
        self.code = code
        self.msg = msg


def ibexit(prog: str, msg: str) -> Exit:
    """IBEXIT(): ``<prog>: iberror: failed: <msg>``, exit(-1)."""
    return Exit(255, f"{prog}: iberror: failed: {msg}")


class Config:
    def __init__(self):
        self.ca = None
        self.ca_port = 0
        self.dest_type = DEST_LID
        self.timeout = 0
        self.sm_lid = 0
        self.show_keys = False
        self.mkey = 0
        self.verbose = 0


def _opt_line(long, short, arg, desc) -> str:
    head = f"  --{long}" + (f", -{short}" if short else "") + (f" {arg}" if arg else "")
    if len(head) <= 24:
        return f"{head:<24}  {desc}\n"
    # a long head: the text wraps at 40 columns under itself (ibdiag_common's layout)
    lines, cur = [], ""
    for word in desc.split(" "):
        if cur and len(cur) + len(word) + 1 > 40:
            lines.append(cur)
            cur = ""
        cur += word + " "
    lines.append(cur.rstrip(" ") if not lines else cur.rstrip(" "))
    ind = " " * (len(head) + 2)
    return f"{head}  " + f"\n{ind}".join(lines) + "\n"


def usage_text(prog, tool_opts, exclude, usage_args, examples) -> str:
    out = [f"\nUsage: {prog} [options] {usage_args}\n\nOptions:\n"]
    for long, short, _has, arg, desc in tool_opts:
        out.append(_opt_line(long, short, arg, desc))
    for long, short, _has, arg, desc in COMMON:
        if short not in (exclude or ""):
            out.append(_opt_line(long, short, arg, desc))
    if examples:
        out.append("\nExamples:\n")
        out += [f"  {prog} {e}\n" for e in examples]
    out.append("\n")
    return "".join(out)


def parse(argv, prog, tool_opts, exclude, usage_args, examples, handler):
    """ibdiag_process_opts(): returns (Config, operands); raises Exit."""
    cfg = Config()
    common = [o for o in COMMON if o[1] not in (exclude or "")]
    allopts = list(tool_opts) + common
    optstring = ""
    longopts = []
    for i, (long, short, has, _arg, _desc) in enumerate(allopts):
        val = short or f"\x01{long}"
        if short:
            optstring += short + (":" if has else "")
        longopts.append((long, has, val))
    usage = usage_text(prog, tool_opts, exclude, usage_args, examples)
    g = GetoptLong(argv, prog, optstring, longopts)
    tool_shorts = {o[1] or f"\x01{o[0]}" for o in tool_opts}
    for c, arg in g:
        if c in tool_shorts:
            if handler(c, arg) is False:
                raise Exit(2, usage)
            continue
        if c == "C":
            cfg.ca = arg
        elif c == "P":
            cfg.ca_port = strtol(arg)
        elif c == "D":
            cfg.dest_type = DEST_DRPATH
        elif c == "L":
            cfg.dest_type = DEST_LID
        elif c == "G":
            cfg.dest_type = DEST_GUID
        elif c == "t":
            cfg.timeout = strtol(arg)
        elif c == "s":
            cfg.sm_lid = strtol(arg)
        elif c == "K":
            cfg.show_keys = True
        elif c == "y":
            cfg.mkey = strtoul(arg)
        elif c in ("v", "d"):
            cfg.verbose += 1
        elif c in ("z", "e"):
            pass
        elif c == "V":
            raise Exit(0, f"{prog} BUILD VERSION: {IBDIAG_VERSION}")
        else:                                   # -h, unknown option, missing argument
            raise Exit(2, usage)
    cfg.usage = usage
    return cfg, g.operands


def run(prog: str, body) -> int:
    """Run ``body()`` and turn Exit/transport failures into the real exits."""
    try:
        rc = body()
        sys.stdout.flush()
        return rc or 0
    except Exit as e:
        sys.stdout.flush()
        if e.msg is not None:
            sys.stderr.write(e.msg if e.msg.endswith("\n") else e.msg + "\n")
        return e.code
    except TransportError as e:
        sys.stdout.flush()
        # mad_rpc_open_port() failing: no ibsim (umad2sim cannot connect)
        sys.stderr.write(f"{prog}: iberror: failed: Failed to open '(null)' port '0' ({e})\n")
        return 255
    except BrokenPipeError:
        return 0


def open_port(prog: str, cfg: Config) -> MadPort:
    return MadPort(cfg.timeout or None)


def str2drpath(s: str):
    """"0,1,3" -> (1, 3); None when it is not a path."""
    try:
        parts = [int(x, 0) for x in s.strip().split(",") if x.strip() != ""]
    except ValueError:
        return None
    if not parts or any(p < 0 or p > 255 for p in parts) or len(parts) > 64:
        return None
    return tuple(parts[1:])


def resolve_portid(port: MadPort, s: str, dest_type: str) -> PortId | None:
    """resolve_portid_str(); None where the real one returns < 0."""
    if s is None:
        return None
    if dest_type == DEST_LID:
        lid = strtol(s)
        if lid <= 0 or lid >= 0xC000:
            return None
        return PortId(lid)
    if dest_type == DEST_DRPATH:
        path = str2drpath(s)
        return None if path is None else PortId(0, path)
    if dest_type == DEST_DRSLID:
        lid_s, _, path_s = s.partition(" ")
        path = str2drpath(path_s) if path_s.strip() else ()
        lid = strtol(lid_s)
        if path is None:
            return None
        return PortId(lid, path, port.lid) if lid else PortId(0, path)
    # a GUID goes to the SA (PathRecord); there is no SA to ask
    return None
