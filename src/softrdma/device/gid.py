"""The RoCE GID table of a port, built from its netdev as ib_core does for rxe.

Pure functions and one class; no I/O.  What the kernel does, from
drivers/infiniband/core/roce_gid_mgmt.c and cache.c:

* **Which GIDs.**  ``add_netdev_ips()`` runs, for a netdev that comes up
  (and at device registration, ``roce_rescan_device()``): the *default GID*
  first (``make_default_gid()``: prefix fe80::/64, interface id
  ``addrconf_ifid_eui48()`` of the MAC: U/L bit flipped, ff:fe inserted),
  then one GID per IPv4 address (``rdma_ip2gid()``: the IPv4-mapped
  ``::ffff:a.b.c.d``), then one per IPv6 address, copied as is.  After that
  ``inetaddr_event``/``inet6addr_event`` add and delete one GID per address
  as addresses come and go.  No IPv6 address is filtered out: link-local,
  site, global, temporary all get a GID.  The only thing that keeps an
  address out is that its GID is already in the table with the same type
  and netdev (``find_gid()`` with GID|GID_TYPE|NETDEV): so the EUI-64
  link-local fe80::5054:ff:fe77:2 of a netdev with MAC 52:54:00:77:00:02 is
  the default GID already and takes no second slot (that is why the real
  rxe0 of ``../shared/interop/rxe-vm`` has exactly two GIDs), while a
  stable-privacy link-local (another interface id) gets its own slot.
* **Which types.**  ``update_gid()`` adds one entry per GID type in
  ``roce_gid_type_mask_support()``: RoCE v1 if the port has
  ``rdma_protocol_roce_eth_encap``, RoCE v2 if ``rdma_protocol_roce_udp_encap``.
  rxe's port has only RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP, so every entry is
  type "RoCE v2" (``gid_type_str[IB_GID_TYPE_ROCE_UDP_ENCAP]``), one slot per
  GID, and one default slot.
* **Which index.**  ``gid_table_reserve_default()`` reserves the first
  hweight(type mask) indices for default GIDs: index 0 for rxe, reserved even
  while empty.  ``__ib_cache_gid_add()`` puts a new GID in the *lowest free
  slot* that is not reserved (``find_gid()``'s ``empty``); ``del_gid()``
  frees exactly that slot; nothing ever moves.  A zero GID is never stored.
  A full table refuses the GID (-ENOSPC, a pr_warn) and it stays out.
* **Deletion of the default.**  ``ib_cache_gid_del()`` masks on DEFAULT, so
  removing the IPv6 link-local equal to the default GID leaves index 0 alone.
* **MAC change** (NETDEV_CHANGEADDR): every GID of the netdev is deleted
  (``netdev_del_cmd``), then the default GID and all addresses are added
  again in the order above.
* **Netdev down**: nothing happens to the table (IPv6 addresses go away with
  the link and their GIDs with them, through the address events; IPv4
  addresses and the default GID stay).

``GidTable.sync()`` applies the difference between the table and the
netdev's current (MAC, addresses) with those rules: a MAC change rebuilds as
NETDEV_CHANGEADDR does; otherwise vanished addresses free their slots first,
then new ones take the lowest free slots, IPv4 before IPv6, each family in
the order given (pass them in the netdev's order, ``ip addr`` order).

Not modelled (documented, not needed by the daemon): a deleted GID still
referenced by an AH/QP stays PENDING_DEL and keeps its slot until the last
reference goes (cache.c ``del_gid``/``put_gid_entry``); we free at once.
Bonding/VLAN upper devices and RoCE v1 are out of scope.
"""

from __future__ import annotations

import ipaddress
from typing import Iterable, Iterator, NamedTuple, Optional

from ..wire.gid import GID_LEN, ipv4_gid, ipv6_gid

#: rxe's gid_tbl_len (RXE_PORT_GID_TBL_LEN)
RXE_GID_TABLE_LEN = 1024
#: cache.c gid_type_str[]: IB and RoCE v1 both print "IB/RoCE v1"
ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"
ZERO_GID = bytes(GID_LEN)

_LINK_LOCAL_PREFIX = b"\xfe\x80" + bytes(6)


def _mac_bytes(mac: bytes | str) -> bytes:
    if isinstance(mac, str):
        parts = mac.replace("-", ":").split(":")
        if len(parts) != 6:
            raise ValueError(f"bad MAC {mac!r}")
        mac = bytes(int(p, 16) for p in parts)
    mac = bytes(mac)
    if len(mac) != 6:
        raise ValueError(f"a MAC is 6 bytes, got {len(mac)}")
    return mac


def eui64(mac: bytes | str) -> bytes:
    """The modified EUI-64 interface id of a 48-bit MAC (addrconf_ifid_eui48 /
    addrconf_addr_eui48): the 8 bytes rxe also uses as node GUID and system
    image GUID."""
    m = _mac_bytes(mac)
    return bytes((m[0] ^ 0x02, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]))


def default_gid(mac: bytes | str) -> bytes:
    """fe80::/64 + EUI-64 of the MAC (cache.c make_default_gid)."""
    return _LINK_LOCAL_PREFIX + eui64(mac)


def gid_str(gid: bytes) -> str:
    """The kernel's ``%pI6`` (sysfs gids/N without the newline): eight groups
    of four lowercase hex digits, never compressed."""
    gid = bytes(gid)
    if len(gid) != GID_LEN:
        raise ValueError(f"a GID is 16 bytes, got {len(gid)}")
    h = gid.hex()
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


def gid_from_str(text: str) -> bytes:
    """Inverse of gid_str; also takes any IPv6 text form (``fe80::1``,
    ``::ffff:10.77.0.2``) and surrounding whitespace (a sysfs read)."""
    t = text.strip()
    groups = t.split(":")
    if len(groups) == 8 and all(len(g) == 4 for g in groups):
        try:
            return bytes.fromhex("".join(groups))
        except ValueError:
            pass
    try:
        return ipaddress.IPv6Address(t).packed
    except ValueError:
        raise ValueError(f"not a GID: {text!r}") from None


class GidEntry(NamedTuple):
    """One used slot: what sysfs shows in gids/N, gid_attrs/types/N and
    gid_attrs/ndevs/N."""

    gid: bytes
    type: str = ROCE_V2
    ndev: str = ""

    def __repr__(self) -> str:
        return f"GidEntry({gid_str(self.gid)}, {self.type!r}, {self.ndev!r})"


Change = tuple[int, Optional[GidEntry], Optional[GidEntry]]


class GidTable:
    """One port's GID table (rxe: 1024 slots, RoCE v2 only, index 0 reserved
    for the default GID).  ``table[i]`` is the GidEntry at slot i or None for
    a free slot (IndexError outside the table); iteration yields
    ``(index, entry)`` for used slots in index order; ``len()`` is the number
    of used slots."""

    def __init__(self, ndev: str, capacity: int = RXE_GID_TABLE_LEN,
                 gid_type: str = ROCE_V2):
        if capacity < 1:
            raise ValueError("a GID table has at least one slot")
        self.ndev = ndev
        self.capacity = capacity
        self.gid_type = gid_type
        #: indices reserved for default GIDs (one per supported GID type)
        self.default_indices = frozenset({0})
        self._slots: list[Optional[GidEntry]] = [None] * capacity
        self._index: dict[bytes, int] = {}
        self.mac: Optional[bytes] = None
        #: GIDs refused because the table was full (the kernel's -ENOSPC),
        #: as of the last sync
        self.refused: list[bytes] = []

    # -- reading ---------------------------------------------------------------

    def __getitem__(self, index: int) -> Optional[GidEntry]:
        if not 0 <= index < self.capacity:
            raise IndexError(f"GID index {index} outside 0..{self.capacity - 1}")
        return self._slots[index]

    def __iter__(self) -> Iterator[tuple[int, GidEntry]]:
        for i, e in enumerate(self._slots):
            if e is not None:
                yield i, e

    def __len__(self) -> int:
        return len(self._index)

    def find(self, gid: bytes) -> Optional[int]:
        """The index of ``gid`` (bytes, or text in any form gid_from_str
        takes), or None (rdma_find_gid_by_port without a netdev)."""
        if isinstance(gid, str):
            gid = gid_from_str(gid)
        return self._index.get(bytes(gid))

    def gid(self, index: int) -> Optional[bytes]:
        """The GID at ``index``; None for a free slot or an index outside the table."""
        e = self._slots[index] if 0 <= index < self.capacity else None
        return e.gid if e is not None else None

    def gids(self) -> list[bytes]:
        """GIDs by index up to the last used slot (free slots: zero GID)."""
        last = max((i for i, e in enumerate(self._slots) if e is not None), default=-1)
        return [self.gid(i) or ZERO_GID for i in range(last + 1)]

    def snapshot(self) -> list[Optional[GidEntry]]:
        return list(self._slots)

    # -- changing --------------------------------------------------------------

    def _put(self, index: int, gid: bytes) -> None:
        self._slots[index] = GidEntry(gid, self.gid_type, self.ndev)
        self._index[gid] = index

    def _free(self, index: int) -> None:
        e = self._slots[index]
        if e is not None:
            del self._index[e.gid]
            self._slots[index] = None

    def _add(self, gid: bytes) -> None:
        """__ib_cache_gid_add for a non-default GID."""
        if gid == ZERO_GID or gid in self._index:
            return
        for i in range(self.capacity):
            if self._slots[i] is None and i not in self.default_indices:
                self._put(i, gid)
                return
        self.refused.append(gid)

    def _set_default(self, mac: bytes) -> None:
        """ib_cache_gid_set_default_gid(MODE_SET): the reserved slot, unless
        a default GID is already there (find_gid on TYPE|DEFAULT|NETDEV)."""
        for i in sorted(self.default_indices):
            if self._slots[i] is not None:
                return
            # sync() sets the default before any address and clears it only
            # together with them, so its value is never in another slot here.
            self._put(i, default_gid(mac))
            return

    def clear(self) -> list[Change]:
        """ib_cache_gid_del_all_netdev_gids (netdev unregistered)."""
        before = self.snapshot()
        for i in range(self.capacity):
            self._free(i)
        self.mac = None
        return self._diff(before)

    def sync(self, mac: bytes | str, addresses: Iterable) -> list[Change]:
        """Bring the table in line with the netdev's MAC and addresses
        (``ipaddress`` objects or text) as roce_gid_mgmt would; returns the
        net changes ``(index, old, new)`` in index order (old/new are
        GidEntry or None)."""
        mac_b = _mac_bytes(mac)
        v4: list[bytes] = []
        v6: list[bytes] = []
        for a in addresses:
            ip = ipaddress.ip_address(a)
            (v4 if ip.version == 4 else v6).append(
                ipv4_gid(ip) if ip.version == 4 else ipv6_gid(ip))
        wanted = v4 + v6
        before = self.snapshot()
        self.refused = []

        if self.mac is not None and self.mac != mac_b:
            # NETDEV_CHANGEADDR: delete all GIDs of the netdev, then add the
            # default GID and every address again.
            for i in range(self.capacity):
                self._free(i)
        self.mac = mac_b
        self._set_default(mac_b)

        keep = set(wanted)
        for i, e in enumerate(self._slots):
            if e is not None and i not in self.default_indices and e.gid not in keep:
                self._free(i)
        for gid in wanted:
            self._add(gid)
        return self._diff(before)

    def assign(self, gids) -> list[Change]:
        """An InfiniBand port's table: slot i holds ``gids[i]`` (subnet
        prefix + the port's i-th GUID; a zero GID frees the slot), slots past
        the list are freed -- the table the kernel's ib_cache builds from
        PortInfo.GidPrefix and GUIDInfo.  Returns the changes as ``sync``."""
        before = self.snapshot()
        gids = list(gids)[:self.capacity]
        for i in range(self.capacity):
            g = bytes(gids[i]) if i < len(gids) else ZERO_GID
            e = self._slots[i]
            if e is not None and e.gid == g:
                continue
            self._free(i)
            if g != ZERO_GID and g not in self._index:
                self._put(i, g)
        return self._diff(before)

    def _diff(self, before: list[Optional[GidEntry]]) -> list[Change]:
        return [(i, old, new) for i, (old, new) in enumerate(zip(before, self._slots))
                if old != new]

    def __repr__(self) -> str:
        used = ", ".join(f"{i}: {gid_str(e.gid)}" for i, e in self)
        return f"GidTable({self.ndev!r}, {len(self)}/{self.capacity} used: {used})"
