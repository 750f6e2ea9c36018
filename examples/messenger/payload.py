"""The demo's message contents: message number ``i`` of ``size`` bytes is
the same on both sides, so a subscriber checks every byte it receives."""

from __future__ import annotations

import random

_BASES: dict[int, bytes] = {}


def make(i: int, size: int) -> bytes:
    """Message ``i``: its number (8 bytes, little endian), then a pattern that depends on ``i``."""
    base = _BASES.get(size)
    if base is None:
        base = _BASES[size] = random.Random(size).randbytes(size + 256)
    if size < 8:
        raise ValueError("messages are at least 8 bytes")
    off = i % 256
    return i.to_bytes(8, "little") + base[off:off + size - 8]


def number(msg: bytes) -> int:
    return int.from_bytes(msg[:8], "little")
