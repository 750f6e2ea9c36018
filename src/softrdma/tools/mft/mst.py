"""``softrdma mst start|stop|status [-v]|restart``: MFT's ``mst``.

``start`` makes the MST devices of the daemon's ConnectX-like PFs
(``/dev/mst/mt4119_pciconf0``, ...: ``common``); ``stop`` removes them;
``status`` lists them with their PCI address, ``-v`` as a table with the
RDMA device, netdev and NUMA node.  Output: docs/formats/mst.md.
"""

from __future__ import annotations

import os
import shutil
import sys

from ...verbs.errors import PyverbsError
from .common import functions, mst_dir, mst_names, mst_started

USAGE = """Usage:
    mst {start|stop|status|restart}

    start [--with_fpga] [--with_fpga_fw_access] [--with_unknown]   - Create special files that represent Mellanox devices in directory /dev/mst.
    stop            - Stop Mellanox MST driver service, remove all special files/directories and unload kernel modules.
    restart         - Just like mst stop + mst start
    status          - Print current status of Mellanox devices
                      Options:
                      -v run with high verbosity level (print more info on each device)
"""

MODULES_LOADED = "MST modules:\n------------\n    MST PCI module is not loaded\n    MST PCI configuration module loaded\n"
MODULES_NOT_LOADED = ("MST modules:\n------------\n    MST PCI module is not loaded\n"
                      "    MST PCI configuration module is not loaded\n")


def start(out) -> int:
    out.write("Starting MST (Mellanox Software Tools) driver set\n")
    out.write("Loading MST PCI module - Success\n")
    out.write("Loading MST PCI configuration module - Success\n")
    out.write("Create devices\n")
    names = mst_names(functions())
    d = mst_dir()
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    for name, fn in names.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(fn["bdf"] + "\n")
    out.write("Unloading MST PCI module (unused) - Success\n")
    return 0


def stop(out) -> int:
    out.write("Stopping MST (Mellanox Software Tools) driver set\n")
    if os.path.isdir(mst_dir()):
        shutil.rmtree(mst_dir())
    out.write("Unloading MST PCI module - Success\n")
    out.write("Unloading MST PCI configuration module - Success\n")
    return 0


def status(verbose: bool, out) -> int:
    if not mst_started():
        out.write(MODULES_NOT_LOADED + "\n")
        out.write("MST devices:\n------------\n")
        out.write("No MST devices were found nor MST modules were loaded.\n")
        out.write("You may need to run 'mst start' to load MST modules.\n")
        return 1
    funcs = functions()
    started = {}
    for name in sorted(os.listdir(mst_dir())):
        with open(os.path.join(mst_dir(), name)) as f:
            started[name] = f.read().strip()
    by_bdf = {fn["bdf"]: fn for fn in funcs}
    out.write(MODULES_LOADED)
    if verbose:
        out.write("PCI devices:\n------------\n")
        out.write(f"{'DEVICE_TYPE':<24}{'MST':<30}{'PCI':<10}{'RDMA':<16}{'NET':<26}{'NUMA':<6}\n")
        mst_of = {bdf: name for name, bdf in started.items()}
        for fn in funcs:
            kind = f"{fn['model']}{'VF' if fn['vf'] is not None else ''}(rev:0)"
            mst = f"/dev/mst/{mst_of[fn['bdf']]}" if fn["bdf"] in mst_of else "NA"
            net = f"net-{fn['netdev']}" if fn["netdev"] else ""
            out.write(f"{kind:<24}{mst:<30}{fn['short']:<10}{fn['name']:<16}{net:<26}{'-1':<6}\n")
        out.write("\n")
        return 0
    out.write("\nMST devices:\n------------\n")
    for name, bdf in started.items():
        if bdf not in by_bdf:
            continue
        out.write(f"{'/dev/mst/' + name:<33}- PCI configuration cycles access.\n")
        out.write(f"{'':<35}domain:bus:dev.fn={bdf} addr.reg=88 data.reg=92 cr_bar.gw_offset=-1\n")
        out.write(f"{'':<35}Chip revision is: 00\n")
    out.write("\n")
    return 0


def main(argv: list[str], prog: str = "mst") -> int:
    out = sys.stdout
    if not argv or argv[0] not in ("start", "stop", "restart", "status"):
        sys.stderr.write(USAGE)
        return 1
    cmd, rest = argv[0], argv[1:]
    allowed = {"status": {"-v", "-vv"}, "start": {"--with_fpga", "--with_fpga_fw_access", "--with_unknown"}}
    bad = [a for a in rest if a not in allowed.get(cmd, set())]
    if bad:
        sys.stderr.write(f"-E- Unknown option {bad[0]} for mst {cmd}\n{USAGE}")
        return 1
    try:
        if cmd == "start":
            return start(out)
        if cmd == "stop":
            return stop(out)
        if cmd == "restart":
            stop(out)
            return start(out)
        return status(bool(rest), out)
    except PyverbsError as e:
        sys.stderr.write(f"-E- {e}\n")
        return 1
