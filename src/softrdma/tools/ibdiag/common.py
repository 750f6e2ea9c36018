"""ibdiag_common.c of infiniband-diags 44: the options every diag takes,
its usage text, IBEXIT, and resolve_portid_str() (LID, directed route
"0,1,3", GUID -- a PathRecord from the SA, which only a resident SM
provides: without one it fails as the real tool does).

A tool calls ``parse(argv, prog, tool_opts, exclude, usage_args,
examples, handler)``: glibc getopt_long over the tool's options and the
common ones not in ``exclude``; ``-h`` or a bad option prints the usage on
stderr and exits 2, ``-V`` prints the version on stderr and exits 0.
"""

from __future__ import annotations

import re
import sys

from ...mgmt.umad import TransportError
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

    def __init__(self, code: int, msg: str | None = None, stdout: bool = False):
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.stdout = stdout


def ibexit(prog: str, msg: str) -> Exit:
    """IBEXIT(): ``<prog>: iberror: failed: <msg>`` on stdout, exit(-1)."""
    return Exit(255, f"{prog}: iberror: failed: {msg}", stdout=True)


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


def _pretty_print(start: int, width: int, text: str) -> str:
    """ibdiag_common.c pretty_print(): break at the last space before
    ``width``, continuation lines indented to ``start``."""
    room = width - start
    out = []
    while True:
        text = text.lstrip()
        p = 0
        while True:
            e = p + 1
            p = text.find(" ", e)
            if p == -1 or p >= room:
                break
        if p == -1:
            out.append(text)
            return "".join(out)
        if e == 1:
            e = p
        out.append(text[:e] + "\n" + " " * start)
        text = text[e:]


def _opt_line(long, short, arg, desc) -> str:
    head = f"  --{long}" + (f", -{short}" if short else "") + (f" {arg or '<val>'}" if arg is not None else "")
    if desc:
        head = f"{head:<24}  "
        head += _pretty_print(len(head), 74, desc)
    return head + "\n"


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
            if not re.fullmatch(r"\s*\+?\d+", arg) or not 0 < int(arg) < 2147483647:
                raise ibexit(prog, f'Invalid timeout "{arg}".  Timeout requires a positive '
                                   f'integer value < 2147483647.')
            cfg.timeout = int(arg)
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
        if e.msg is not None:
            stream = sys.stdout if e.stdout else sys.stderr
            stream.write(e.msg if e.msg.endswith("\n") else e.msg + "\n")
        sys.stdout.flush()
        return e.code
    except TransportError as e:
        sys.stdout.flush()
        # mad_rpc_open_port() failing: no ibsim (umad2sim cannot connect)
        sys.stderr.write(f"{prog}: iberror: failed: Failed to open '(null)' port '0' ({e})\n")
        return 255
    except BrokenPipeError:
        return 0


def open_port(prog: str, cfg: Config) -> MadPort:
    """mad_rpc_open_port(): the softrdma IB device ``-C`` names (or, with
    neither ``-C`` nor the ibsim environment, the first active one:
    ``devport``); else an ibsim client on SIM_HOST's (or the first) node."""
    from .devport import device_for
    return MadPort(cfg.timeout or None, device=device_for(cfg.ca, cfg.ca_port), ca_port=cfg.ca_port)


def str2drpath(s: str):
    """libibmad str2drpath(): "0,1,3" -> (1, 3); every token through
    strtoul (so "bad" is port 0, the own node); None past 63 hops."""
    toks = [t for t in s.split(",") if t != ""] or ["0"]
    if len(toks) > 64:
        return None
    return tuple(strtoul(t) & 0xFF for t in toks[1:])


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
    # a GUID goes to the SA (a PathRecord to it): only a resident SM answers
    from .rpc import sa_path_lid
    lid = sa_path_lid(port, strtoul(s))
    return PortId(lid) if lid else None
