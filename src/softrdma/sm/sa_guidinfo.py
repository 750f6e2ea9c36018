"""The SA's GUIDInfoRecord and alias GUIDs (opensm's osm_sa_guidinfo_record.c).

A port's GUID table beyond index 0 (its port GUID, read-only) holds alias
GUIDs, set by SubnAdmSet(GUIDInfoRecord) for a block of 8 (the LID of the
port and the block in the record; the component mask's GID0..GID7 bits
choose the indices set) and removed by SubnAdmDelete.  An alias on
another port already, or on this port at another index, is refused for
that index (the answer's GUID there is 0), as opensm's ERR 5108; index 0
cannot be set (REQ_INVALID).  A zero GUID asked for an index keeps what
was there.  Get/GetTable answer one record per block that holds a GUID
(block 0 always: the port GUID), for the end ports matching LID and
BlockNum.  The aliases resolve GIDs: a PathRecord to an alias GID is a
path to its port (``SubnetAdmin.port_by_gid``), with that GID as the
record's DGID -- how SR-IOV VFs without virtualization are reached.  The
tables are the SM's (they stay across sweeps; a port gone takes its
aliases with it).
"""

from __future__ import annotations

from ..wire.sa import SA_STATUS_INSUFFICIENT_COMPONENTS, SA_STATUS_NO_RECORDS, SA_STATUS_REQ_INVALID, SaMethod
from ..wire.smp import GUIDS_PER_BLOCK, PORT_INFO, decode_guid_info, encode_guid_info

GUIDINFO_RECORD_SIZE = 72                 # LID, BlockNum, reserved (1 + 4), GUIDInfo (64)
GIR_COMP_LID, GIR_COMP_BLOCKNUM = 1 << 0, 1 << 1
GIR_COMP_GID0 = 1 << 4                    # GID0 .. GID7: bits 4 .. 11
MOD_GIR_COMP_MASK = GIR_COMP_LID | GIR_COMP_BLOCKNUM


def _guid_cap(ph) -> int:
    return max(1, PORT_INFO.get(ph.port_info, "GuidCap") if ph.port_info else 1)


class GuidInfo:
    """Alias GUIDs by port (``tables``: port GUID -> list of GUIDs, index
    0 the port's) and the reverse map (``alias``: GUID -> port GUID)."""

    def __init__(self):
        self.tables: dict[int, list[int]] = {}
        self.alias: dict[int, int] = {}

    def port_guid_of(self, guid: int) -> int | None:
        return self.alias.get(guid)

    def record(self, lid: int, ph, block: int) -> bytes:
        t = self.tables.get(ph.guid) or [ph.guid]
        lo = block * GUIDS_PER_BLOCK
        guids = [(t[i] if i < len(t) else 0) for i in range(lo, lo + GUIDS_PER_BLOCK)]
        if block == 0:
            guids[0] = ph.guid
        return lid.to_bytes(2, "big") + bytes([block]) + bytes(5) + encode_guid_info(guids)

    def records(self, mask: int, rec, by_lid: dict, base_lids) -> list[bytes]:
        """Get/GetTable (sa_gir_by_comp_mask_cb)."""
        lid = int.from_bytes(rec[0:2], "big") if mask & GIR_COMP_LID else None
        block = rec[2] if mask & GIR_COMP_BLOCKNUM else None
        out = []
        for elid in ([lid] if lid is not None else base_lids):
            ph = by_lid.get(elid)
            if ph is None:
                continue
            t = self.tables.get(ph.guid) or [ph.guid]
            blocks = (_guid_cap(ph) + GUIDS_PER_BLOCK - 1) // GUIDS_PER_BLOCK
            for b in range(blocks):
                if (block is None or b == block) and (b == 0 or any(t[b * GUIDS_PER_BLOCK:(b + 1) * GUIDS_PER_BLOCK])):
                    out.append(self.record(ph.lid, ph, b))
        return out

    def set_or_delete(self, method: int, mask: int, rec, by_lid: dict, log=None) -> tuple[int, bytes]:
        """SubnAdmSet / SubnAdmDelete: (status, the record as the port's table now has it)."""
        head = bytes(rec[:GUIDINFO_RECORD_SIZE]).ljust(GUIDINFO_RECORD_SIZE, b"\0")
        if mask & MOD_GIR_COMP_MASK != MOD_GIR_COMP_MASK:
            return SA_STATUS_INSUFFICIENT_COMPONENTS, head
        lid, block = int.from_bytes(head[0:2], "big"), head[2]
        ph = by_lid.get(lid)
        if ph is None:
            return SA_STATUS_NO_RECORDS, head
        cap = _guid_cap(ph)
        if block * GUIDS_PER_BLOCK >= cap:
            return SA_STATUS_NO_RECORDS, head
        if block == 0 and mask & GIR_COMP_GID0:
            return SA_STATUS_REQ_INVALID, head           # the port GUID is read-only
        t = self.tables.setdefault(ph.guid, [ph.guid] + [0] * (cap - 1))
        want = decode_guid_info(head[8:72])
        for k in range(GUIDS_PER_BLOCK):
            i = block * GUIDS_PER_BLOCK + k
            if i >= cap or not mask & (GIR_COMP_GID0 << k):
                continue
            old = t[i]
            if method == SaMethod.DELETE:
                if old:
                    self.alias.pop(old, None)
                    t[i] = 0
                continue
            g = want[k]
            if not g or g == old:
                continue
            owner = self.alias.get(g)
            if owner is not None or g == ph.guid:
                if log:
                    log.error(f"set_guidinfo: ERR 5108: Duplicate alias port GUID 0x{g:016x} index {i} base "
                              f"port GUID 0x{ph.guid:016x}, alias GUID already assigned to base port GUID "
                              f"0x{owner or ph.guid:016x}")
                continue
            if old:
                self.alias.pop(old, None)
            t[i] = g
            self.alias[g] = ph.guid
        return 0, self.record(ph.lid, ph, block)

    def keep_ports(self, live: set[int]) -> None:
        """A sweep's ports: the tables of ports gone go, with their aliases."""
        for pg in [pg for pg in self.tables if pg not in live]:
            for g in self.tables.pop(pg)[1:]:
                if g:
                    self.alias.pop(g, None)


__all__ = ["GIR_COMP_BLOCKNUM", "GIR_COMP_GID0", "GIR_COMP_LID", "GUIDINFO_RECORD_SIZE", "GuidInfo"]
