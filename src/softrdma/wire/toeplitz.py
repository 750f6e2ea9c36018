"""The Toeplitz hash of receive-side scaling (Microsoft's RSS specification,
"Verifying the RSS Hash Calculation"), and the hash input a device builds
from a frame's headers for ibv_rx_hash_conf's ``rx_hash_fields_mask``.

``toeplitz(key, data)``: for every set bit of ``data`` (most significant
first), XOR in the 32 bits of ``key`` that start at that bit's position.
``rss_input(fields, mask)`` lays the selected fields out in the spec's
order: source address, destination address, source port, destination
port -- IPv4 fields only for an IPv4 frame, IPv6 fields only for IPv6,
TCP ports only for TCP, UDP ports only for UDP; a frame with none of the
selected fields hashes to 0 (mlx5's behaviour: it lands on entry 0).
Pure: no I/O."""

from __future__ import annotations

from ..enums import (IBV_RX_HASH_DST_IPV4, IBV_RX_HASH_DST_IPV6, IBV_RX_HASH_DST_PORT_TCP,
                     IBV_RX_HASH_DST_PORT_UDP, IBV_RX_HASH_SRC_IPV4, IBV_RX_HASH_SRC_IPV6,
                     IBV_RX_HASH_SRC_PORT_TCP, IBV_RX_HASH_SRC_PORT_UDP)

#: the rx_hash_fields_mask bits this device hashes on (rss_caps.rx_hash_fields_mask)
RX_HASH_FIELDS = int(IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6
                     | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP | IBV_RX_HASH_SRC_PORT_UDP
                     | IBV_RX_HASH_DST_PORT_UDP)
_IP6 = 6
_TCP, _UDP = 6, 17


def toeplitz(key: bytes, data: bytes) -> int:
    """The 32-bit Toeplitz hash of ``data`` under ``key`` (which must be at
    least 4 bytes longer than ``data``: 40 bytes cover the 36 of IPv6+ports)."""
    if len(key) < len(data) + 4:
        raise ValueError(f"a {len(key)}-byte key cannot hash {len(data)} bytes")
    k = int.from_bytes(key, "big")
    kbits = 8 * len(key)
    result = 0
    for i, byte in enumerate(data):
        if not byte:
            continue
        for b in range(8):
            if byte & (0x80 >> b):
                pos = 8 * i + b
                result ^= (k >> (kbits - 32 - pos)) & 0xFFFFFFFF
    return result


def rss_input(fields, mask: int) -> bytes:
    """The bytes hashed for a parsed frame (``wire.flow.FrameFields``) and
    a fields mask, in the RSS specification's order."""
    out = b""
    ipv = fields.ip_version
    if ipv == 4:
        if mask & IBV_RX_HASH_SRC_IPV4:
            out += fields.src_ip.to_bytes(4, "big")
        if mask & IBV_RX_HASH_DST_IPV4:
            out += fields.dst_ip.to_bytes(4, "big")
    elif ipv == _IP6:
        if mask & IBV_RX_HASH_SRC_IPV6:
            out += fields.src_ip.to_bytes(16, "big")
        if mask & IBV_RX_HASH_DST_IPV6:
            out += fields.dst_ip.to_bytes(16, "big")
    if ipv and fields.l4_ok:
        if fields.proto == _TCP:
            s, d = IBV_RX_HASH_SRC_PORT_TCP, IBV_RX_HASH_DST_PORT_TCP
        elif fields.proto == _UDP:
            s, d = IBV_RX_HASH_SRC_PORT_UDP, IBV_RX_HASH_DST_PORT_UDP
        else:
            s = d = 0
        if mask & s:
            out += fields.src_port.to_bytes(2, "big")
        if mask & d:
            out += fields.dst_port.to_bytes(2, "big")
    return out


def rss_hash(key: bytes, fields, mask: int) -> int:
    data = rss_input(fields, mask)
    return toeplitz(key, data) if data else 0


__all__ = ["RX_HASH_FIELDS", "toeplitz", "rss_input", "rss_hash"]
