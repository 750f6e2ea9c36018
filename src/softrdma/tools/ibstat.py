"""``ibstat [options] [<ca_name> [portnum]]``: infiniband-diags 44's
``ibstat.c`` for softrdma's devices (docs/formats/ibstat.md).

The real ibstat reads ``/sys/class/infiniband/<ca>/...`` through libibumad
(node_type, fw_ver, hw_rev, hca_type, node_guid, sys_image_guid, and per
port state, phys_state, rate, lid, lid_mask_count, sm_lid, cap_mask,
link_layer and gids/0).  This one asks softrdmad instead: the ``links``
management command carries the same facts (node/sys image GUIDs, the GID
table, the port attributes), and each value is turned into what the
kernel's sysfs file would hold and then read back the way libibumad reads
it -- the rate through the kernel's ``rate_show`` text and ``strtoul`` (so
1X SDR prints ``Rate: 2.5``), the Port GUID as the low 64 bits of GID 0.
What rxe's sysfs tree holds that ``links`` does not carry is in the ``RXE``
table below.

Options are those of ``ibdiag_process_opts()`` with ibstat's exclusions
(``-l -s -p -z -v -d -h -V``, glibc getopt_long); ``-h`` and bad options
print the usage on stderr and exit 2, ``-V`` prints the build version on
stderr and exits 0, IBPANIC exits 255.  When no daemon runs there are no
devices: ``ibstat``, ``-l`` and ``-p`` print nothing and exit 0, as the
real tool does without ``/sys/class/infiniband``.

With ``IBSIM_SOCKNAME`` (or ``IBSIM_SERVER_NAME``) set -- the environment
of the real tools under umad2sim -- ibstat shows the IB port of a
simulated fabric instead: the one CA ``ibsim0`` that umad2sim's fake
sysfs holds for the node ``SIM_HOST`` names (default: the server's
first node), from the ibsim server's control answers
(softrdma.tools.ibdiag.simca).
"""

from __future__ import annotations

import errno
import os
import sys

from ..device.sysfs import rate_str
from ..verbs import device as verbs_device
from ..verbs.errors import PyverbsError
from .ibv_devinfo import errno_of
from ..mgmt.umad import TransportError
from .ibdiag import simca
from .libc import GetoptLong, c_int, strtol

#: rxe's sysfs files that the daemon's ``links`` reply does not carry
#: (docs/formats/ibstat.md, "Which sysfs files are read"), and the version
#: of infiniband-diags whose behaviour this is.
RXE = {
    "node_type": 1,          # node_type "1: CA"
    "ca_type": "",           # no hca_type file  -> "CA type: "
    "fw_ver": "",            # fw_ver is an empty line -> "Firmware version: "
    "hw_ver": "",            # no hw_rev file  -> "Hardware version: "
}
IBDIAG_VERSION = "44.0"

# ibstat.c's tables
NODE_TYPE = ["???", "CA", "Switch", "Router", "iWARP RNIC"]
PORT_STATE = ["???", "Down", "Initializing", "Armed", "Active"]
PHYS_STATE = ["No state change", "Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp",
              "LinkErrorRecovery", "PhyTest"]
# the kernel's enum ib_port_speed / ib_port_width, as rate_show() and
# link_layer_show() use them
IB_SPEED = {1: "SDR", 2: "DDR", 4: "QDR", 8: "FDR10", 16: "FDR", 32: "EDR", 64: "HDR", 128: "NDR"}
IB_WIDTH = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}
LINK_LAYER = {1: "InfiniBand", 2: "Ethernet"}

LONG_OPTIONS = [("list_of_cas", 0, "l"), ("short", 0, "s"), ("port_list", 0, "p"), ("config", 1, "z"),
                ("verbose", 0, "v"), ("debug", 0, "d"), ("help", 0, "h"), ("version", 0, "V")]

USAGE = """
Usage: {0} [options] <ca_name> [portnum]

Options:
  --list_of_cas, -l       list all IB devices
  --short, -s             short output
  --port_list, -p         show port list
  --config, -z <config>   use config file, default: /etc/infiniband-diags/ibdiag.conf
  --verbose, -v           increase verbosity level
  --debug, -d             raise debug level
  --help, -h              help message
  --version, -V           show version

Examples:
  {0} -l       # list all IB devices
  {0} mthca0 2 # stat port 2 of 'mthca0'

"""


class _Panic(Exception):
    """IBPANIC: ``ibpanic: [pid] func: msg: strerror(errno)``, exit 255."""

    def __init__(self, func: str, msg: str, err: int):
        super().__init__(f"ibpanic: [{os.getpid()}] {func}: {msg}: {os.strerror(err) if err else 'Success'}")


def _ibwarn(func: str, msg: str) -> None:
    sys.stderr.write(f"ibwarn: [{os.getpid()}] {func}: {msg}\n")


def _node_type_str(t: int) -> str:
    return NODE_TYPE[t] if 0 <= t < len(NODE_TYPE) else "???"


def _guid(text: str | None) -> int:
    return int(text.replace(":", ""), 16) if text else 0


def _rate(pa: dict) -> tuple[int, bool]:
    """(strtoul of the sysfs rate text, is_fdr10()); (0, False) when the
    kernel's rate_show() would fail (unknown width)."""
    width = IB_WIDTH.get(pa.get("active_width"))
    if width is None:
        return 0, False
    text = rate_str(IB_SPEED.get(pa.get("active_speed"), "SDR"), width)
    paren = text.find(")")
    return strtol(text), paren >= 5 and text[paren - 5:paren].lower() == "fdr10"


def _port(link: dict) -> dict:
    """umad_get_port()'s view of one port, from one ``links`` entry."""
    pa = link["port_attr"]
    gids = link.get("gids") or []
    gid0 = bytes.fromhex(gids[0]) if gids else bytes(16)
    rate, fdr10 = _rate(pa)
    return {"portnum": link["port"], "state": pa["state"], "phys_state": pa["phys_state"], "rate": rate,
            "fdr10": fdr10, "base_lid": pa["lid"], "lmc": pa["lmc"], "sm_lid": pa["sm_lid"],
            "capmask": pa["port_cap_flags"] & 0xFFFFFFFF, "port_guid": int.from_bytes(gid0[8:], "big"),
            "link_layer": LINK_LAYER.get(pa["link_layer"], "Unknown")}


def ca_list() -> list[dict]:
    """umad_get_ca_device_list() + umad_get_ca(): the CAs sorted by name
    (v44 sorts), each with its ports by number.  No daemon: []."""
    try:
        conn = verbs_device.management()
    except (PyverbsError, OSError):
        return []
    try:
        reply, _ = conn.call("links")
    except (PyverbsError, OSError) as e:
        raise _Panic("main", "can't list IB device names", errno_of(e)) from None
    finally:
        conn.close()
    cas: dict[str, dict] = {}
    for link in reply.get("links", []):
        ca = cas.get(link["ifname"])
        if ca is None:
            ca = cas[link["ifname"]] = {**RXE, "ca_name": link["ifname"], "node_guid": _guid(link["node_guid"]),
                                        "system_guid": _guid(link.get("sys_image_guid")), "ports": {}}
        for port in link.get("ports") or [link]:          # an IB device's ports, each its own entry
            ca["ports"][port["port"]] = _port(port)
    for ca in cas.values():
        ca["numports"] = max(ca["ports"], default=0)
    return [cas[n] for n in sorted(cas)]


def ca_dump(ca: dict, w) -> None:
    if not ca["node_type"]:
        return
    nt = _node_type_str(ca["node_type"])
    w(f"{nt} '{ca['ca_name']}'\n")
    w(f"\t{nt} type: {ca['ca_type']}\n")
    w(f"\tNumber of ports: {ca['numports']}\n")
    w(f"\tFirmware version: {ca['fw_ver']}\n")
    w(f"\tHardware version: {ca['hw_ver']}\n")
    w(f"\tNode GUID: 0x{ca['node_guid']:016x}\n")
    w(f"\tSystem image GUID: 0x{ca['system_guid']:016x}\n")


def port_dump(port: dict, alone: bool, w) -> None:
    pre, hdrpre = ("", "") if alone else ("\t\t", "\t")
    w(f"{hdrpre}Port {port['portnum']}:\n")
    st, ph = port["state"], port["phys_state"]
    w(f"{pre}State: {PORT_STATE[st] if 0 <= st <= 4 else '???'}\n")
    w(f"{pre}Physical state: {PHYS_STATE[ph] if 0 <= ph <= 7 else '???'}\n")
    if port["fdr10"]:
        w(f"{pre}Rate: {c_int(port['rate'])} (FDR10)\n")
    elif port["rate"] != 2:
        w(f"{pre}Rate: {c_int(port['rate'])}\n")
    else:
        w(f"{pre}Rate: 2.5\n")
    w(f"{pre}Base lid: {port['base_lid']}\n")
    w(f"{pre}LMC: {port['lmc']}\n")
    w(f"{pre}SM lid: {port['sm_lid']}\n")
    w(f"{pre}Capability mask: 0x{port['capmask']:08x}\n")
    w(f"{pre}Port GUID: 0x{port['port_guid']:016x}\n")
    w(f"{pre}Link layer: {port['link_layer']}\n")


def ca_stat(ca: dict, portnum: int, no_ports: bool, w) -> int:
    if not ca["node_type"]:
        return 0
    nt = _node_type_str(ca["node_type"])
    if not no_ports and portnum >= 0:
        if portnum > ca["numports"] or portnum not in ca["ports"]:
            _ibwarn("ca_stat", f"{nt}: '{ca['ca_name']}' has no port number {portnum} - max ({ca['numports']})")
            return -1
        w(f"{nt}: '{ca['ca_name']}'\n")
        port_dump(ca["ports"][portnum], True, w)
        return 0
    ca_dump(ca, w)
    if no_ports:
        return 0
    for n in range(0, ca["numports"] + 1):
        if n in ca["ports"]:
            port_dump(ca["ports"][n], False, w)
    return 0


def _sim_cas() -> list[dict]:
    """The IB port of an ibsim fabric, as the real ibstat sees it under
    umad2sim (IBSIM_SOCKNAME/IBSIM_SERVER_NAME set; SIM_HOST picks the node)."""
    try:
        return [simca.sim_ca()]
    except TransportError as e:
        if str(e).startswith("ibsim refused"):      # CONNECT answered with ERROR: unknown SIM_HOST
            _ibwarn("sim_ctl", "ctl error")
            raise _Panic("sim_init", "connect failed", 0) from None
        base = os.environ.get("IBSIM_SOCKNAME") or "sim"
        where = os.environ.get("IBSIM_SERVER_NAME") or f"{base}:ctl"
        raise _Panic("sim_attach", f"can't connect to sim socket {where}", errno.ECONNREFUSED) from None


def main(argv: list[str], prog: str = "ibstat") -> int:
    w = sys.stdout.write
    list_only = short_format = list_ports = False
    opts = GetoptLong(argv, prog, "lspz:vdhV", LONG_OPTIONS)
    for c, _optarg in opts:
        if c == "l":
            list_only = True
        elif c == "s":
            short_format = True
        elif c == "p":
            list_ports = True
        elif c == "V":
            sys.stderr.write(f"{prog} BUILD VERSION: {IBDIAG_VERSION}\n")
            return 0
        elif c in ("z", "v", "d"):
            pass        # config file (CA/Port/timeout/keys), library verbosity/debug: no effect on the output
        else:           # -h, an invalid option, a missing argument
            sys.stderr.write(USAGE.format(prog))
            return 2
    args = opts.operands
    dev_port = c_int(strtol(args[1])) if len(args) > 1 else -1
    try:
        cas = _sim_cas() if simca.env_selects_ibsim() else ca_list()
        if args:
            cas = [ca for ca in cas if ca["ca_name"] == args[0]]
            if not cas:
                raise _Panic("main", f"'{args[0]}' IB device can't be found", 0)
        if list_ports:
            for ca in cas:
                for n in range(0, ca["numports"] + 1):
                    port = ca["ports"].get(n)
                    if port and port["port_guid"]:
                        w(f"0x{port['port_guid']:016x}\n")
            return 0
        for ca in cas:
            if list_only:
                w(f"{ca['ca_name']}\n")
            elif ca_stat(ca, dev_port, short_format, w) < 0:
                raise _Panic("main", f"stat of IB device '{ca['ca_name']}' failed", errno.ENOENT)
    except _Panic as p:
        sys.stdout.flush()
        sys.stderr.write(f"{p}\n")
        return 255
    finally:
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog=os.path.basename(sys.argv[0])))
