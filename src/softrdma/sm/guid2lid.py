"""opensm's ``guid2lid`` cache file: read it, and write it byte for byte as opensm does.

The file is one ``0x<guid> 0x<minlid> 0x<maxlid>`` record per port, each
followed by an empty line (osm_db_files.c dump_tbl_entry).  opensm keeps the
records in its ``st`` string hash table and writes them in bin order, so the
line order is that of the hash table after the insertions and deletions the
SM made since it restored the file: ``Guid2Lid`` keeps the same table (Ruby's
old st.c: 997-multiplier string hash, prime bin counts, rehash when
entries/bins > 5, new entries at the head of a bin), and opensm rewrites the
file only when a record changed (``dirty``).
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
    """guid -> (min_lid, max_lid), kept in a model of opensm's st hash table.

    ``loads`` is osm_db_restore (the file's records inserted in file order);
    ``set`` is osm_db_guid2lid_set (a new key goes to the head of its bin, an
    existing one changes its value in place, the same value changes nothing);
    ``delete`` unlinks the key; ``dirty`` says whether anything changed since
    the restore, as osm_db_store only rewrites the file then.  ``dumps``
    walks the bins as dump_tbl_entry does.
    """

    def __init__(self) -> None:
        self.map: dict[int, tuple[int, int]] = {}
        self._nbins = _new_size(0)
        self._bins: list[list[str]] = [[] for _ in range(self._nbins)]
        self._n = 0
        self.dirty = False

    def get(self, guid: int) -> tuple[int, int] | None:
        return self.map.get(guid)

    def _insert(self, key: str) -> None:
        # st.c ADD_DIRECT: rehash first when the table is too dense, then push at the bin head
        if self._n // self._nbins > _MAX_DENSITY:
            new = _new_size(self._nbins + 1)
            nb: list[list[str]] = [[] for _ in range(new)]
            for chain in self._bins:        # rehash walks old bins head first, pushing at the new head
                for k in chain:
                    nb[_strhash(k) % new].insert(0, k)
            self._bins, self._nbins = nb, new
        self._bins[_strhash(key) % self._nbins].insert(0, key)
        self._n += 1

    def set(self, guid: int, min_lid: int, max_lid: int) -> None:
        old = self.map.get(guid)
        if old == (min_lid, max_lid):
            return
        if old is None:
            self._insert(_key(guid))
        self.map[guid] = (min_lid, max_lid)
        self.dirty = True

    def delete(self, guid: int) -> None:
        if guid not in self.map:
            return
        del self.map[guid]
        key = _key(guid)
        self._bins[_strhash(key) % self._nbins].remove(key)
        self._n -= 1
        self.dirty = True

    def guids(self) -> list[int]:
        """The keys in table order (st_foreach: osm_db_keys, osm_db_guid2lid_guids)."""
        return [int(k, 16) for chain in self._bins for k in chain]

    def clear(self) -> None:
        """osm_db_clear: every entry deleted, the bins stay."""
        for guid in list(self.map):
            self.delete(guid)

    @classmethod
    def loads(cls, text: str) -> "Guid2Lid":
        g = cls()
        for line in text.splitlines():
            f = line.split()
            if len(f) >= 3:
                g.set(int(f[0], 16), int(f[1], 16), int(f[2], 16))
        g.dirty = False
        return g

    def dumps(self) -> str:
        out = []
        for chain in self._bins:
            for key in chain:
                lo, hi = self.map[int(key, 16)]
                out.append("%s 0x%04x 0x%04x\n\n" % (key, lo, hi))
        return "".join(out)
