"""pyverbs.device's value-to-string helpers (rdma-core pyverbs/device.pyx:
phys_state_to_str, width_to_str, speed_to_str, translate_mtu, ...), with
pyverbs' exact texts -- rdma-core's tests check that a port's values do not
read "Invalid ..." through them."""

from __future__ import annotations

import struct

_GID_TYPES = {0: "IB", 1: "RoCEv1", 2: "RoCEv2"}     # IBV_GID_TYPE_IB, _ROCE_V1, _ROCE_V2
_TRANSPORTS = {0: "IB", 1: "IWARP", 2: "USNIC", 3: "USNIC UDP"}
_NODE_TYPES = {1: "CA", 2: "Switch", 3: "Router", 4: "RNIC", 5: "USNIC", 6: "USNIC UDP"}
_PORT_STATES = {0: "NOP", 1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "Defer"}
_MTUS = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
_LINK_LAYERS = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}
_PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "Port configuration training", 5: "Link up",
                6: "Link error recovery", 7: "Phy test"}
_WIDTHS = {1: "1X", 2: "4X", 4: "8X", 16: "2X"}
_SPEEDS = {0: "0.0 Gbps", 1: "2.5 Gbps", 2: "5.0 Gbps", 4: "5.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps",
           32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps", 256: "200.0 Gbps"}


def translate_gid_type(gid_type: int) -> str:
    return _GID_TYPES.get(gid_type, f"Unknown gid_type ({gid_type})")


def guid_format(num: int) -> str:
    """A big-endian 64-bit GUID held as a host int, as xxxx:xxxx:xxxx:xxxx."""
    h = "%016x" % struct.unpack("Q", struct.pack("!Q", num))[0]
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def guid_to_hex(node_guid: int) -> str:
    return hex(node_guid).replace("L", "").replace("0x", "")


def translate_transport_type(transport_type: int) -> str:
    return _TRANSPORTS.get(transport_type, "Unknown")


def translate_node_type(node_type: int) -> str:
    return _NODE_TYPES.get(node_type, "Unknown")


def port_state_to_str(port_state: int) -> str:
    s = _PORT_STATES.get(port_state)
    return f"{s} ({port_state})" if s is not None else f"Invalid state ({port_state})"


def translate_mtu(mtu: int) -> str:
    s = _MTUS.get(mtu)
    return f"{s} ({mtu})" if s is not None else f"Invalid MTU ({mtu})"


def translate_link_layer(ll: int) -> str:
    return _LINK_LAYERS.get(ll, f"Invalid link layer ({ll})")


def phys_state_to_str(phys: int) -> str:
    s = _PHYS_STATES.get(phys)
    return f"{s} ({phys})" if s is not None else "Invalid physical state"


def width_to_str(width: int) -> str:
    s = _WIDTHS.get(width)
    return f"{s} ({width})" if s is not None else "Invalid width"


def speed_to_str(speed: int, active_speed_ex: int = 0) -> str:
    """pyverbs' speed_to_str; rdma-core 64 passes active_speed_ex too, which
    wins when set (speeds past 8 bits)."""
    speed = active_speed_ex or speed
    s = _SPEEDS.get(speed)
    return f"{s} ({speed})" if s is not None else "Invalid speed"
