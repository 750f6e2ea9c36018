"""VPI: a ConnectX-like PF's port is InfiniBand or Ethernet as its NV
configuration's ``LINK_TYPE_P<n>`` says (IB(1), ETH(2)), applied when the
firmware boots -- ``mlxfwreset`` or the daemon starting.

The same device (name, bus address, firmware, PSID) is then built again
as the other kind: an ``IbDevice`` on a CA port of a fabric, or a RoCE
``Device`` on a netdev.  Where each goes is the port's *cable* of that
kind, kept in the NV store (``NvStore.cables``): recorded every time the
port is up on one (a RoCE device on its netdev, an IB device on its
fabric's CA), and set beforehand with ``softrdma mlxconfig -d DEV cable
P1 ib fabric BASE node CA`` / ``cable P1 eth NETDEV`` for a port that has
never been up as that kind.  The node and port GUIDs are the link's: an
IB port's are its CA's in the fabric's topology, a RoCE port's the EUI-64
of its netdev's MAC (flint's base GUID stays the firmware's).

An IB port whose fabric is not serving when the firmware boots comes up
Down/Polling and attaches once the fabric is there, as a cabled port
whose switch is off.
"""

from __future__ import annotations

import errno
import logging
import time

from ..errors import VerbsError
from .ib import LINK_LAYER_IB, IbDevice
from .nvconfig import ETH, IB

log = logging.getLogger("softrdmad")

KINDS = {IB: "ib", ETH: "eth"}


def link_type_param(port: int) -> str:
    return f"LINK_TYPE_P{port}"


def kind_of(dev) -> int:
    """IB(1) or ETH(2): what ``dev``'s port is now."""
    return IB if dev.link_layer == LINK_LAYER_IB else ETH


def cable_of(dev) -> tuple[str, dict]:
    """Where ``dev``'s port 1 is plugged in now: ("ib", {fabric, node,
    ca_port}) or ("eth", {netdev})."""
    if dev.link_layer == LINK_LAYER_IB:
        return "ib", {"fabric": dev.fabric, "node": dev.node_sel, "ca_port": dev.link.port_num}
    return "eth", {"netdev": dev.netdev}


def check_cable(kind: str, where: dict) -> dict:
    """A cable as ``mlxconfig cable`` gives it, checked: EINVAL otherwise."""
    if kind == "ib":
        fabric, node = str(where.get("fabric") or ""), str(where.get("node") or "")
        ca_port = where.get("ca_port", 1)
        if not fabric or "/" in fabric or not node:
            raise VerbsError(errno.EINVAL, "an ib cable needs a fabric and a node")
        if type(ca_port) is not int or not 1 <= ca_port <= 254:
            raise VerbsError(errno.EINVAL, f"ca_port {ca_port!r}: CA ports are 1..254")
        return {"fabric": fabric, "node": node, "ca_port": ca_port}
    if kind == "eth":
        netdev = str(where.get("netdev") or "")
        if not netdev or len(netdev) > 15 or "/" in netdev or any(ch.isspace() for ch in netdev):
            raise VerbsError(errno.EINVAL, f"bad netdev name {netdev!r}")
        return {"netdev": netdev}
    raise VerbsError(errno.EINVAL, f"cable kind {kind!r}: ib or eth")


def build(name: str, want: int, cable: dict | None, udp_port: int):
    """The device ``name`` built as ``want`` on ``cable``.  No cable: EINVAL
    (nothing is changed); a netdev that does not exist: ENODEV."""
    kind = KINDS[want]
    if cable is None:
        how = "ib fabric BASE node CA" if kind == "ib" else "eth NETDEV"
        raise VerbsError(errno.EINVAL, f"{name}: port 1 has no {kind} cable to come up on as"
                                       f" {'IB' if want == IB else 'ETH'}: set it with"
                                       f" mlxconfig -d {name} cable P1 {how}")
    if want == ETH:
        from .commands.link import make_device
        try:
            return make_device(f"{name}:{cable['netdev']}", udp_port)
        except SystemExit as e:
            raise VerbsError(errno.ENODEV, str(e)) from None
    from .commands.link import _await_port_info
    dev = IbDevice(name, cable["fabric"], cable["node"], port_num=cable.get("ca_port", 1))
    if not dev.link.connect() or not _await_port_info(dev):
        why = dev.link.error[1] if dev.link.error else "no answer"
        if dev.link.error and dev.link.error[0] not in (errno.ENOENT, errno.ECONNREFUSED, errno.ETIMEDOUT):
            dev.close()                          # the fabric refused the CA (no such node, port taken)
            raise VerbsError(dev.link.error[0], f"{name}: fabric {cable['fabric']} refused"
                                                f" {cable['node']}: {why}")
        log.warning("%s: fabric %s not serving (%s): the IB port stays down until it is", name,
                    cable["fabric"], why)
        dev.link.close(time.monotonic())        # retried by the daemon's loop
    return dev


__all__ = ["KINDS", "build", "cable_of", "check_cable", "kind_of", "link_type_param"]
