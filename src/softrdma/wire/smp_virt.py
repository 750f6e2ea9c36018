"""The virtualization SMP attributes: an HCA port's virtual ports (vports),
one per SR-IOV VF, each with a GUID, a state and (when the SM gives it one)
a LID of its own -- what NVIDIA's opensm manages with ``virt_enabled 2``.

Attribute IDs are the vendor range's (NVIDIA opensm's ib_types.h):
VirtualizationInfo 0xFFB0, VPortInfo 0xFFB1, VPortState 0xFFB3.

* ``VIRTUALIZATION_INFO`` (modifier 0: the port the SMP came in by), as
  ibdiagnet's packet layouts lay it out: VPortCap (the highest vport
  index the port has), VPortIndexTop (the highest enabled one), then the
  VirtualizationEnable, VClientReregister and VPortStateChange bits, the
  VirtualizationRevision and a CapabilityMask.
* VPortState (modifier: block of 128 vports): one 4-bit PortState per
  vport, the first in the high nibble of byte 0 (``decode_vport_states``,
  ``encode_vport_states``).
* ``VPORT_INFO`` (modifier: the vport index): the vport's GUID, its LID,
  LIDRequired (the vport wants a LID of its own), LIDByVPortIndex, the
  ClientReregister bit and the vport's state.  Its byte layout is
  softrdma's own (the attribute's published definition is NVIDIA's
  vendor specification): the field names are the ones ibdiagnet's vport
  records use.

A port that has vports sets IsVirtualizationSupported (0x0004) in
PortInfo:CapabilityMask2.  Pure codecs; untrusted bytes raise ``WireError``.
"""

from __future__ import annotations

from .errors import WireError
from .smp import Layout

VIRTUALIZATION_INFO_ATTR = 0xFFB0
VPORT_INFO_ATTR = 0xFFB1
VPORT_STATE_ATTR = 0xFFB3
CAP2_IS_VIRT_SUPPORTED = 0x0004
VPORTS_PER_STATE_BLOCK = 128

VIRTUALIZATION_INFO = Layout("VirtualizationInfo", 64, [("VPortCap", 0, 16), ("VPortIndexTop", 16, 16),
                             ("VirtualizationEnable", 32, 1), ("VClientReregister", 33, 1), ("VPortStateChange", 34, 1),
                             ("VirtualizationRevision", 48, 8), ("CapabilityMask", 56, 8)])
VPORT_INFO = Layout("VPortInfo", 64, [("PortGuid", 64, 64), ("Lid", 128, 16), ("LidByVPortIndex", 144, 16),
                                      ("LidRequired", 160, 1), ("ClientReregister", 161, 1), ("VPortState", 164, 4)])


def decode_vport_states(data) -> list[int]:
    """A VPortState block: the 128 states, vport (block * 128) first."""
    if len(data) < 64:
        raise WireError("truncated", f"VPortState needs 64 bytes, has {len(data)}")
    out = []
    for b in bytes(data[:64]):
        out += [b >> 4, b & 0xF]
    return out


def encode_vport_states(states) -> bytes:
    s = list(states)[:VPORTS_PER_STATE_BLOCK]
    s += [0] * (VPORTS_PER_STATE_BLOCK - len(s))
    if any(not 0 <= x <= 0xF for x in s):
        raise WireError("bad_field", "a VPortState is 4 bits")
    return bytes((s[i] << 4) | s[i + 1] for i in range(0, VPORTS_PER_STATE_BLOCK, 2))


__all__ = ["CAP2_IS_VIRT_SUPPORTED", "VIRTUALIZATION_INFO", "VIRTUALIZATION_INFO_ATTR", "VPORT_INFO",
           "VPORT_INFO_ATTR", "VPORT_STATE_ATTR", "VPORTS_PER_STATE_BLOCK", "decode_vport_states",
           "encode_vport_states"]
