"""The P_Key manager (opensm's osm_pkey_mgr.c and osm_pkey.c's tables), sans-IO.

``PkeyTbl`` is a port's osm_pkey_tbl_t: the blocks read from (or last set
on) the port, the new blocks being built, ``keys`` (P_Key base -> where it
sits, the first occurrence winning), and what opensm keeps across sweeps
to hold every P_Key at its index (``accum``: P_Key -> index + 1, and the
last index used).  Tables live in a ``Tables`` keyed by (node GUID, port
number), so they outlive a sweep's Subnet.

``process(subnet, prtns, tables, opts, log, indx0)`` is osm_pkey_mgr_process
after the partitions are made: every partition's limited then full members
queue their P_Key on their port (P_Keys the port already holds first, at
their index; new ones after); every end port gets its new table (0x7fff at
index 0 unless a partition asked ``indx0``, then the others in order after
the last index ever used, reusing indexes as opensm does when the table
runs out; with keep_pkey_indexes FALSE packed again each time), and each
CA's switch peer gets the CA's P_Keys packed from index
0 (a limited P_Key left out where the full one is there) and partition
enforcement in its PortInfo; enforcement is cleared on links between
switches.  It returns the SMPs to send: ``("pkey", physp, block, entries)``
for every block that differs from the port's, and ``("enforce", physp,
portinfo)`` for PortInfo Sets.
"""

from __future__ import annotations

from ..wire.smp import NODE_INFO, PKEYS_PER_BLOCK, PORT_INFO, SWITCH_INFO
from .prtn_config import DEFAULT_PARTIAL_PKEY, DEFAULT_PKEY, PKEY_FULL, Partitions
from .subnet import Physp, Subnet

ENFORCE_OFF, ENFORCE_IN, ENFORCE_OUT, ENFORCE_BOTH = "off", "in", "out", "both"
_ENFORCE_BITS = {ENFORCE_BOTH: 0xC, ENFORCE_IN: 0x8, ENFORCE_OUT: 0x4, ENFORCE_OFF: 0}


def base(pkey: int) -> int:
    return pkey & 0x7FFF


def invalid(pkey: int) -> bool:
    return base(pkey) == 0


# The blocks read from ports, one list per distinct content: most ports hold the same
# default block (46,000 switch-to-switch ports at 11,664 hosts).  A block is never changed
# in place (set_block replaces it), so ports can share it.
_SHARED_BLOCKS: dict[tuple, list[int]] = {}


def _shared_block(entries) -> list[int]:
    key = tuple(entries)
    blk = _SHARED_BLOCKS.get(key)
    if blk is None:
        if len(_SHARED_BLOCKS) >= 4096:   # many distinct tables: no sharing to be had, keep it small
            _SHARED_BLOCKS.clear()
        blk = _SHARED_BLOCKS[key] = list(key)
    return blk


class PkeyTbl:
    # one per port, switch-to-switch ports included
    __slots__ = ("blocks", "new_blocks", "keys", "accum", "last_pkey_idx", "used_blocks", "max_blocks",
                 "indx0_pkey", "pending")

    def __init__(self) -> None:
        self.blocks: list[list[int] | None] = []
        self.new_blocks: list[list[int] | None] = []
        self.keys: dict[int, tuple[int, int]] = {}
        self.accum: dict[int, int] = {}
        self.last_pkey_idx = 0
        self.used_blocks = 0
        self.max_blocks = 0
        self.indx0_pkey = 0
        self.pending: list[list] = []          # [pkey, is_new, block, index]

    def set_block(self, b: int, entries, allow_both: bool = False) -> None:
        """osm_pkey_tbl_set: a block read (or set); ``keys`` made again."""
        while len(self.blocks) <= b:
            self.blocks.append(None)
        self.blocks[b] = _shared_block(entries)
        self.keys = {}
        for bi, blk in enumerate(self.blocks):
            for i, pk in enumerate(blk or ()):
                if not invalid(pk):
                    self.keys.setdefault(pk if allow_both else base(pk), (bi, i))

    def new_block(self, b: int) -> list[int] | None:
        return self.new_blocks[b] if b < len(self.new_blocks) else None

    def set_new_entry(self, b: int, i: int, pkey: int) -> None:
        while len(self.new_blocks) <= b:
            self.new_blocks.append(None)
        if self.new_blocks[b] is None:
            self.new_blocks[b] = [0] * PKEYS_PER_BLOCK
        self.new_blocks[b][i] = pkey
        self.used_blocks = max(self.used_blocks, b + 1)

    def set_accum(self, pkey: int, idx: int) -> None:
        if idx >= self.last_pkey_idx:
            self.last_pkey_idx = idx + 1
        self.accum[pkey] = idx + 1

    def clear_accum(self, idx: int) -> None:
        for pk, v in list(self.accum.items()):
            if v == idx + 1:
                del self.accum[pk]
                if self.last_pkey_idx == v:
                    self.last_pkey_idx = max(self.accum.values(), default=0)
                return

    def find_next_free(self, b: int, i: int) -> tuple[bool, int, int]:
        """osm_pkey_find_next_free_entry: the first invalid entry of the new blocks from (b, i)."""
        while b < self.max_blocks:
            if i > PKEYS_PER_BLOCK - 1:
                b, i = b + 1, 0
                if b >= self.max_blocks:
                    return False, b, i
            blk = self.new_block(b)
            if blk is None or invalid(blk[i]):
                return True, b, i
            i += 1
        return False, b, i


class Tables(dict):
    """(node GUID, port number) -> PkeyTbl."""

    def of(self, p: Physp) -> PkeyTbl:
        key = (p.node.guid, p.num)
        t = self.get(key)
        if t is None:
            t = self[key] = PkeyTbl()
        return t


def max_pkeys(p: Physp) -> int:
    """NodeInfo PartitionCap (CAs, switch port 0) or SwitchInfo PartitionEnforcementCap."""
    if not p.node.is_switch or p.num == 0:
        return NODE_INFO.get(p.node.node_info, "PartCap") if p.node.node_info else 0
    return SWITCH_INFO.get(p.node.switch_info, "PartEnforceCap") if p.node.switch_info else 0


def max_blocks(p: Physp) -> int:
    return (max_pkeys(p) + PKEYS_PER_BLOCK - 1) // PKEYS_PER_BLOCK


def needs_table(p: Physp) -> bool:
    """The ports whose P_Key table opensm reads: end ports, and linked switch ports
    (if the switch enforces partitions)."""
    if not p.node.is_switch or p.num == 0:
        return True
    return p.remote is not None and max_pkeys(p) > 0


class _Mgr:
    def __init__(self, tables: Tables, allow_both: bool, log) -> None:
        self.tables, self.both, self.log = tables, allow_both, log
        self.out: list[tuple] = []

    def same(self, a: int, b: int) -> bool:
        return a == b if self.both else base(a) == base(b)

    def is_default(self, pkey: int) -> bool:
        return pkey == DEFAULT_PKEY if self.both else base(pkey) == DEFAULT_PARTIAL_PKEY

    # pkey_mgr_process_physical_port
    def queue(self, pkey: int, p: Physp) -> None:
        t = self.tables.of(p)
        pend = [pkey, True, 0, 0]
        orig = t.keys.get(pkey if self.both else base(pkey))
        if orig is not None:
            pend[1] = False
            b, i = pend[2], pend[3] = orig
            if t.indx0_pkey:
                if self.same(pkey, t.indx0_pkey) and (b, i) != (0, 0):
                    pend[1] = True
                    t.clear_accum(b * PKEYS_PER_BLOCK + i)
                if (b, i) == (0, 0) and not self.same(pkey, t.indx0_pkey):
                    pend[1] = True
                    t.clear_accum(0)
            elif (b, i) == (0, 0):
                if base(pkey) != DEFAULT_PARTIAL_PKEY:
                    pend[1] = True
                    t.clear_accum(0)
            elif self.is_default(pkey):
                pend[1] = True
                t.clear_accum(b * PKEYS_PER_BLOCK + i)
        if pend[1]:
            t.pending.append(pend)
        else:
            t.pending.insert(0, pend)

    # pkey_mgr_update_port
    def update_port(self, p: Physp) -> None:
        t = self.tables.of(p)
        num_blocks = len(t.blocks)
        cap = max_pkeys(p)
        t.max_blocks = max_blocks(p)
        t.new_blocks = [None if b is None else [0] * PKEYS_PER_BLOCK for b in t.new_blocks]
        t.used_blocks = 0
        while t.pending:
            pkey, is_new, b, i = t.pending.pop(0)
            found, ptr = False, None
            if not is_new:
                found = True
            else:
                ptr = t.accum.get(pkey)
                if ptr is not None:
                    idx = ptr - 1
                    b, i = divmod(idx, PKEYS_PER_BLOCK)
                    if self.same(pkey, t.indx0_pkey) or (pkey != t.indx0_pkey and idx == 0):
                        t.clear_accum(idx)
                        t.pending.append([pkey, is_new, 0, 0])
                        continue
                    found = True
                if not found:
                    if not t.indx0_pkey and self.is_default(pkey):
                        b, i = 0, 0
                    elif self.same(pkey, t.indx0_pkey):
                        b, i = 0, 0
                    elif t.last_pkey_idx:
                        b, i = divmod(t.last_pkey_idx - 1, PKEYS_PER_BLOCK)
                        i += 1
                        if i >= PKEYS_PER_BLOCK:
                            b, i = b + 1, i - PKEYS_PER_BLOCK
                    else:
                        b, i = 0, 1
                    if b * PKEYS_PER_BLOCK + i >= cap:
                        full = False
                        if not self.is_default(pkey):
                            found, b, i = t.find_next_free(0, 1)
                        if not found:
                            full = True
                        elif b * PKEYS_PER_BLOCK + i >= cap:
                            full, found = True, False
                        else:
                            self.log.info(f"pkey_mgr_update_port: Reusing PKeyTable block index {b} pkey index {i} "
                                          f"for pkey 0x{pkey:x} on 0x{p.node.guid:016x} port {p.num} ({p.node.desc})")
                            t.clear_accum(b * PKEYS_PER_BLOCK + i)
                        if full:
                            self.log.error(f"pkey_mgr_update_port: ERR 0512: Failed to set PKey 0x{pkey:04x} "
                                           f"because Pkey table is full for node 0x{p.node.guid:016x} port "
                                           f"{p.num} ({p.node.desc})")
                    else:
                        found = True
            if found:
                t.set_new_entry(b, i, pkey)
                if ptr is None:
                    t.set_accum(pkey, b * PKEYS_PER_BLOCK + i)
        t.indx0_pkey = 0
        for b in range(num_blocks):
            new = t.new_block(b) or [0] * PKEYS_PER_BLOCK
            if t.blocks[b] is not None and t.blocks[b] == new:
                continue
            self.out.append(("pkey", p, b, list(new)))

    # pkey_mgr_enforce_partition
    def enforce(self, p: Physp, how: str) -> None:
        if not p.port_info:
            return
        bits = _ENFORCE_BITS[how]
        pi = PORT_INFO.decode(p.port_info)
        have = (pi["PartEnforceInb"] << 3) | (pi["PartEnforceOutb"] << 2)
        if have == bits:
            return
        data = bytearray(p.port_info)
        PORT_INFO.encode_into(data, 0, PartEnforceInb=bits >> 3 & 1, PartEnforceOutb=bits >> 2 & 1,
                              LinkState=0, PhysLinkState=0, LinkDownDefState=0)
        self.out.append(("enforce", p, bytes(data)))

    # pkey_mgr_update_peer_port
    def update_peer(self, p: Physp, how: str) -> None:
        peer = p.remote
        if peer is None or not peer.node.is_switch or max_pkeys(peer) == 0:
            return
        if how == ENFORCE_OFF:
            self.enforce(peer, ENFORCE_OFF)
            return
        t, pt = self.tables.of(p), self.tables.of(peer)
        peer_max = max_blocks(peer)
        entries: list[int] = []
        held = {pk for blk in t.new_blocks if blk for pk in blk}
        stop = False
        for b in range(t.used_blocks):
            blk = t.new_block(b)
            if blk is None:
                continue
            for pk in blk:
                if invalid(pk):
                    continue
                if not pk & PKEY_FULL and (pk | PKEY_FULL) in held:
                    continue
                if len(entries) // PKEYS_PER_BLOCK >= peer_max:
                    stop = True
                    break
                entries.append(pk)
            if stop:
                break
        nfull, rest = divmod(len(entries), PKEYS_PER_BLOCK)
        for b in range(min(nfull, peer_max)):
            self._peer_block(peer, pt, b, entries[b * PKEYS_PER_BLOCK:(b + 1) * PKEYS_PER_BLOCK])
        if nfull < peer_max:
            if rest:
                self._peer_block(peer, pt, nfull, entries[nfull * PKEYS_PER_BLOCK:] + [0] * (PKEYS_PER_BLOCK - rest))
                last_block = nfull
            else:
                last_block = nfull - 1
            pt.used_blocks = (last_block + 1) & 0xFFFF
            if pt.used_blocks == peer_max:
                blk = entries[last_block * PKEYS_PER_BLOCK:(last_block + 1) * PKEYS_PER_BLOCK]
                last = PKEYS_PER_BLOCK
                node_cap = NODE_INFO.get(p.node.node_info, "PartCap") if p.node.node_info else 0
                if pt.used_blocks == pt.max_blocks:
                    last = node_cap % PKEYS_PER_BLOCK or PKEYS_PER_BLOCK
                idx = last
                while idx:
                    idx -= 1
                    if idx < len(blk) and not invalid(blk[idx]):
                        break
                idx += last_block * PKEYS_PER_BLOCK
                cap = max_pkeys(peer)
                if cap <= idx:
                    self.log.error(f"pkey_mgr_update_peer_port: ERR 0507: Not enough pkey entries ({cap} <= {idx}) "
                                   f"on switch 0x{peer.node.guid:016x} port {peer.num} ({peer.node.desc}). "
                                   "Clearing Enforcement bit")
                    how = ENFORCE_OFF
        else:
            pt.used_blocks = peer_max
            how = ENFORCE_OFF
        self.enforce(peer, how)

    def _peer_block(self, peer: Physp, pt: PkeyTbl, b: int, entries: list[int]) -> None:
        have = pt.blocks[b] if b < len(pt.blocks) else None
        if have is None or have != entries:
            self.out.append(("pkey", peer, b, list(entries)))


def process(subnet: Subnet, prtns: Partitions, tables: Tables, log, allow_both: bool = False,
            enforce: str = ENFORCE_BOTH, indx0: dict | None = None, keep_indexes: bool = True) -> list[tuple]:
    """osm_pkey_mgr_process after osm_prtn_make_partitions: the SMPs to send (see the module doc).
    ``keep_indexes`` False (opensm's keep_pkey_indexes FALSE): every end port's table is packed
    again from scratch, as if the SM had never set it."""
    m = _Mgr(tables, allow_both, log)
    if not keep_indexes:
        # opensm empties the key map too: until a Set's answer fills it again (only blocks that
        # change are set, and tables are read only from new ports), the SA finds no P_Key there
        for port in subnet.end_ports():
            t = tables.of(port)
            t.keys.clear()
            t.accum.clear()
            t.last_pkey_idx = 0
    for p, pk in (indx0 or {}).items():
        tables.of(p).indx0_pkey = pk
    for prtn in prtns.ordered():
        for full in (False, True):
            pkey = prtn.pkey | (PKEY_FULL if full else 0)
            for ph in prtn.members(full):
                m.queue(pkey, ph)
    for port in subnet.end_ports():
        m.update_port(port)
        if not port.node.is_switch:
            m.update_peer(port, enforce)
    for sw in subnet.switches():
        for num in range(1, sw.num_ports + 1):
            ph = sw.ports.get(num)
            if ph is None or ph.remote is None or not ph.remote.node.is_switch:
                continue
            if ph.port_info and (PORT_INFO.get(ph.port_info, "PartEnforceInb") or
                                 PORT_INFO.get(ph.port_info, "PartEnforceOutb")):
                m.enforce(ph, ENFORCE_OFF)
    return m.out


# -- what the SA asks of the tables (osm_pkey.c) -------------------------------------------

def entry(t: PkeyTbl, key: int) -> int:
    b, i = t.keys[key]
    return t.blocks[b][i]


def find_common_pkey(t1: PkeyTbl, t2: PkeyTbl) -> int:
    """osm_physp_find_common_pkey: the first P_Key (in opensm's map order) both ports hold,
    one of them as a full member -- as the first port holds it; 0 if none."""
    from .prtn_config import pkey_order
    for key in sorted(t1.keys.keys() & t2.keys.keys(), key=pkey_order):
        a, b = entry(t1, key), entry(t2, key)
        if (a | b) & PKEY_FULL and base(a) == base(b):
            return a
    return 0


def share_this_pkey(t1: PkeyTbl, t2: PkeyTbl, pkey: int) -> bool:
    """osm_physp_share_this_pkey (without allow_both_pkeys)."""
    k = base(pkey)
    if k not in t1.keys or k not in t2.keys:
        return False
    return bool((entry(t1, k) | entry(t2, k)) & PKEY_FULL)


def has_pkey(t: PkeyTbl, pkey: int) -> bool:
    """osm_physp_has_pkey: an invalid P_Key is anybody's."""
    return invalid(pkey) or base(pkey) in t.keys


def share_pkey(t1: PkeyTbl, t2: PkeyTbl) -> bool:
    """osm_physp_share_pkey: a port without a known table shares with everybody."""
    if t1 is t2 or not t1.keys or not t2.keys:
        return True
    return not invalid(find_common_pkey(t1, t2))
