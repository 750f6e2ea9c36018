"""What the firmware tools share.

Device names (``-d``), as the real tools take them: the MST name
``/dev/mst/mt4119_pciconf0`` (only after ``mst start``, as with the real
MST driver), the bus address ``0000:5e:00.0`` or ``5e:00.0``, and the RDMA
device name ``mlx5_0``.

``mst start`` records the MST devices in the run directory
(``RUN/mst/<name>``, each holding the function's bus address): the
``/dev/mst`` of this host's softrdma.  MST names number the PFs of one
part number in bus order: ``mt4119_pciconf0``, ``mt4119_pciconf1``, ...
"""

from __future__ import annotations

import os
import sys

from ...uapi.rundir import default_run_dir
from ...verbs.device import management
from ...verbs.errors import PyverbsError

MST_PREFIX = "/dev/mst/"


class ToolError(Exception):
    """A ``-E-`` line and the tool's exit status."""

    def __init__(self, msg: str, status: int = 1):
        super().__init__(msg)
        self.status = status


def mst_dir() -> str:
    return os.path.join(default_run_dir(), "mst")


def mst_started() -> bool:
    return os.path.isdir(mst_dir())


def mst_names(functions: list[dict]) -> dict[str, dict]:
    """MST name -> PF row (PFs in bus order, numbered per part number)."""
    out: dict[str, dict] = {}
    count: dict[int, int] = {}
    for f in functions:
        if f["vf"] is not None:
            continue
        n = count.get(f["part_id"], 0)
        count[f["part_id"]] = n + 1
        out[f"mt{f['part_id']}_pciconf{n}"] = f
    return out


def functions(conn=None) -> list[dict]:
    conn = conn or management()
    return conn.call("pci_functions")[0]["functions"]


def find(dev: str, conn=None) -> tuple[dict, str]:
    """The function ``-d dev`` names and how the tools print it (the MST
    name for an MST device, else what was given).  ToolError as the real
    tools fail to open a device."""
    try:
        funcs = functions(conn)
    except PyverbsError as e:
        raise ToolError(f"Failed to open device: {dev}, {e}") from None
    if dev.startswith(MST_PREFIX):
        name = dev[len(MST_PREFIX):]
        path = os.path.join(mst_dir(), name)
        try:
            with open(path) as f:
                bdf = f.read().strip()
        except OSError:
            raise ToolError(f"Failed to open device: {dev}, No such file or directory") from None
        for fn in funcs:
            if fn["bdf"] == bdf:
                return fn, dev
        raise ToolError(f"Failed to open device: {dev}, No such device")
    for fn in funcs:
        if dev in (fn["name"], fn["bdf"], fn["short"]):
            return fn, dev
    raise ToolError(f"Failed to open device: {dev}, No such device")


def confirm(question: str, yes: bool, out=sys.stdout) -> bool:
    """The tools' ``? (y/n) [n] : `` prompt; ``yes`` (-y) answers it."""
    out.write(question)
    if yes:
        out.write("y\n")
        out.flush()
        return True
    out.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def parse_flags(argv: list[str], valued: dict[str, str], flags: dict[str, str]) -> tuple[dict, list[str]]:
    """The MFT tools' switches: ``valued`` (switch -> key) take the next
    word, ``flags`` (switch -> key) are True when given; the rest are the
    command words.  ToolError (status 1) for an unknown switch or a missing
    value; ``-h``/``--help`` gives key "help"."""
    opts: dict = {}
    words: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in valued:
            if i + 1 >= len(argv):
                raise ToolError(f"Missing argument for flag {a}")
            opts[valued[a]] = argv[i + 1]
            i += 2
            continue
        if a in flags:
            opts[flags[a]] = True
        elif a in ("-h", "--help"):
            opts["help"] = True
        elif a.startswith("-") and len(a) > 1:
            raise ToolError(f"Invalid switch \"{a}\" is specified.")
        else:
            words.append(a)
        i += 1
    return opts, words


def apply(out, question: str, yes: bool, action, failure: str) -> int:
    """Ask ``question``; on yes run ``action()`` between mlxconfig's
    ``Applying...`` and ``Done!`` (ToolError ``failure: ...`` if it fails)."""
    if not confirm(question, yes, out):
        out.write("Aborted by user\n")
        return 1
    out.write("Applying... ")
    out.flush()
    try:
        action()
    except PyverbsError as e:
        out.write("Failed!\n")
        raise ToolError(f"{failure}: {e}") from None
    out.write("Done!\n-I- Please reboot machine to load new configurations.\n")
    return 0


def run_tool(body, out=sys.stdout) -> int:
    """``body()``'s exit status; a ToolError or a failed daemon call is one
    ``-E-`` line on stderr."""
    try:
        return body()
    except ToolError as e:
        out.flush()
        sys.stderr.write(f"-E- {e}\n")
        return e.status
    except PyverbsError as e:
        out.flush()
        sys.stderr.write(f"-E- {e}\n")
        return 1
