"""The daemon's IPoIB interfaces (the kernel's ib_ipoib module): one per IB
port, as the device or its further port is added (``ib0``, ``ib1``, ...
-- the first free name in the daemon's network namespace), P_Key children
made and removed on
request (``create_child`` / ``delete_child``), their ``mode`` (datagram or
connected, ``IpoibIf.set_mode``) and connected mode's settings, and what
the daemon's loop gives them: the TUN device's readability, the port's
events, rtnetlink's address changes on the interface, the timers (their
own and their RC connections'), the sysfs files.

"""

from __future__ import annotations

import errno
import ipaddress
import logging
import selectors
import time

from ..errors import VerbsError
from ..wire import ipoib as w
from .ipoib import IpoibIf
from .ipoib_sa import SaClient
from .ipoib_tun import Tun

log = logging.getLogger("softrdmad")
PENDING = "pending"                       # ``resolve``: IPoIB is asking the neighbour
DEFAULT_PKEY = 0xFFFF
IB_MTU_DEFAULT = 2048


def interface_addresses(index: int) -> tuple[list, list]:
    """(IPv4, IPv6) addresses of an interface with their prefix lengths."""
    from pyroute2 import IPRoute
    v4, v6 = [], []
    with IPRoute() as ipr:
        for a in ipr.get_addr(index=index):
            addr = a.get_attr("IFA_ADDRESS")
            if addr is None:
                continue
            (v4 if a["family"] == 2 else v6).append((ipaddress.ip_address(addr).packed, a["prefixlen"]))
    return v4, v6


class IpoibHost:
    """Every IPoIB interface of one daemon."""

    def __init__(self, daemon, enabled: bool):
        self.daemon = daemon
        self.enabled = enabled
        self.ifs: dict[str, IpoibIf] = {}
        self.sa: dict = {}                    # device -> SaClient

    # -- interfaces
    def add_device(self, dev) -> None:
        """An IB device: its first port's interface (nothing when IPoIB is
        off, or the daemon may not make TUN devices: logged)."""
        self.add_port(dev)

    def add_port(self, port) -> None:
        """An IB port (the device itself for port 1, an ``IbSubPort`` for
        ``rdma link add NAME/N``): its interface, the next free ``ibN``, as
        ipoib_add_port makes one per port."""
        if not self.enabled:
            return
        self.sa[port] = SaClient(port)
        try:
            self._make(port, "ib%d", DEFAULT_PKEY, None)
        except OSError as e:
            log.warning("%s/%d: no IPoIB interface: %s", port.name, port.num, e.strerror or e)

    def _make(self, dev, name: str, pkey: int, parent) -> IpoibIf:
        tun = Tun(name, w.ud_mtu(IB_MTU_DEFAULT))
        try:
            ifc = IpoibIf(dev, self.sa[dev], tun, pkey, parent)
        except BaseException:
            tun.close()
            raise
        self.ifs[ifc.name] = ifc
        self.daemon.sel.register(tun.fd, selectors.EVENT_READ, ("ipoib", ifc))
        self.refresh_addresses(ifc)
        if dev.state == 4:
            ifc.port_up(time.monotonic())
        self.write_sysfs(ifc)
        log.info("%s: IPoIB interface %s (P_Key %#06x, QPN %#x)", dev.name, ifc.name, ifc.pkey, ifc.qp_num)
        return ifc

    def create_child(self, parent: str, pkey: int, name: str | None = None) -> IpoibIf:
        """``ip link add link PARENT name NAME type ipoib pkey PKEY`` (NAME
        defaults to PARENT.PKEY in hex, as ``create_child`` names it)."""
        p = self.ifs.get(parent)
        if p is None or p.parent is not None:
            raise VerbsError(errno.ENODEV, f"no IPoIB parent interface {parent!r}")
        if pkey & 0x7FFF == 0 or not 0 < pkey <= 0xFFFF:
            raise VerbsError(errno.EINVAL, f"P_Key {pkey:#x} is not valid")
        pkey |= 0x8000
        name = name or f"{parent}.{pkey:04x}"
        if name in self.ifs:
            raise VerbsError(errno.EEXIST, f"{name} exists")
        if any(i.parent is p and i.pkey == pkey for i in self.ifs.values()):
            raise VerbsError(errno.EEXIST, f"{parent} has a child with P_Key {pkey:#06x}")
        try:
            return self._make(p.dev, name, pkey, p)
        except OSError as e:
            raise VerbsError(e.errno or errno.EIO, f"{name}: {e.strerror or e}") from None

    def delete_child(self, name: str) -> None:
        ifc = self.ifs.get(name)
        if ifc is None:
            raise VerbsError(errno.ENODEV, f"no IPoIB interface {name!r}")
        if ifc.parent is None:
            raise VerbsError(errno.EOPNOTSUPP, f"{name} is not a child interface")
        self._remove(ifc)

    def _remove(self, ifc: IpoibIf) -> None:
        try:
            self.daemon.sel.unregister(ifc.tun.fd)
        except (KeyError, ValueError):
            pass
        self.ifs.pop(ifc.name, None)
        self.daemon.sysfs.remove_net(ifc.name)
        ifc.close()

    def remove_device(self, dev) -> None:
        """The device is gone: the interfaces of all its ports."""
        for ifc in [i for i in self.ifs.values() if i.dev.hca is dev]:
            self._remove(ifc)
        for p in [p for p in self.sa if p.hca is dev]:
            del self.sa[p]

    def remove_port(self, port) -> None:
        """Port ``port`` of a device is gone (``rdma link delete NAME/N``): its interfaces."""
        for ifc in [i for i in self.ifs.values() if i.dev is port]:
            self._remove(ifc)
        self.sa.pop(port, None)

    def set_attr(self, name: str, attr: str, value: str) -> None:
        """``echo VALUE > /sys/class/net/NAME/ATTR`` for ``mode`` and
        ``umcast``; and connected mode's settings, softrdma's own:
        ``cm_tx_idle`` and ``cm_rx_idle`` (seconds an idle connection
        lives), ``cm_max_conn_qp`` (RX connections taken at most)."""
        ifc = self.ifs.get(name)
        if ifc is None:
            raise VerbsError(errno.ENODEV, f"no IPoIB interface {name!r}")
        if attr == "mode":
            if value not in ("datagram", "connected"):
                raise VerbsError(errno.EINVAL, f"mode {value!r}")
            if value == "connected" and ifc.mode != value:
                log.warning("%s: enabling connected mode will cause multicast packet drops", ifc.name)
            ifc.set_mode(value)
            self.write_sysfs(ifc)
            return
        if attr in ("cm_tx_idle", "cm_rx_idle", "cm_max_conn_qp"):
            try:
                ifc.cm.set(attr, value)
            except ValueError:
                raise VerbsError(errno.EINVAL, f"{attr} {value!r}") from None
            return
        if attr == "umcast":
            try:
                ifc.umcast = 1 if int(value, 0) else 0
            except ValueError:
                raise VerbsError(errno.EINVAL, f"umcast {value!r}") from None
            self.write_sysfs(ifc)
            return
        raise VerbsError(errno.EINVAL, f"{attr} is not writable")

    # -- rdma_cm's address resolution (``device.cma_route._ipoib_neigh``)
    def resolve(self, src_ip, dst_ip, waiter=None):
        """The IPoIB neighbour of ``dst_ip`` (an ipaddress) from ``src_ip``
        (or any address): (device, source address, the neighbour's GID) when
        known; PENDING when an interface has it on-link and is asking it
        (ARP, neighbour discovery: ``waiter(answer or None)`` follows, as
        rdma_resolve_addr waits for the kernel's neighbour); None when no
        IPoIB interface reaches it."""
        for ifc in self.ifs.values():
            if not ifc.up:
                continue
            src = ifc.source_for(dst_ip.packed, src_ip.packed if src_ip is not None else None)
            if src is None:
                continue
            n = ifc.table.neighs.get(dst_ip.packed)
            if n is not None and n.hw is not None:
                return ifc.dev, ipaddress.ip_address(src), n.hw[4:]
            if waiter is None:
                return None
            ifc.solicit_for(dst_ip.packed, lambda hw, ifc=ifc, src=src: waiter(
                None if hw is None else (ifc.dev, ipaddress.ip_address(src), hw[4:])), time.monotonic())
            return PENDING
        return None

    def device_of(self, ip):
        """The IB device whose IPoIB interface has address ``ip``, or None."""
        p = ip.packed
        for ifc in self.ifs.values():
            if any(a == p for a, _ in (ifc.addrs4 if len(p) == 4 else ifc.addrs6)):
                return ifc.dev
        return None

    # -- the loop's inputs
    def readable(self, ifc: IpoibIf) -> None:
        ifc.transmit(ifc.tun.read_all(), time.monotonic())

    def port_events(self, dev) -> None:
        """The port changed (state, LID, SM, P_Keys, reregister): each of its
        interfaces starts over when Active, drops its carrier otherwise."""
        now = time.monotonic()
        for ifc in self.ifs.values():
            if ifc.dev is dev:
                if dev.state == 4:
                    ifc.port_up(now)
                else:
                    ifc.port_down()
                self.write_sysfs(ifc)

    def netlink_changed(self, touched: set[int]) -> None:
        for ifc in self.ifs.values():
            if ifc.tun.index in touched or -1 in touched:
                self.refresh_addresses(ifc)

    def refresh_addresses(self, ifc: IpoibIf) -> None:
        try:
            v4, v6 = interface_addresses(ifc.tun.index)
        except Exception as e:                 # noqa: BLE001 -- no rtnetlink: the addresses stay as they were
            log.warning("%s: addresses: %s", ifc.name, e)
            return
        ifc.set_addresses(v4, v6)
        if ifc.up:
            ifc.next_poll = 0.0

    @property
    def deadline(self) -> float | None:
        """The interfaces' next timer (their SA requests' are the GSI's:
        every port's QP1 is ticked with its CM agent, ``RdmaCm.poll``)."""
        d = None
        for ifc in self.ifs.values():
            for x in (ifc.deadline, ifc.cm.deadline):
                if x is not None and (d is None or x < d):
                    d = x
        return d

    def tick(self, now: float) -> None:
        for ifc in self.ifs.values():
            d = ifc.deadline
            if d is not None and now >= d:
                ifc.tick(now)
            d = ifc.cm.deadline
            if d is not None and now >= d:
                ifc.cm.tick(now)

    # -- views
    def write_sysfs(self, ifc: IpoibIf) -> None:
        self.daemon.sysfs.set_net(ifc.name, {
            "address": w.format_hw_addr(ifc.hw), "broadcast": w.format_hw_addr(ifc.broadcast_hw),
            "mode": ifc.mode, "pkey": f"{ifc.pkey:#06x}", "umcast": str(ifc.umcast), "type": "32",
            "addr_len": "20", "mtu": str(ifc.tun.mtu), "carrier": "1" if ifc.tun.carrier else "0",
            "ifindex": str(ifc.tun.index), "dev_id": f"{ifc.qp_num >> 24:#x}", "dev_port": str(ifc.dev.num - 1),
            "create_child": "", "delete_child": ""})

    def refresh_sysfs(self) -> None:
        """Each second: apply what was written into the interfaces' files
        (``echo 0x8001 > .../ib0/create_child``, ``delete_child``, ``mode``,
        ``umcast``; a value refused is logged), then rewrite them."""
        t = self.daemon.sysfs
        for ifc in list(self.ifs.values()):
            for parts, text in t.writes_under(t.net_path(ifc.name)):
                self._sysfs_write(ifc, parts[0], text.strip())
        for ifc in self.ifs.values():
            self.write_sysfs(ifc)

    def _sysfs_write(self, ifc: IpoibIf, attr: str, value: str) -> None:
        try:
            if attr == "create_child":
                self.create_child(ifc.name, int(value, 0))
            elif attr == "delete_child":
                pkey = int(value, 0) | 0x8000
                child = next((i for i in self.ifs.values() if i.parent is ifc and i.pkey == pkey), None)
                if child is None:
                    raise VerbsError(errno.ENODEV, f"{ifc.name} has no child with P_Key {pkey:#06x}")
                self._remove(child)
            else:
                self.set_attr(ifc.name, attr, value)
        except (VerbsError, ValueError) as e:
            log.warning("%s/%s: %s", ifc.name, attr, e)

    def show(self, name: str | None = None) -> list[dict]:
        return [i.info() | {"neighbours": i.neighbours()} for i in self.ifs.values()
                if name is None or i.name == name]

    def close(self) -> None:
        for ifc in list(self.ifs.values()):
            self._remove(ifc)


__all__ = ["IpoibHost", "interface_addresses", "PENDING"]
