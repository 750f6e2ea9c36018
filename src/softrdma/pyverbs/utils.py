"""pyverbs.utils: rdma-core's pyverbs/utils.py helpers -- values to the
strings pyverbs prints (QP types and states, MTUs, access flags, migration
states, rereg errors) and GID strings."""

from __future__ import annotations

import struct

from ..enums import (IBV_REREG_MR_ERR_CMD, IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW, IBV_REREG_MR_ERR_DO_FORK_OLD,
                     IBV_REREG_MR_ERR_DONT_FORK_NEW, IBV_REREG_MR_ERR_INPUT)
from ..verbs.errors import PyverbsUserError


def be64toh(num: int) -> int:
    """The 64-bit big-endian ``num`` in host order (pyverbs' be64toh lambda)."""
    return struct.unpack("Q", struct.pack("!Q", num))[0]


def gid_str(subnet_prefix: int, interface_id: int) -> str:
    """ibv_gid's two big-endian halves as eight 4-digit groups."""
    h = "%016x%016x" % (be64toh(subnet_prefix), be64toh(interface_id))
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


def gid_str_to_array(val: str) -> list[str]:
    """'xxxx:...:xxxx' (8 groups) as 16 two-digit hex strings, one per byte."""
    groups = val.split(":")
    if len(groups) != 8 or any(len(g) != 4 for g in groups):
        raise PyverbsUserError(f"Invalid GID value ({groups})")
    int("".join(groups), 16)                # as pyverbs: a non-hex digit is a ValueError
    return [half for g in groups for half in (g[0:2], g[2:4])]


_QP_TYPES = {2: "RC", 3: "UC", 4: "UD", 8: "Raw Packet", 9: "XRCD_SEND", 10: "XRCD_RECV", 0xff: "Driver QP"}
_QP_STATES = {0: "Reset", 1: "Init", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "Error", 7: "Unknown"}
_MTUS = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
_ACCESS = {1: "Local write", 2: "Remote write", 4: "Remote read", 8: "Remote atomic", 16: "MW bind",
           32: "Zero based", 64: "On demand"}
_MIG_STATES = {0: "Migrated", 1: "Re-arm", 2: "Armed"}


def qp_type_to_str(qp_type: int) -> str:
    return _QP_TYPES.get(qp_type, f"Unknown ({qp_type})")


def qp_state_to_str(qp_state: int) -> str:
    return _QP_STATES.get(qp_state, f"Unknown ({qp_state})")


def mtu_to_str(mtu: int) -> int:
    """An ibv_mtu value in bytes (0 for an unknown one)."""
    return _MTUS.get(mtu, 0)


def access_flags_to_str(flags: int) -> str:
    """The set IBV_ACCESS_* flags' names, each followed by a space."""
    return "".join(name + " " for bit, name in _ACCESS.items() if flags & bit)


def mig_state_to_str(mig: int) -> str:
    return _MIG_STATES.get(mig, f"Unknown ({mig})")


def rereg_error_to_str(error: int) -> str:
    names = {IBV_REREG_MR_ERR_INPUT: "IBV_REREG_MR_ERR_INPUT",
             IBV_REREG_MR_ERR_DONT_FORK_NEW: "IBV_REREG_MR_ERR_DONT_FORK_NEW",
             IBV_REREG_MR_ERR_DO_FORK_OLD: "IBV_REREG_MR_ERR_DO_FORK_OLD",
             IBV_REREG_MR_ERR_CMD: "IBV_REREG_MR_ERR_CMD",
             IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW"}
    return names.get(error, f"Unknown error ({error})")
