"""``softrdma mlxconfig [-d DEV] [-y] [-e] q|query [PARAM...] | set|s
PARAM=VALUE... | reset|r``: MFT's ``mlxconfig`` on a device's NV
configuration (``device.nvconfig``).

``query`` prints the "Next Boot" column (with ``-e``: "Default",
"Current" and "Next Boot", a ``*`` before each parameter whose next-boot
value is not its default); ``set`` shows "Next Boot" and "New" and asks
``Apply new Configuration? (y/n) [n] :`` (``-y`` answers yes); ``reset``
asks ``Reset configuration for device DEV? (y/n) [n] :``.  Changes apply
at the next firmware reset (``mlxfwreset``) or daemon restart.  Without
``-d`` every device is queried.  Output: docs/formats/mlxconfig.md.

softrdma's own command ``cable`` shows or sets where each port is plugged
in for each protocol, what a LINK_TYPE switch needs (``device.vpi``):
``cable`` lists them, ``cable P1 ib fabric BASE node CA [port N]`` and
``cable P1 eth NETDEV`` set one.
"""

from __future__ import annotations

import sys

from ...verbs.device import management
from .common import ToolError, apply, find, functions, mst_names, mst_started, parse_flags, run_tool

USAGE = """
    NAME:
        mlxconfig

    SYNOPSIS:
        mlxconfig [-d <device>] [-y] [-e] <q[uery]|s[et]|r[eset]> [<PARAM>[=<VALUE>] ...]

    OPTIONS:
        -d|--dev <device>     : Perform operation for a specified mst device.
        -y|--yes              : Answer yes in prompt.
        -e|--show_default     : Show default and current configurations.
        -h|--help             : Display help message.

    COMMANDS:
        q[uery]               : Query supported configurations.
        s[et]                 : Set configurations to a specific device.
        r[eset]               : Reset all configurations to their default value.
        cable                 : (softrdma) Show where each port is plugged in for IB and for ETH.
        cable P<n> ib fabric <fabric> node <CA> [port <n>]
                              : (softrdma) Port n's InfiniBand cable: a CA port of a fabric.
        cable P<n> eth <netdev>
                              : (softrdma) Port n's Ethernet cable: a netdev.
"""

NAME_W, VAL_W = 36, 16


def _header(n: int, fn: dict, shown: str, out) -> None:
    out.write(f"\nDevice #{n}:\n----------\n\n")
    out.write(f"{'Device type:':<16}{fn['model']:<16}\n")
    out.write(f"{'Name:':<16}{fn['part_name']:<16}\n")
    out.write(f"{'Description:':<16}{fn['description']}\n")
    out.write(f"{'Device:':<16}{shown:<32}\n\n")


def query(conn, fn: dict, shown: str, n: int, names: list[str], extended: bool, out) -> None:
    rows = conn.call("nvconfig", name=fn["name"])[0]["rows"]
    by_name = {r["name"]: r for r in rows}
    for p in names:
        if p not in by_name:
            raise ToolError(f"The Device doesn't support {p} parameter")
    rows = [by_name[p] for p in names] if names else rows
    _header(n, fn, shown, out)
    if extended:
        out.write(f"{'Configurations:':<{9 + NAME_W + 8}}{'Default':<{VAL_W}}{'Current':<{VAL_W}}Next Boot\n")
        for r in rows:
            star = "*" if r["next"] != r["default"] else " "
            out.write(f"{star:<9}{r['name']:<{NAME_W + 8}}{r['default_text']:<{VAL_W}}"
                      f"{r['current_text']:<{VAL_W}}{r['next_text']:<{VAL_W}}\n")
        out.write("The '*' shows parameters with next value different from default/current value.\n")
    else:
        out.write(f"{'Configurations:':<{9 + NAME_W}}Next Boot\n")
        for r in rows:
            out.write(f"{'':<9}{r['name']:<{NAME_W}}{r['next_text']:<{VAL_W}}\n")


def set_(conn, fn: dict, shown: str, pairs: list[str], yes: bool, out) -> int:
    changes = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key or not value:
            raise ToolError(f"Bad parameter format: {pair!r} (expected PARAM=VALUE)")
        changes[key] = value
    rows = {r["name"]: r for r in conn.call("nvconfig", name=fn["name"])[0]["rows"]}
    for key in changes:
        if key not in rows:
            raise ToolError(f"The Device doesn't support {key} parameter")
    _header(1, fn, shown, out)
    out.write(f"{'Configurations:':<{9 + NAME_W}}{'Next Boot':<{VAL_W}}New\n")
    from ...device.nvconfig import params
    table = params()
    for key, value in changes.items():
        try:
            new = table[key].show(table[key].parse(value))
        except ValueError as e:
            raise ToolError(f"{e}") from None
        out.write(f"{'':<9}{key:<{NAME_W}}{rows[key]['next_text']:<{VAL_W}}{new:<{VAL_W}}\n")
    out.write("\n")
    return apply(out, " Apply new Configuration? (y/n) [n] : ", yes,
                 lambda: conn.call("nvconfig", name=fn["name"], set=changes), "Failed to set configuration")


def reset(conn, fn: dict, shown: str, yes: bool, out) -> int:
    return apply(out, f"\nReset configuration for device {shown}? (y/n) [n] : ", yes,
                 lambda: conn.call("nvconfig", name=fn["name"], reset=True), "Failed to reset configuration")


def parse_cable(args: list[str]) -> dict:
    """``P1 ib fabric F node N [port K]`` / ``P1 eth NETDEV`` as the
    daemon's ``cable`` request; ToolError (status 3) otherwise."""
    bad = ToolError("Bad cable: expected P<n> ib fabric <fabric> node <CA> [port <n>] or P<n> eth <netdev>", 3)
    if len(args) < 3 or args[0] not in ("P1", "P2") or args[1] not in ("ib", "eth"):
        raise bad
    port = int(args[0][1])
    if args[1] == "eth":
        if len(args) != 3:
            raise bad
        return {"port": port, "kind": "eth", "netdev": args[2]}
    words = args[2:]
    if len(words) % 2:
        raise bad
    kv = dict(zip(words[::2], words[1::2]))
    if set(kv) - {"fabric", "node", "port"} or not {"fabric", "node"} <= set(kv):
        raise bad
    try:
        ca_port = int(kv.get("port", "1"), 10)
    except ValueError:
        raise bad from None
    return {"port": port, "kind": "ib", "fabric": kv["fabric"], "node": kv["node"], "ca_port": ca_port}


def cables(conn, fn: dict, shown: str, cable: dict | None, out) -> int:
    """``cable``: set one (when given), then show every port's."""
    reply = conn.call("nvconfig", name=fn["name"], **({"cable": cable} if cable else {}))[0]
    out.write(f"\nDevice:         {shown}\n\n{'Port':<8}{'Protocol':<12}Cable\n")
    for port in ("1", "2"):
        for kind in ("ib", "eth"):
            c = reply["cables"].get(port, {}).get(kind)
            if c is None:
                text = "-"
            elif kind == "ib":
                text = f"fabric {c['fabric']} node {c['node']} port {c['ca_port']}"
            else:
                text = c["netdev"]
            out.write(f"{'P' + port:<8}{kind.upper():<12}{text}\n")
    return 0


def parse(argv: list[str]):
    try:
        opts, rest = parse_flags(argv, {"-d": "dev", "--dev": "dev"},
                                 {"-y": "yes", "--yes": "yes", "-e": "extended", "--show_default": "extended"})
    except ToolError as e:
        raise ToolError(str(e), 3) from None
    if opts.get("help"):
        raise ToolError("", 0)
    dev, yes, extended = opts.get("dev"), opts.get("yes", False), opts.get("extended", False)
    if not rest:
        raise ToolError("No command found. For more information please read the help message:", 3)
    cmd, args = rest[0], rest[1:]
    cmd = {"q": "query", "s": "set", "r": "reset"}.get(cmd, cmd)
    if cmd not in ("query", "set", "reset", "cable"):
        raise ToolError(f"Unknown command \"{rest[0]}\"", 3)
    if cmd == "set" and not args:
        raise ToolError("missing configuration parameters to set", 3)
    if cmd == "reset" and args:
        raise ToolError(f"Unexpected argument \"{args[0]}\" for reset", 3)
    if cmd == "cable" and args:
        args = [parse_cable(args)]
    if cmd != "query" and dev is None:
        raise ToolError("Device must be specified using -d flag", 3)
    return dev, yes, extended, cmd, args


def main(argv: list[str], prog: str = "mlxconfig") -> int:
    out = sys.stdout
    try:
        dev, yes, extended, cmd, args = parse(argv)
    except ToolError as e:
        if e.status == 0:
            out.write(USAGE)
            return 0
        sys.stderr.write(f"-E- {e}\n")
        if e.status == 3:
            sys.stderr.write(USAGE)
        return e.status
    return run_tool(lambda: _run(dev, yes, extended, cmd, args, out))


def _run(dev, yes, extended, cmd, args, out) -> int:
    conn = management()
    if dev is None:                         # every device, by its MST name once mst is started
        names = {v["bdf"]: k for k, v in mst_names(functions(conn)).items()} if mst_started() else {}
        pfs = [fn for fn in functions(conn) if fn["vf"] is None]
        if not pfs:
            raise ToolError("No devices found.")
        for n, fn in enumerate(pfs, 1):
            shown = f"/dev/mst/{names[fn['bdf']]}" if fn["bdf"] in names else fn["bdf"]
            query(conn, fn, shown, n, args, extended, out)
        return 0
    fn, shown = find(dev, conn)
    if fn["vf"] is not None:
        raise ToolError(f"Failed to query device: {shown}. The device is a virtual function: its"
                        f" configuration is its PF's")
    if cmd == "query":
        query(conn, fn, shown, 1, args, extended, out)
        return 0
    if cmd == "set":
        return set_(conn, fn, shown, args, yes, out)
    if cmd == "cable":
        return cables(conn, fn, shown, args[0] if args else None, out)
    return reset(conn, fn, shown, yes, out)
