"""The CA that libibumad sees under umad2sim: one device ``ibsim0`` with
the one port the ibsim client is attached to, built from the server's
answers to CONNECT, GET_VENDOR, GET_NODEINFO, GET_PORTINFO and GET_PKEYS
(what umad2sim.c's ``sim_client_init()`` asks and ``dev_sysfs_create()``
writes into its fake ``./sys-<pid>/`` tree), then read back the way
libibumad's ``get_ca()``/``get_port()`` read sysfs.

The sysfs text umad2sim writes, and how it is read back:

* ``node_type``  "%x: CA|SWITCH|ROUTER|<unknown>"  -> strtoul: the NodeType;
* ``fw_ver``     "%llx" of sim_vendor.fw_ver (ibsim: always 1); ``hw_rev``
  "%x" of NodeInfo.Revision; ``hca_type`` "simulator";
* ``ports/<LocalPortNum>/``: one port only (a switch: port 0), so
  ``numports`` is LocalPortNum; state/phys_state "%d: <name>", lid and
  sm_lid "0x%x", lid_mask_count "%d", cap_mask "0x%08x";
* ``rate``: with CapMask bit 14 (extended speeds) and a non-zero
  LinkSpeedExtActive: "<14|26 * width> Gb/sec (<w>X FDR|EDR|HDR)", else
  "<width*speed*2.5> Gb/sec (<w>X[ DDR| QDR])" with width 1/4/8/12 from
  LinkWidthActive (anything else 0); strtoul keeps the integer part;
* ``gids/0``: GidPrefix and NodeInfo.NodeGUID + LocalPortNum (not the
  PortGUID): that is the "Port GUID" ibstat prints;
* no ``link_layer`` file: libibumad assumes "IB".

``sim_ca()`` returns the CA in the form softrdma.tools.ibstat prints.
"""

from __future__ import annotations

import os

from ...mgmt.umad import IbsimPort
from ...wire import ibsim, smp
from ..libc import strtoul

CA_NAME = "ibsim0"
CA_TYPE = "simulator"
IB_PORT_EXT_SPEED_SUPPORTED = 1 << 14


def env_selects_ibsim(env=None) -> bool:
    """umad2sim's environment: an ibsim socket name or a remote ibsim server."""
    env = os.environ if env is None else env
    return bool(env.get("IBSIM_SOCKNAME") or env.get("IBSIM_SERVER_NAME"))


def rate_text(pi: dict) -> str:
    """umad2sim's ``ports/N/rate`` file."""
    speed = pi["LinkSpeedExtActive"] if pi["CapMask"] & IB_PORT_EXT_SPEED_SUPPORTED else 0
    width = {1: 1, 2: 4, 4: 8, 8: 12}.get(pi["LinkWidthActive"], 0)
    if not speed:
        speed = pi["LinkSpeedActive"]
        name = {2: " DDR", 4: " QDR"}.get(speed, "")
        r = width * speed * 25
        return f"{r // 10}{'.5' if r % 10 else ''} Gb/sec ({width}X{name})"
    name = {1: " FDR", 2: " EDR", 4: " HDR"}.get(speed, "")
    return f"{14 * width if speed == 1 else 26 * width} Gb/sec ({width}X{name})"


def ca_from(vendor, ni: dict, pi: dict) -> dict:
    """The CA dict (softrdma.tools.ibstat's form) from the raw answers."""
    _vid, _part, hw_ver, fw_ver = vendor
    num = pi["LocalPort"]
    rate = rate_text(pi)
    port = {
        "portnum": num, "state": pi["LinkState"], "phys_state": pi["PhysLinkState"],
        "rate": strtoul(rate) & 0xFFFFFFFF,
        "fdr10": False,                     # umad2sim never writes "FDR10"
        "base_lid": pi["Lid"], "lmc": pi["LMC"], "sm_lid": pi["SMLid"],
        "capmask": pi["CapMask"] & 0xFFFFFFFF,
        "port_guid": (ni["Guid"] + num) & 0xFFFFFFFFFFFFFFFF,
        "link_layer": "IB",
    }
    return {"ca_name": CA_NAME, "node_type": ni["NodeType"], "ca_type": CA_TYPE,
            "fw_ver": f"{fw_ver:x}", "hw_ver": f"{hw_ver:x}", "node_guid": ni["Guid"],
            "system_guid": ni["SystemGuid"], "ports": {num: port}, "numports": num}


def sim_ca() -> dict:
    """Attach to the ibsim server (IBSIM_SOCKNAME, SIM_HOST) as umad2sim does,
    ask what it asks, detach.  Raises softrdma.mgmt.umad.TransportError."""
    port = IbsimPort(issm=False)
    try:
        vendor = ibsim.parse_vendor(port.control(ibsim.SimCtlType.GET_VENDOR, bytes(24)).data)
        ni = smp.NODE_INFO.decode(port.control(ibsim.SimCtlType.GET_NODEINFO, bytes(64)).data)
        pi = smp.PORT_INFO.decode(port.control(ibsim.SimCtlType.GET_PORTINFO, bytes(64)).data)
        port.control(ibsim.SimCtlType.GET_PKEYS, bytes(64))
    finally:
        port.close()
    return ca_from(vendor, ni, pi)
