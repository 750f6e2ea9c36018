"""``softrdma mlxfwreset -d DEV [-y] [-l 3] reset | query``: MFT's
``mlxfwreset``.  A reset boots the device's firmware again: the NV
configuration's next-boot values (``mlxconfig set``) and a burnt firmware
(``flint burn``) take effect.  Refused while the device has VFs or open
contexts.  Output: docs/formats/mlxfwreset.md (within docs/formats/flint.md).
"""

from __future__ import annotations

import sys

from ...verbs.device import management
from ...verbs.errors import PyverbsError
from .common import ToolError, confirm, find, parse_flags

USAGE = """Usage: mlxfwreset -d|--device DEVICE [-l|--level {3}] [-y|--yes] {query,reset,r,q}
"""

LEVEL3 = "3: Driver restart and PCI reset"


def main(argv: list[str], prog: str = "mlxfwreset") -> int:
    out = sys.stdout
    try:
        try:
            opts, cmds = parse_flags(argv, {"-d": "dev", "--device": "dev", "-l": "level", "--level": "level"},
                                     {"-y": "yes", "--yes": "yes"})
        except ToolError as e:
            raise ToolError(str(e), 2) from None
        if opts.get("help"):
            out.write(USAGE)
            return 0
        dev, yes = opts.get("dev"), opts.get("yes", False)
        if opts.get("level", "3") != "3":
            raise ToolError(f"Reset level {opts['level']} is not supported for this device (supported: 3)", 1)
        if dev is None:
            raise ToolError("argument -d/--device is required", 2)
        cmd = {"r": "reset", "q": "query"}.get(cmds[0], cmds[0]) if len(cmds) == 1 else None
        if cmd not in ("reset", "query"):
            raise ToolError("one command is required: query or reset", 2)
        conn = management()
        fn, shown = find(dev, conn)
        if cmd == "query":
            out.write(f"Reset-levels:\n{LEVEL3:<40}-Supported     (Default)\n")
            return 0
        out.write(f"Requested reset level for device, {shown}:\n\n{LEVEL3}\n")
        if not confirm("Continue with reset?[y/N] ", yes, out):
            out.write("-E- Aborted by user\n")
            return 1
        out.write(f"{'-I- Sending Reset Command To Fw':<44}")
        out.flush()
        try:
            conn.call("fw_reset", name=fn["name"])
        except PyverbsError as e:
            out.write("-Failed\n")
            raise ToolError(f"{e}") from None
        for step in ("-Done", "-I- Stopping Driver", "-Done", "-I- Resetting PCI", "-Done",
                     "-I- Starting Driver", "-Done", "-I- Restarting MST", "-Done"):
            out.write(f"{step}\n" if step == "-Done" else f"{step:<44}")
        out.write("-I- FW was loaded successfully.\n")
        return 0
    except ToolError as e:
        out.flush()
        if e.status == 2:
            sys.stderr.write(USAGE + f"mlxfwreset: error: {e}\n")
        else:
            sys.stderr.write(f"-E- {e}\n")
        return e.status
    except PyverbsError as e:
        sys.stderr.write(f"-E- {e}\n")
        return 1
