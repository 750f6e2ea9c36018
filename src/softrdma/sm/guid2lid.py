"""opensm's ``guid2lid`` cache file: read it, and write it byte for byte as opensm does.

The file is one ``0x<guid> 0x<minlid> 0x<maxlid>`` record per port, each
followed by an empty line (osm_db_files.c dump_tbl_entry).  opensm keeps the
records in its ``st`` string hash table and writes them in bin order, so the
line order is that of the hash table after the insertions the SM made:
``Guid2Lid`` remembers the insertion order and ``dumps`` replays it through
the same table (Ruby's old st.c: 997-multiplier string hash, prime bin
counts, rehash when entries/bins > 5, new entries at the head of a bin).
"""

from __future__ import annotations

_PRIMES = (11, 19, 37, 67, 131, 283, 521, 1033, 2053, 4099, 8219, 16427, 32771, 65581,
           131101, 262147, 524309, 1048583, 2097169, 4194319, 8388617, 16777259)
_MAX_DENSITY = 5


def _new_size(size: int) -> int:
    newsize = 8
    for p in _PRIMES:
        if newsize > size:
            return p
        newsize <<= 1
    raise ValueError("st table too large")


def _strhash(s: str) -> int:
    val = 0
    for c in s.encode():
        val = (val * 997 + c) & 0xFFFFFFFF
    sval = val - (1 << 32) if val & 0x80000000 else val     # C int, arithmetic >> 5
    return (sval + (sval >> 5)) & 0xFFFFFFFF


def _key(guid: int) -> str:
    return "0x%016x" % guid


class Guid2Lid:
    """guid -> (min_lid, max_lid), in the order opensm inserted them."""

    def __init__(self) -> None:
        self.map: dict[int, tuple[int, int]] = {}

    def get(self, guid: int) -> tuple[int, int] | None:
        return self.map.get(guid)

    def set(self, guid: int, min_lid: int, max_lid: int) -> None:
        self.map[guid] = (min_lid, max_lid)     # an update keeps the entry's place

    def delete(self, guid: int) -> None:
        self.map.pop(guid, None)

    @classmethod
    def loads(cls, text: str) -> "Guid2Lid":
        g = cls()
        for line in text.splitlines():
            f = line.split()
            if len(f) >= 3:
                g.set(int(f[0], 16), int(f[1], 16), int(f[2], 16))
        return g

    def dumps(self) -> str:
        nbins = _new_size(0)
        bins: list[list[str]] = [[] for _ in range(nbins)]
        n = 0
        for guid in self.map:
            key = _key(guid)
            h = _strhash(key)
            if n // nbins > _MAX_DENSITY:
                # rehash walks the old bins head first, pushing each entry at the new head
                new = _new_size(nbins + 1)
                nb: list[list[str]] = [[] for _ in range(new)]
                for chain in bins:
                    for k in chain:
                        nb[_strhash(k) % new].insert(0, k)
                bins, nbins = nb, new
            bins[h % nbins].insert(0, key)
            n += 1
        out = []
        for chain in bins:
            for key in chain:
                lo, hi = self.map[int(key, 16)]
                out.append("%s 0x%04x 0x%04x\n\n" % (key, lo, hi))
        return "".join(out)
