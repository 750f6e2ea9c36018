"""``softrdma mlxdevm``: NVIDIA's mlxdevm (MLNX_OFED's devlink for
sub-functions, iproute2's devlink/devlink.c) over softrdmad.

    mlxdevm [ -j[son] ] [ -p[retty] ] dev show [ DEV ]
    mlxdevm [ -j ] [ -p ] port show [ DEV | DEV/PORT_INDEX | NETDEV ]
    mlxdevm port add DEV flavour pcisf pfnum N sfnum M [ controller C ]
    mlxdevm port function set DEV/PORT_INDEX [ hw_addr ADDR ] [ state { active | inactive } ]
    mlxdevm port del DEV/PORT_INDEX

The output is devlink's (``pr_out_port``): one line per port, its
function's attributes on an indented ``function:`` block; ``-j`` the JSON
of iproute2's json_writer (``-p`` pretty).  Argument errors are devlink's
messages (``Port flavour is expected.``, ``Error: argument "x" is wrong:
unknown flavour``); a refused request prints the kernel's extack
(``Error: mlx5_core: SF already exist. Choose different sfnum.``) and
``kernel answers: <strerror>``, exit status 1.  Formats:
docs/formats/mlxdevm.md.
"""

from __future__ import annotations

import os
import sys

from ..verbs.device import management
from ..verbs.errors import PyverbsError
from .rdma.json_writer import JsonWriter

FLAVOURS = ("physical", "cpu", "dsa", "pcipf", "pcivf", "pcisf", "virtual")
STATES = ("inactive", "active")


def _help(prog: str) -> str:
    return (f"Usage: {prog} [ OPTIONS ] OBJECT {{ COMMAND | help }}\n"
            "where  OBJECT := { dev | port }\n"
            "       OPTIONS := { -V[ersion] | -n[o-nice-names] | -j[son] | -p[retty] | -v[erbose] }\n")


def _port_help(prog: str) -> str:
    return (f"Usage: {prog} port show [ DEV/PORT_INDEX ]\n"
            f"       {prog} port function set DEV/PORT_INDEX [ hw_addr ADDR ] [ state {{ active | inactive }} ]\n"
            f"       {prog} port add DEV/PORT_INDEX flavour FLAVOUR pfnum PFNUM\n"
            "                      [ sfnum SFNUM ][ controller CNUM ]\n"
            f"       {prog} port del DEV/PORT_INDEX\n")


class Fail(Exception):
    """Messages already printed; the exit status."""

    def __init__(self, status: int = 1):
        super().__init__(status)
        self.status = status


def err(msg: str) -> None:
    sys.stderr.write(msg + "\n")


def invarg(msg: str, arg: str):
    """iproute2's invarg(): the message, exit(-1)."""
    err(f'Error: argument "{arg}" is wrong: {msg}')
    raise Fail(255)


def match(word: str | None, pattern: str) -> bool:
    """devlink's dl_argv_match: a prefix of the keyword."""
    return word is not None and word != "" and pattern.startswith(word)


# -- talking to the daemon ---------------------------------------------------


def call(op: str, **kw):
    try:
        return management().call(op, **kw)[0]
    except PyverbsError as e:
        code = getattr(e, "error_code", -1)
        extack = getattr(e, "extack", None)
        if extack:
            err(f"Error: {extack}{'' if extack.endswith('.') else '.'}")
        if code is None or code < 0:
            err(f"{e}")
        else:
            err(f"kernel answers: {os.strerror(code)}")
        raise Fail(1) from None


# -- argument parsing (dl_argv_parse) -----------------------------------------


def parse_u32(word: str | None, limit: int = 0xFFFFFFFF) -> int:
    if word is None:
        err("Unsigned number argument expected")
        raise Fail(1)
    try:
        v = int(word, 10)
        if not 0 <= v <= limit or word.strip() != word:
            raise ValueError
    except ValueError:
        err(f'"{word}" is not a number or not within range')
        raise Fail(1) from None
    return v


def parse_port_handle(word: str | None, netdevs: dict) -> tuple[str, int]:
    """``bus/dev/index`` or a netdev name."""
    if word is None:
        err('Port identification ("bus_name/dev_name/port_index" or "netdev ifname") expected.')
        raise Fail(1)
    n = word.count("/")
    if n == 0:
        if word not in netdevs:
            err(f'Netdevice "{word}" not found')
            raise Fail(1)
        return netdevs[word]
    if n != 2:
        err("Wrong port identification string format.")
        err('Expected "bus_name/dev_name/port_index" or "netdev_ifname".')
        raise Fail(1)
    handle, _, index = word.rpartition("/")
    try:
        i = int(index, 10)
        if not 0 <= i <= 0xFFFFFFFF:
            raise ValueError
    except ValueError:
        err(f'Port index "{index}" is not a number or not within range')
        raise Fail(1) from None
    return handle, i


def parse_hw_addr(word: str) -> str:
    parts = word.split(":")
    try:
        if len(parts) != 6 or not all(1 <= len(p) <= 2 for p in parts):
            raise ValueError
        bytes(int(p, 16) for p in parts)
    except ValueError:
        err(f'"{word}" is invalid lladdr.')
        raise Fail(1) from None
    return word


def parse_opts(words: list[str], allowed: dict[str, str]) -> dict:
    """The keyword/value pairs after a handle; unknown words as devlink."""
    opts: dict = {}
    unknown = None
    i = 0
    while i < len(words):
        w = words[i]
        key = next((k for k in allowed if match(w, k)), None)
        if key is None:
            unknown = unknown or w
            i += 1
            continue
        value = words[i + 1] if i + 1 < len(words) else None
        kind = allowed[key]
        if kind == "str":
            if value is None:
                err("String parameter expected")
                raise Fail(1)
            if key == "flavour":
                if value not in FLAVOURS:
                    invarg("unknown flavour", value)
            elif key == "state":
                if value not in STATES:
                    invarg("unknown state", value)
            elif key == "hw_addr":
                value = parse_hw_addr(value)
            opts[key] = value
        elif kind == "u16":
            opts[key] = parse_u32(value, 0xFFFF)
        else:
            opts[key] = parse_u32(value)
        i += 2
    return {**opts, "_unknown": unknown}


def finish(opts: dict, required: dict[str, str]) -> None:
    """devlink's dl_args_finding_required_validate and its unknown option."""
    missing = [msg for key, msg in required.items() if key not in opts]
    for msg in missing:
        err(msg)
    if opts.get("_unknown"):
        err(f'Unknown option "{opts["_unknown"]}"')
    if missing or opts.get("_unknown"):
        raise Fail(1)


# -- output (pr_out_port, pr_out_dev) -------------------------------------------

PORT_KEYS = ("type", "netdev", "flavour", "controller", "pfnum", "vfnum", "sfnum", "external", "port",
             "splittable")


def _text_value(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def port_text(p: dict) -> str:
    line = f"{p['handle']}: " + " ".join(f"{k} {_text_value(p[k])}" for k in PORT_KEYS if k in p)
    fn = p.get("function")
    if fn:
        line += "\n  function:\n    " + " ".join(f"{k} {fn[k]}" for k in ("hw_addr", "state", "opstate") if k in fn)
    return line + "\n"


def write_json(section: str, items: list[tuple[str, dict]], pretty: bool, out) -> None:
    w = JsonWriter(out.write, pretty)
    w.start_object()
    w.name(section)
    w.start_object()
    for handle, attrs in items:
        w.name(handle)
        w.start_object()
        for k in PORT_KEYS:
            if k in attrs:
                w.name(k)
                w.value(attrs[k])
        fn = attrs.get("function")
        if fn:
            w.name("function")
            w.start_object()
            for k in ("hw_addr", "state", "opstate"):
                if k in fn:
                    w.name(k)
                    w.value(fn[k])
            w.end_object()
        w.end_object()
    w.end_object()
    w.end_object()
    out.write("\n")


def show_ports(ports: list[dict], opts: dict, out) -> None:
    if opts["json"]:
        write_json("port", [(p["handle"], p) for p in ports], opts["pretty"], out)
    else:
        for p in ports:
            out.write(port_text(p))


# -- commands -------------------------------------------------------------------


def cmd_dev(words: list[str], opts: dict, prog: str, out) -> int:
    if not words or match(words[0], "show") or match(words[0], "list"):
        args = words[1:]
        devs = call("devm_show")["devs"]
        if args:
            if args[0].count("/") != 1:
                err("Wrong identification string format.")
                err('Devlink identification ("bus_name/dev_name") expected')
                return 1
            if args[0] not in devs:
                err("kernel answers: No such device")
                return 1
            devs = [args[0]]
        if opts["json"]:
            write_json("dev", [(d, {}) for d in devs], opts["pretty"], out)
        else:
            out.write("".join(f"{d}\n" for d in devs))
        return 0
    if match(words[0], "help"):
        err(f"Usage: {prog} dev show [ DEV ]")
        return 0
    err(f'Command "{words[0]}" not found')
    return 1


def _netdevs(ports: list[dict]) -> dict:
    out = {}
    for p in ports:
        if p.get("netdev"):
            h, _, i = p["handle"].rpartition("/")
            out[p["netdev"]] = (h, int(i))
    return out


def cmd_port(words: list[str], opts: dict, prog: str, out) -> int:
    sub = words[0] if words else None
    rest = words[1:]
    if sub is not None and match(sub, "help"):
        err(_port_help(prog).rstrip("\n"))
        return 0
    if sub is None or match(sub, "show") or match(sub, "list"):
        if not rest:
            show_ports(call("devm_show")["ports"], opts, out)
        elif rest[0].count("/") == 1:
            show_ports(call("devm_show", dev=rest[0])["ports"], opts, out)
        else:
            dev, index = parse_port_handle(rest[0], _netdevs(call("devm_show")["ports"]))
            finish(parse_opts(rest[1:], {}), {})
            show_ports(call("devm_show", dev=dev, index=index)["ports"], opts, out)
        return 0
    if match(sub, "add"):
        if not rest or match(rest[0], "help"):
            err(f"       {prog} port add DEV/PORT_INDEX flavour FLAVOUR pfnum PFNUM\n"
                "                      [ sfnum SFNUM ][ controller CNUM ]")
            return 0
        dev, index = rest[0], None
        if dev.count("/") == 2:         # DEV/PORT_INDEX: devlink sends the index (mlx5 assigns its own)
            dev, index = parse_port_handle(dev, {})
        elif dev.count("/") != 1:
            err("Wrong port identification string format.")
            err('Expected "bus_name/dev_name" or "bus_name/dev_name/port_index" or "netdev_ifname".')
            return 1
        a = parse_opts(rest[1:], {"flavour": "str", "pfnum": "u16", "sfnum": "u32", "controller": "u32"})
        finish(a, {"flavour": "Port flavour is expected.", "pfnum": "Port PCI PF number is expected."})
        port = call("devm_port_add", dev=dev, flavour=a["flavour"], pfnum=a["pfnum"], sfnum=a.get("sfnum"),
                    controller=a.get("controller"), index=index)["port"]
        show_ports([port], opts, out)
        return 0
    if match(sub, "del"):
        if not rest or match(rest[0], "help"):
            err(f"       {prog} port del DEV/PORT_INDEX")
            return 0
        dev, index = parse_port_handle(rest[0], _netdevs(call("devm_show")["ports"]))
        finish(parse_opts(rest[1:], {}), {})
        call("devm_port_del", dev=dev, index=index)
        return 0
    if match(sub, "function"):
        fn_help = (f"Usage: {prog} port function set DEV/PORT_INDEX [ hw_addr ADDR ]"
                   " [ state { active | inactive } ]")
        if not rest or match(rest[0], "help"):
            err(fn_help)
            return 0
        if not match(rest[0], "set"):
            err(f'Command "{rest[0]}" not found')
            return 1
        args = rest[1:]
        if not args:
            err(fn_help)
            return 0
        dev, index = parse_port_handle(args[0], _netdevs(call("devm_show")["ports"]))
        a = parse_opts(args[1:], {"hw_addr": "str", "state": "str"})
        finish(a, {})
        call("devm_port_set", dev=dev, index=index, hw_addr=a.get("hw_addr"), state=a.get("state"))
        return 0
    err(f'Command "{sub}" not found')
    return 1


def main(argv: list[str], prog: str = "mlxdevm") -> int:
    out = sys.stdout
    opts = {"json": False, "pretty": False}
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        a = argv[i]
        if a in ("-j", "--json"):
            opts["json"] = True
        elif a in ("-p", "--pretty"):
            opts["pretty"] = True
        elif a in ("-jp", "-pj"):
            opts["json"] = opts["pretty"] = True
        elif a in ("-n", "--no-nice-names", "-v", "--verbose"):
            pass
        elif a in ("-V", "--Version"):
            out.write(f"{prog} utility, iproute2-6.0.0\n")
            return 0
        elif a in ("-h", "--help"):
            err(_help(prog).rstrip("\n"))
            return 0
        else:
            err("Unknown option.")
            err(_help(prog).rstrip("\n"))
            return 1
        i += 1
    words = argv[i:]
    try:
        if not words or match(words[0], "help"):
            err(_help(prog).rstrip("\n"))
            return 0
        if match(words[0], "dev"):
            return cmd_dev(words[1:], opts, prog, out)
        if match(words[0], "port"):
            return cmd_port(words[1:], opts, prog, out)
        err(f'Object "{words[0]}" not found')
        return 1
    except Fail as e:
        out.flush()
        return e.status


__all__ = ["main", "port_text"]
