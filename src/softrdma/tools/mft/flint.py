"""``softrdma flint``: mstflint's ``flint`` on a device's flash
(``device.firmware``).

    flint -d DEV q                      the firmware on the device (image type, FW version --
                                        and the running one when a burn waits for a reset --,
                                        release date, GUIDs, MACs, PSID)
    flint -i IMAGE q                    an image file's
    flint -d DEV -i IMAGE [-y] burn     write IMAGE to the device's flash (runs after mlxfwreset)
    flint --make-image OUT --fw-version X.Y.Z [--psid PSID] [--release-date dd.mm.yyyy]
          [--payload FILE]              softrdma's own: make an image file

A corrupt image (bad signature, size or CRC), or one for another device
or PSID (without ``-allow_psid_change``), is refused with ``-E-`` and the
device keeps its firmware.  Output: docs/formats/flint.md.
"""

from __future__ import annotations

import os
import sys

from ...device.firmware import Image, ImageError, make_image, parse_image
from ...device.pci import CONNECTX5
from ...verbs.device import management
from ...verbs.errors import PyverbsError
from .common import ToolError, confirm, find, parse_flags, run_tool

USAGE = """    Usage: flint [switches...] <command> [parameters...]
    -d|--device <device>    : The device to which the Flash is connected.
    -i|--image <image>      : Binary image file.
    -y|--yes                : Non interactive mode - assume answer "yes" to all questions.
    --allow_psid_change     : Allow burning a FW image with a different PSID.
    --make-image <out>      : (softrdma) write a firmware image file: --fw-version X.Y.Z [--psid PSID]
                              [--release-date dd.mm.yyyy] [--payload FILE]
    Commands: q|query, b|burn
"""

W = 23


def _line(out, key: str, value: str) -> None:
    out.write(f"{key + ':':<{W}}{value}\n")


def _query(out, version: str, running: str, date: str, guid: str, mac: str, psid: str) -> None:
    """flint's query block (FS4); the running version only when it differs."""
    _line(out, "Image type", "FS4")
    _line(out, "FW Version", version)
    if running != version:
        _line(out, "FW Version(Running)", running)
    _line(out, "FW Release Date", date)
    _line(out, "Product Version", version)
    _line(out, "Rom Info", "N/A")
    _line(out, "Description", f"{'UID':<19}GuidsNumber")
    _line(out, "Base GUID", f"{guid:<24}4")
    _line(out, "Base MAC", f"{mac:<24}4")
    _line(out, "Image VSD", "N/A")
    _line(out, "Device VSD", "N/A")
    _line(out, "PSID", psid)
    _line(out, "Security Attributes", "N/A")


def query_device(fn: dict, out) -> None:
    _query(out, fn["fw_version"], fn["fw_running"], fn["fw_date"], fn["node_guid"].replace(":", ""),
           fn["mac"].replace(":", ""), fn["psid"])


def query_image(img: Image, out) -> None:
    _query(out, img.version, img.version, img.date, "N/A", "N/A", img.psid)


def read_image(path: str) -> tuple[bytes, Image]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ToolError(f"Cannot open {path}: {e.strerror}") from None
    try:
        return data, parse_image(data, path)
    except ImageError as e:
        raise ToolError(str(e)) from None


def burn(dev: str, path: str, yes: bool, allow_psid: bool, out) -> int:
    _, img = read_image(path)                       # refused here, before the device is touched
    conn = management()
    fn, shown = find(dev, conn)
    if fn["vf"] is not None:
        raise ToolError(f"Cannot burn {shown}: a virtual function has its PF's firmware")
    if img.psid != fn["psid"] and not allow_psid:
        raise ToolError(f"PSID mismatch. The PSID on flash ({fn['psid']}) is different than the PSID in the"
                        f" image ({img.psid}).")
    out.write(f"\n    Current FW version on flash:  {fn['fw_version']}\n")
    out.write(f"    New FW version:               {img.version}\n\n")
    if img.version == fn["fw_version"]:
        out.write("    Note: The new FW version is the same as the current FW version on flash.\n\n")
        if not confirm(" Do you want to continue ? (y/n) [n] : ", yes, out):
            out.write("-E- Aborted by user\n")
            return 1
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        out.write("FSMST_INITIALIZE -   OK\n")
        out.flush()
        try:
            conn.call("fw_burn", fds=[fd], name=fn["name"], allow_psid_change=allow_psid)
        except PyverbsError as e:
            raise ToolError(f"Burning FS4 image failed: {e}") from None
    finally:
        os.close(fd)
    out.write("Writing Boot image component -   OK\n")
    out.write("-I- To load new FW run mlxfwreset or reboot machine.\n")
    return 0


def make(argv: list[str], out) -> int:
    opts = {"--fw-version": None, "--psid": CONNECTX5.psid, "--release-date": CONNECTX5.fw_release_date,
            "--payload": None}
    target = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--make-image" and i + 1 < len(argv):
            target = argv[i + 1]
        elif a in opts and i + 1 < len(argv):
            opts[a] = argv[i + 1]
        else:
            raise ToolError(f"Unexpected argument {a!r} for --make-image", 2)
        i += 2
    if target is None or opts["--fw-version"] is None:
        raise ToolError("--make-image OUT needs --fw-version X.Y.Z", 2)
    payload = b""
    if opts["--payload"] is not None:
        try:
            with open(opts["--payload"], "rb") as f:
                payload = f.read()
        except OSError as e:
            raise ToolError(f"Cannot open {opts['--payload']}: {e.strerror}") from None
    try:
        data = make_image(Image(opts["--fw-version"], CONNECTX5.device_id, opts["--psid"],
                                opts["--release-date"], payload))
    except ValueError as e:
        raise ToolError(str(e), 2) from None
    with open(target, "wb") as f:
        f.write(data)
    out.write(f"-I- Wrote {target}: FW {opts['--fw-version']}, PSID {opts['--psid']}, {len(data)} bytes\n")
    return 0


def main(argv: list[str], prog: str = "flint") -> int:
    return run_tool(lambda: _main(argv, sys.stdout))


def _main(argv: list[str], out) -> int:
    if "--make-image" in argv:
        return make(argv, out)
    opts, cmds = parse_flags(argv, {"-d": "dev", "--device": "dev", "-i": "image", "--image": "image"},
                             {"-y": "yes", "--yes": "yes", "--allow_psid_change": "allow_psid",
                              "-allow_psid_change": "allow_psid"})
    if opts.get("help"):
        out.write(USAGE)
        return 0
    dev, image = opts.get("dev"), opts.get("image")
    yes, allow_psid = opts.get("yes", False), opts.get("allow_psid", False)
    if not cmds:
        raise ToolError("No command given. See help for details.", 1)
    cmd = {"q": "query", "b": "burn"}.get(cmds[0], cmds[0])
    if cmd not in ("query", "burn"):
        raise ToolError(f"Invalid command \"{cmds[0]}\".", 1)
    if cmd == "burn":
        if dev is None or image is None:
            raise ToolError("burn needs both -d <device> and -i <image>", 1)
        return burn(dev, image, yes, allow_psid, out)
    if dev is None and image is None:
        raise ToolError("Missing device or image file. Use -d or -i.", 1)
    if dev is None:
        query_image(read_image(image)[1], out)
        return 0
    fn, shown = find(dev)
    query_device(fn, out)
    return 0
