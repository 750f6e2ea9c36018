"""PCI functions of the daemon's ConnectX-like devices: the PF's firmware
(NV configuration, flash), its SR-IOV virtual functions, and their
``device/`` and ``sriov/N/`` files in the sysfs tree.

``Functions`` is the daemon's one registry (``Daemon.pci``).  A device
named ``mlx5_*`` (``device.pci.presents_pci``) is a PF when it is added:
its NV store and flash are loaded from the run directory and *booted* --
next-boot values become current, the flash's firmware runs -- so a daemon
restart is a firmware reset, as a host reboot is for a real card.
``sriov_totalvfs`` is NUM_OF_VFS when SRIOV_EN was True at that boot; with
SRIOV_EN False the PF has no SR-IOV capability, and no sriov_* files.

Writing N to ``sriov_numvfs`` (``set_numvfs``; the kernel's
sriov_numvfs_store rules: EINVAL for what is not a number, ERANGE above
sriov_totalvfs, EBUSY when VFs exist and N is not 0, N equal to the
current count does nothing) creates N VFs.  Each VF is a device of its own
(the next free ``mlx5_<n>``) at the VF's bus address, on a netdev of its
own: a macvlan (bridge mode) on the PF's netdev with the VF's MAC, named
``<pf netdev>v<i>`` -- so it has its own MAC, addresses, GID table and
node GUID.  On an InfiniBand PF a VF shares the PF's port instead
(``device.ib_vf``): its GUIDs are what ``sriov/N/node`` and ``port`` were
given (0 until then), its LID the PF's (or its vport's).  Back to 0 destroys them and their macvlans; refused with EBUSY
while any VF has an open context (a VF assigned to a user cannot be pulled
away).

Per VF, as mlx5's e-switch and ``ip link set <pf> vf N ...``: ``mac`` (the
VF's MAC: the macvlan follows), ``trust``, ``spoofchk``, ``link_state``
(mlx5's ``policy``: Follow = the PF's port state, Up, Down).  A VF whose
spoof check is on and which is not trusted may send only from its
assigned MAC: once its netdev's MAC differs (``ip link set <vf netdev>
address ...``), everything it sends is dropped before the link and
counted (``spoof_drops``); a VF held Down by its policy drops its output
too (``Port.tx_blocked``).  ``max_tx_rate`` (Mbit/s) paces the VF's
link (``transport.faults``' rate).  ``vlan``/``qos`` put the VF on a VLAN
as mlx5's VST mode does (``device.vf_vlan``: tagged on the way out, only
its VLAN's frames in; 802.1ad is EPROTONOSUPPORT).  ``min_tx_rate`` (a
bandwidth guarantee) is EOPNOTSUPP, as on an e-switch without bandwidth
sharing; a min above a non-zero max is EINVAL.
"""

from __future__ import annotations

import copy
import errno
import logging
import os
from dataclasses import dataclass, field

from ..errors import VerbsError
from ..transport.faults import FaultSettings
from .firmware import Flash
from .fnnetdev import (_del_netdev, add_function_device, device_in_use, function_netdev_name, mac_str, parse_mac,
                       remove_function_device, set_function_mac)
from .gid import eui64
from .nvconfig import NvStore
from .pci import (CONNECTX5, PREFIX, PciFunction, device_attrs, pf_function, presents_pci, verbs_attrs,
                  write_device_dir)
from .resprofile import apply as apply_share, pool_of, shares
from .sysfs import guid_str
from . import vf_vlan, vpi
from .ib_vf import IbVf, Vports, guid_colons, parse_guid

log = logging.getLogger("softrdmad")

POLICIES = ("Down", "Up", "Follow")
PORT_ACTIVE, PORT_DOWN = 4, 1
ZERO_MAC = bytes(6)


@dataclass
class Vf:
    """One VF's e-switch settings (``ip link set <pf> vf N ...``) and its device."""
    index: int
    name: str                       # its RDMA device
    netdev: str                     # its macvlan
    mac: bytes                      # the assigned MAC
    trust: bool = False
    spoofchk: bool = False          # mlx5's default: off
    policy: str = "Follow"
    max_tx_rate: int = 0            # Mbit/s, 0: no limit
    vlan: int = 0                   # VST: the VLAN its frames are tagged with (0 and qos 0: untagged)
    qos: int = 0                    # ... and their PCP
    spoof_drops: int = 0            # packets dropped by the spoof check (and policy Down), VF lifetime
    node_guid: int = 0              # an IB VF's sriov/N/node and port (0 until written)
    port_guid: int = 0


@dataclass
class Pf:
    name: str
    fn: PciFunction
    nv: NvStore
    flash: Flash
    vfs: list = field(default_factory=list)     # Vf, by index
    pool: dict | None = None                    # the card's RDMA objects (device.resprofile), from its first boot
    pf_share: dict = field(default_factory=dict)    # the PF's share of them
    fn_share: dict = field(default_factory=dict)    # each VF's and SF's


def vf_netdev_name(pf_netdev: str, i: int) -> str:
    return function_netdev_name(pf_netdev, f"v{i}")


class Functions:
    """The daemon's PCI functions: PFs by device name, and each VF's PF."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.pfs: dict[str, Pf] = {}
        self.vf_of: dict[str, tuple[Pf, Vf]] = {}       # VF device name -> (its PF, the VF)
        self.run_dir = daemon.run_dir
        from .sf import SubFunctions
        self.sfs = SubFunctions(self)

    # -- devices coming and going ------------------------------------------------

    def function(self, name: str) -> PciFunction | None:
        if name in self.pfs:
            return self.pfs[name].fn
        if name in self.vf_of:
            pf, vf = self.vf_of[name]
            fn = PciFunction(pf.fn.vf_bdf(vf.index), pf.fn.model, vf.index, pf.name,
                             pf.fn.fw_version, pf.fn.psid)
            return fn
        pf = self.sfs.pf_of_device(name)
        if pf is not None:          # an SF: an mlx5 function on its PF's PCI function
            return PciFunction(pf.fn.bdf, pf.fn.model, None, pf.name, pf.fn.fw_version, pf.fn.psid)
        return None

    def device_attrs(self, dev) -> dict:
        """The PCI part of ``dev``'s sysfs attributes (empty for an rxe
        device); a new ``mlx5_*`` device boots as a PF here."""
        if dev.name not in self.vf_of and dev.name not in self.sfs.of_device and presents_pci(dev.name):
            pf = self.pfs.get(dev.name) or self._boot_pf(dev.name)
            if pf.pool is None:         # (a PF booted by boot_device has no pool until its device is added)
                pf.pool = pool_of(dev.caps)
                self._apply_profile(pf)
        self._apply_share(dev)
        fn = self.function(dev.name)
        return device_attrs(fn) if fn is not None else {}

    def _boot_pf(self, name: str) -> Pf:
        model = CONNECTX5
        nv = NvStore(os.path.join(self.run_dir, "nvconfig", f"{name}.json"), model.max_vfs)
        flash = Flash(os.path.join(self.run_dir, "firmware", f"{name}.json"), version=model.fw_version,
                      psid=model.psid, date=model.fw_release_date)
        nv.boot()
        flash.boot()
        fn = pf_function(name, model)
        pf = Pf(name, fn, nv, flash)
        self._apply_boot(pf)
        self.pfs[name] = pf
        return pf

    @staticmethod
    def _apply_boot(pf: Pf) -> None:
        pf.fn.fw_version = pf.flash.running
        pf.fn.psid = pf.flash.psid
        pf.fn.total_vfs = pf.nv.get_current("NUM_OF_VFS") if pf.nv.get_current("SRIOV_EN") else 0

    def _apply_profile(self, pf: Pf) -> None:
        """The resource profile booted with: the PF's and each VF's and
        SF's share of the card's pool; the PF's device takes its own."""
        others = pf.fn.total_vfs + pf.nv.get_current("PF_TOTAL_SF")
        pf.pf_share, pf.fn_share = shares(pf.nv.get_current("RDMA_RESOURCE_PROFILE"), pf.pool, others)
        dev = self.daemon.devices.get(pf.name)
        if dev is not None:
            apply_share(dev.caps, pf.pf_share)

    def _apply_share(self, dev) -> None:
        """A new VF's or SF's device: its limits are its share."""
        pf = self.vf_of[dev.name][0] if dev.name in self.vf_of else self.sfs.pf_of_device(dev.name)
        if pf is not None and pf.pool is not None:
            apply_share(dev.caps, pf.fn_share)

    def verbs_attrs(self, name: str) -> dict:
        """What ibv_query_device reports beyond rxe's for this device."""
        fn = self.function(name)
        return verbs_attrs(fn) if fn is not None else {}

    def device_added(self, dev) -> None:
        """Write ``dev``'s device/ files (after the tree has its directory).
        A PF's port is what it was attached as: its LINK_TYPE says so
        (``rdma link add`` is the card configured that way), and its cable
        of that kind is recorded (``device.vpi``)."""
        fn = self.function(dev.name)
        if fn is None:
            return
        if dev.name in self.sfs.of_device:
            self.sfs.device_added(dev)
            return
        if fn.is_vf:
            write_device_dir(self.daemon.sysfs, dev.name, fn, 0, link_layer=_link_layer(dev))
            return
        pf = self.pfs[dev.name]
        param = vpi.link_type_param(1)
        if pf.nv.get_current(param) != vpi.kind_of(dev):
            pf.nv.force(param, vpi.kind_of(dev))
        pf.nv.set_cable(1, *vpi.cable_of(dev))
        self.write_pf(pf)

    def boot_device(self, dev):
        """The daemon starting with ``dev``: a PF's firmware boots, and its
        port comes up as LINK_TYPE_P1 says -- ``dev`` itself, or the same
        device built as the other kind on the port's cable of that kind (no
        such cable: ``dev``, and a warning)."""
        if not presents_pci(dev.name) or dev.name in self.vf_of:
            return dev
        pf = self.pfs.get(dev.name) or self._boot_pf(dev.name)
        want = pf.nv.get_current(vpi.link_type_param(1))
        if want == vpi.kind_of(dev):
            return dev
        try:
            new = vpi.build(dev.name, want, pf.nv.cable(1, vpi.KINDS[want]), self.daemon.udp_port)
        except VerbsError as e:
            log.warning("%s: LINK_TYPE_P1 is %s but the port stays %s: %s", dev.name, vpi.KINDS[want].upper(),
                        vpi.KINDS[vpi.kind_of(dev)].upper(), e.strerror)
            pf.nv.force(vpi.link_type_param(1), vpi.kind_of(dev), next_too=False)
            return dev
        dev.close()
        return new

    def write_pf(self, pf: Pf) -> None:
        tree = self.daemon.sysfs
        d = tree.device_path(pf.name) / "device"
        ll = _link_layer(self.daemon.devices.get(pf.name))
        if not pf.fn.total_vfs and not pf.nv.get_current("SRIOV_EN"):
            write_device_dir(tree, pf.name, pf.fn, len(pf.vfs), sriov=False, link_layer=ll)
        else:
            write_device_dir(tree, pf.name, pf.fn, len(pf.vfs), link_layer=ll)
        s = d / "sriov"
        if s.is_dir():                  # VFs gone: their directories (the others are rewritten in place)
            for entry in s.iterdir():
                if not (entry.name.isdigit() and int(entry.name) < len(pf.vfs)):
                    tree.remove(entry)
        for vf in pf.vfs:
            self.write_vf(pf, vf)

    def write_vf(self, pf: Pf, vf: Vf) -> None:
        """mlx5's sriov/<N>/ files: node, port, policy (readable), the
        e-switch files whose read is a usage line, config and stats."""
        tree = self.daemon.sysfs
        d = tree.device_path(pf.name) / "device" / "sriov" / str(vf.index)
        d.mkdir(parents=True, exist_ok=True)
        dev = self.daemon.devices.get(vf.name)
        mac = dev.mac if dev is not None else vf.mac
        guid = guid_str(eui64(mac)).replace(":", "")
        colon = ":".join(guid[i:i + 2] for i in range(0, 16, 2))
        put = tree.put
        if not vf.netdev:                       # an IB VF: the GUIDs written to it (0 until then)
            put(d / "node", f"{guid_colons(vf.node_guid)}\n", 0o644)
            put(d / "port", f"{guid_colons(vf.port_guid)}\n", 0o644)
        else:
            put(d / "node", f"{colon}\n", 0o644)
            put(d / "port", f"{colon}\n", 0o644)
        put(d / "policy", f"{vf.policy}\n", 0o644)
        put(d / "mac", "usage: write <LLADDR|Random> to set VF Mac Address\n", 0o644)
        put(d / "vlan", "usage: write <Vlan:Qos[:Proto]> to set VF Vlan, Qos, and optionally Vlan Protocol"
                        " (default 802.1Q)\n", 0o644)
        put(d / "spoofcheck", "usage: write <ON|OFF> to enable|disable VF SpoofCheck\n", 0o644)
        put(d / "trust", "usage: write <ON|OFF> to trust|untrust VF\n", 0o644)
        put(d / "link_state", "usage: write <Up|Down|Follow> to set VF State\n", 0o644)
        put(d / "max_tx_rate", "usage: write <Rate (Mbit/s)> to set VF max rate\n", 0o644)
        put(d / "min_tx_rate", "usage: write <Rate (Mbit/s)> to set VF min rate\n", 0o644)
        put(d / "config", "".join((
            f"VF         : {vf.index}\n", f"MAC        : {mac_str(vf.mac)}\n", f"VLAN       : {vf.vlan}\n",
            f"QoS        : {vf.qos}\n", f"VLAN Proto : {'802.1Q' if vf.vlan or vf.qos else 'N/A'}\n",
            f"SpoofCheck : {'ON' if vf.spoofchk else 'OFF'}\n",
            f"Trust      : {'ON' if vf.trust else 'OFF'}\n", f"LinkState  : {vf.policy}\n",
            "MinTxRate  : 0\n", f"MaxTxRate  : {vf.max_tx_rate}\n", "VGT+       : OFF\n")))
        self._write_stats(d, vf)

    def _write_stats(self, d, vf: Vf) -> None:
        """sriov/N/stats as mlx5's stats_show prints the e-switch's view."""
        st = self.vf_stats(vf)
        rows = (("tx_packets", st["tx_packets"]), ("tx_bytes", st["tx_bytes"]), ("tx_dropped", st["tx_dropped"]),
                ("rx_packets", st["rx_packets"]), ("rx_bytes", st["rx_bytes"]), ("rx_broadcast", st["broadcast"]),
                ("rx_multicast", st["multicast"]), ("tx_broadcast", 0), ("tx_multicast", 0),
                ("rx_dropped", st["rx_dropped"]))
        self.daemon.sysfs.put(d / "stats", "".join(f"{k:<14}: {v}\n" for k, v in rows))

    def device_removed(self, name: str) -> None:
        self.pfs.pop(name, None)

    def check_delete(self, name: str) -> None:
        """``rdma link delete``: a VF goes only through sriov_numvfs, an SF
        through its mlxdevm port, a PF only without VFs (EBUSY)."""
        if name in self.vf_of:
            raise VerbsError(errno.EBUSY, f"{name} is a virtual function: set its PF's sriov_numvfs to 0")
        if name in self.sfs.of_device:
            raise VerbsError(errno.EBUSY, f"{name} is a sub-function: deactivate or delete its mlxdevm port")
        pf = self.pfs.get(name)
        if pf is not None and pf.vfs:
            raise VerbsError(errno.EBUSY, f"{name} has {len(pf.vfs)} VFs enabled: set sriov_numvfs to 0 first")

    # -- what the tools ask ------------------------------------------------------

    def pf_of(self, name: str) -> Pf:
        """The PF named ``name`` (ENODEV if it is not one)."""
        pf = self.pfs.get(name)
        if pf is None:
            if name in self.vf_of:
                raise VerbsError(errno.EOPNOTSUPP, f"{name} is a virtual function: its PF holds the configuration")
            raise VerbsError(errno.ENODEV, f"no ConnectX device {name!r}")
        return pf

    def describe(self) -> list[dict]:
        """Every function, PFs in bus order, each PF's VFs after it."""
        out = []
        for pf in sorted(self.pfs.values(), key=lambda p: p.fn.bdf.rid):
            dev = self.daemon.devices.get(pf.name)
            out.append(self._row(pf.name, pf.fn, dev, pf))
            for vf in pf.vfs:
                out.append(self._row(vf.name, self.function(vf.name), self.daemon.devices.get(vf.name), pf, vf))
        return out

    def _row(self, name, fn: PciFunction, dev, pf: Pf, vf: Vf | None = None) -> dict:
        mac = dev.mac if dev is not None else ZERO_MAC
        node_guid = dev.node_guid if dev is not None else eui64(mac)
        row = {"name": name, "bdf": str(fn.bdf), "short": fn.bdf.short, "vf": fn.vf_index, "pf": pf.name,
               "model": fn.model.name, "part_id": fn.part_id, "part_name": fn.model.part_name,
               "description": fn.model.description, "device_id": fn.device_id,
               "netdev": dev.netdev if dev is not None else None,
               "node_guid": guid_str(node_guid), "mac": mac_str(mac),
               "fw_version": pf.flash.version, "fw_running": pf.flash.running, "fw_date": pf.flash.date,
               "psid": pf.flash.psid, "numvfs": len(pf.vfs), "totalvfs": pf.fn.total_vfs,
               "link_layer": _link_layer(dev), "link_types": {p: pf.nv.get_current(vpi.link_type_param(p))
                                                              for p in (1, 2)}}
        if vf is not None:
            row.update(vf_mac=mac_str(vf.mac), trust=vf.trust, spoofchk=vf.spoofchk, policy=vf.policy,
                       stats=self.vf_stats(vf), state=dev.state if dev is not None else PORT_DOWN)
        else:
            row["vfs"] = [{"vf": v.index, "name": v.name, "mac": mac_str(v.mac), "trust": v.trust,
                           "spoofchk": v.spoofchk, "policy": v.policy, "max_tx_rate": v.max_tx_rate,
                           "min_tx_rate": 0, "vlan": v.vlan, "qos": v.qos, "stats": self.vf_stats(v)} for v in pf.vfs]
        return row

    def vf_stats(self, vf: Vf) -> dict:
        """The VF's counters as the PF sees them (ip -s link's vf lines)."""
        dev = self.daemon.devices.get(vf.name)
        t = dev.traffic if dev is not None else {}
        drops = vf.spoof_drops + (dev.tx_blocked_drops if dev is not None else 0)
        return {"rx_packets": t.get("rx_packets", 0), "tx_packets": t.get("tx_packets", 0),
                "rx_bytes": t.get("rx_bytes", 0), "tx_bytes": t.get("tx_bytes", 0),
                "broadcast": 0, "multicast": 0, "rx_dropped": 0, "tx_dropped": drops}

    # -- NV configuration and firmware ----------------------------------------

    def fw_reset(self, name: str) -> dict:
        """mlxfwreset: refused (EBUSY) while the PF has VFs or any context
        is open on it; else the firmware boots again: NV next-boot values
        and the flash's firmware take effect."""
        pf = self.pf_of(name)
        if pf.vfs:
            raise VerbsError(errno.EBUSY, f"{name} has {len(pf.vfs)} VFs enabled: set sriov_numvfs to 0 first")
        if self.sfs.pf_busy(name):
            raise VerbsError(errno.EBUSY, f"{name} has {self.sfs.pf_busy(name)} SF ports: delete them first")
        dev = self.daemon.devices.get(name)
        if dev is not None and device_in_use(self.daemon, name):
            raise VerbsError(errno.EBUSY, f"{name} is in use (open contexts)")
        new = None
        want = pf.nv.get_next(vpi.link_type_param(1))
        if dev is not None and want != vpi.kind_of(dev):            # checked before anything boots
            new = vpi.build(name, want, pf.nv.cable(1, vpi.KINDS[want]), self.daemon.udp_port)
        nv_changed = pf.nv.boot()
        fw_changed = pf.flash.boot()
        self._apply_boot(pf)
        if new is not None:                 # the port comes up as the other kind: the same PF, rebuilt
            from .commands.link import remove_device
            remove_device(self.daemon, dev)
            self.pfs[name] = pf
            self.daemon.add_device(new)
        elif dev is not None:
            tree = self.daemon.sysfs
            for k, v in device_attrs(pf.fn).items():
                if v is not None:               # (None: a file mlx5 does not have, e.g. rxe's parent)
                    tree.put(tree.device_path(name) / k, f"{v}\n")
        self._apply_profile(pf)             # (after a rebuild: the new device takes the PF's share)
        self.write_pf(pf)
        return {"nv_changed": nv_changed, "fw_changed": fw_changed, "totalvfs": pf.fn.total_vfs,
                "fw_running": pf.flash.running, "link_layer": _link_layer(self.daemon.devices.get(name))}

    # -- SR-IOV ------------------------------------------------------------------

    def set_numvfs(self, name: str, text) -> None:
        pf = self.pf_of(name)
        if not pf.nv.get_current("SRIOV_EN"):
            raise VerbsError(errno.ENOENT, f"{name}: no SR-IOV capability (SRIOV_EN is False: set it with"
                                           f" mlxconfig, then reset the firmware)")
        try:
            n = int(str(text).strip(), 10)
        except ValueError:
            raise VerbsError(errno.EINVAL, f"sriov_numvfs: {text!r} is not a number") from None
        if n < 0:
            raise VerbsError(errno.EINVAL, f"sriov_numvfs: {text!r} is not a number")
        if n > 0xFFFF:
            raise VerbsError(errno.ERANGE, f"sriov_numvfs: {n} is out of range")
        if n > pf.fn.total_vfs:
            raise VerbsError(errno.ERANGE, f"{pf.fn.bdf}: {n} VFs requested; only {pf.fn.total_vfs} supported")
        if n == len(pf.vfs):
            return
        if n == 0:
            self._disable(pf)
            return
        if pf.vfs:
            raise VerbsError(errno.EBUSY, f"{pf.fn.bdf}: {len(pf.vfs)} VFs already enabled. Disable before"
                                          f" enabling {n} VFs")
        self._enable(pf, n)

    def _enable(self, pf: Pf, n: int) -> None:
        daemon = self.daemon
        pfdev = daemon.devices[pf.name]
        made: list[Vf] = []
        try:
            for i in range(n):
                name = self.free_name()
                if pfdev.link_layer == vpi.LINK_LAYER_IB:       # a VF on the PF's IB port (device.ib_vf)
                    vf = Vf(i, name, "", ZERO_MAC)
                    made.append(vf)
                    self.vf_of[name] = (pf, vf)
                    pf.vfs.append(vf)
                    if pfdev.vports is None:
                        pfdev.vports = Vports(pfdev)
                    dev = IbVf(name, pfdev, vf)
                    daemon.add_device(dev)
                    pfdev.vports.add(dev)
                    continue
                netdev = vf_netdev_name(pfdev.netdev, i)
                mac = bytes([0x02]) + pfdev.mac[2:6] + bytes([(i + 1) & 0xFF])
                vf = Vf(i, name, netdev, mac)
                made.append(vf)
                self.vf_of[name] = (pf, vf)
                pf.vfs.append(vf)
                add_function_device(daemon, name, netdev, pfdev.netdev, mac)
                self.apply_state(pf, vf)
        except BaseException:
            for vf in reversed(made):
                self._remove_vf(pf, vf)
            self.write_pf(pf)
            raise
        pf.fn.vfs = [v.name for v in pf.vfs]
        self.write_pf(pf)

    def free_name(self) -> str:
        """The next free ``mlx5_<n>`` (mlx5 names every function's device so)."""
        used = set(self.daemon.devices) | set(self.vf_of) | self.sfs.reserved()
        return next(f"{PREFIX}{k}" for k in range(1 << 16) if f"{PREFIX}{k}" not in used)

    def _disable(self, pf: Pf) -> None:
        busy = [vf.name for vf in pf.vfs if device_in_use(self.daemon, vf.name)]
        if busy:
            raise VerbsError(errno.EBUSY, f"{pf.fn.bdf}: VFs in use: {', '.join(busy)}")
        for vf in reversed(list(pf.vfs)):
            self._remove_vf(pf, vf)
        pf.fn.vfs = []
        self.write_pf(pf)

    def _remove_vf(self, pf: Pf, vf: Vf) -> None:
        dev = self.daemon.devices.get(vf.name)
        remove_function_device(self.daemon, vf.name, vf.netdev)     # (an IB VF has no netdev)
        self.vf_of.pop(vf.name, None)
        if vf in pf.vfs:
            pf.vfs.remove(vf)
        pfdev = self.daemon.devices.get(pf.name)
        if dev is not None and getattr(pfdev, "vports", None) is not None:
            pfdev.vports.remove(dev)

    #: the sriov/N/ files whose writes the daemon takes, and the setting each is
    TREE_FILES = {"policy": "policy", "link_state": "state", "trust": "trust", "spoofcheck": "spoofchk",
                  "mac": "mac", "max_tx_rate": "max_tx_rate", "min_tx_rate": "min_tx_rate", "node": "node",
                  "port": "port", "vlan": "vlan_file"}

    def refresh(self) -> None:
        """Once a second: the VFs' stats files, and what was written into a
        PF's ``sriov_numvfs`` and ``sriov/N/`` files in the tree (``echo 4
        > .../sriov_numvfs``) applied -- a value the kernel would refuse is
        logged with its errno, and the files show the state in force."""
        tree = self.daemon.sysfs
        for pf in list(self.pfs.values()):
            d = tree.device_path(pf.name) / "device"
            for vf in pf.vfs:
                self._write_stats(d / "sriov" / str(vf.index), vf)
            writes = tree.writes_under(d)
            for parts, text in writes:
                try:
                    if parts in (["sriov_numvfs"], ["mlx5_num_vfs"]):      # (mlx5's older name)
                        self.set_numvfs(pf.name, text)
                    elif len(parts) == 3 and parts[0] == "sriov" and parts[2] in self.TREE_FILES:
                        value = text.strip()
                        if parts[2] in ("trust", "spoofcheck") and value not in ("ON", "OFF"):
                            raise VerbsError(errno.EINVAL, f"{parts[2]}: expected ON or OFF")
                        self.set_vf(pf.name, int(parts[1]), {self.TREE_FILES[parts[2]]: value})
                    else:
                        raise VerbsError(errno.EACCES, "not a writable file")
                except VerbsError as e:
                    log.warning("%s: write to device/%s refused: %s (%s)", pf.name, "/".join(parts),
                                e.strerror, errno.errorcode.get(e.errno, e.errno))
            if writes and pf.name in self.pfs:
                self.write_pf(pf)
            vports = getattr(self.daemon.devices.get(pf.name), "vports", None)
            if vports is not None:
                vports.changed()                # (a lost fabric link: the VFs follow)
                vports.poll()                   # (what the SM made of the vports)

    def shutdown(self) -> None:
        """The daemon is stopping: the VFs' macvlans go with it (their
        devices go with the daemon's)."""
        for pf in self.pfs.values():
            for vf in pf.vfs:
                _del_netdev(vf.netdev)
        self.sfs.shutdown()

    def vf(self, name: str, index: int) -> tuple[Pf, Vf]:
        pf = self.pf_of(name)
        if not 0 <= index < len(pf.vfs):
            raise VerbsError(errno.EINVAL, f"{name} has no VF {index}")
        return pf, pf.vfs[index]

    def set_vf(self, name: str, index: int, changes: dict) -> None:
        """``ip link set <pf> vf N ...`` / the sriov/N/ files."""
        pf, vf = self.vf(name, index)
        changes = dict(changes)
        if "vlan_file" in changes:                      # sriov/N/vlan: Vlan:Qos[:Proto]
            changes["vlan"], changes["qos"] = vf_vlan.parse_file(changes.pop("vlan_file"))
        if "qos" in changes and "vlan" not in changes:
            raise VerbsError(errno.EINVAL, "qos is set with a vlan")
        if "vlan" in changes:
            vlan, qos = vf_vlan.check(changes.pop("vlan"), changes.pop("qos", 0), changes.pop("proto", "802.1Q"))
            if not vf.netdev:
                raise VerbsError(errno.EOPNOTSUPP, "an InfiniBand VF has no VLAN")
            self._check_rates(vf, changes)
            self._set_vlan(vf, vlan, qos)
        elif "proto" in changes:
            raise VerbsError(errno.EINVAL, "proto is set with a vlan")
        else:
            self._check_rates(vf, changes)
        for key, value in changes.items():
            if key == "mac":
                if str(value) == "Random":             # eth_random_addr: unicast, locally administered
                    mac = os.urandom(6)
                    mac = bytes([mac[0] & 0xFE | 0x02]) + mac[1:]
                else:
                    mac = parse_mac(value)
                if mac[0] & 1:
                    raise VerbsError(errno.EINVAL, f"{mac_str(mac)} is a multicast address")
                vf.mac = mac
                set_function_mac(self.daemon, vf.name, vf.netdev, mac)
            elif key in ("trust", "spoofchk"):
                setattr(vf, key, _on_off(value))
            elif key in ("policy", "state", "link_state"):
                vf.policy = _policy(value)
            elif key in ("rate", "max_tx_rate"):
                try:
                    vf.max_tx_rate = int(str(value).strip(), 0)
                    if not 0 <= vf.max_tx_rate <= 0xFFFFFFFF:
                        raise ValueError
                except ValueError:
                    raise VerbsError(errno.EINVAL, f"bad rate {value!r} (Mbit/s)") from None
                self._apply_rate(vf)
            elif key in ("node", "port"):
                if vf.netdev:
                    raise VerbsError(errno.EOPNOTSUPP, f"VF {key} GUIDs are an InfiniBand VF's")
                setattr(vf, f"{key}_guid", parse_guid(value))
            elif key == "min_tx_rate":
                pass                                    # (0: _check_rates refused any other)
            else:
                raise VerbsError(errno.EINVAL, f"no VF setting {key!r}")
        self.apply_state(pf, vf)
        self.write_pf(pf)

    @staticmethod
    def _check_rates(vf: Vf, changes: dict) -> None:
        """max_tx_rate and min_tx_rate as the kernel checks them: a min
        above a non-zero max is EINVAL; a min rate (a share of the PF's
        bandwidth guaranteed to the VF) is EOPNOTSUPP, as mlx5 answers
        where the e-switch has no bandwidth share (esw_bw_share)."""
        rates = {}
        for key in ("max_tx_rate", "rate", "min_tx_rate"):
            if key in changes:
                try:
                    rates[key] = int(str(changes[key]).strip(), 0)
                    if not 0 <= rates[key] <= 0xFFFFFFFF:
                        raise ValueError
                except ValueError:
                    raise VerbsError(errno.EINVAL, f"bad rate {changes[key]!r} (Mbit/s)") from None
        low = rates.get("min_tx_rate", 0)
        high = rates.get("max_tx_rate", rates.get("rate", vf.max_tx_rate))
        if high and low > high:
            raise VerbsError(errno.EINVAL, f"min_tx_rate {low} is above max_tx_rate {high}")
        if low:
            raise VerbsError(errno.EOPNOTSUPP, "VF min_tx_rate (a bandwidth guarantee) is not supported")

    def _set_vlan(self, vf: Vf, vlan: int, qos: int) -> None:
        """VST: the VF's port tagged (``device.vf_vlan``) and its same-daemon
        routes checked again."""
        vf_vlan.tag(vf.netdev, vlan, qos)
        vf.vlan, vf.qos = vlan, qos
        dev = self.daemon.devices.get(vf.name)
        if dev is not None:
            dev.eswitch_vlan = vf_vlan.eswitch_vlan(self.vf_of[vf.name][0].name, vlan, qos)
            self.daemon.topology_changed()

    def _apply_rate(self, vf: Vf) -> None:
        """max_tx_rate: the VF's link paced at that many Mbit/s (the link's
        ``faults`` rate, other fault settings kept)."""
        dev = self.daemon.devices.get(vf.name)
        if dev is None:
            return
        settings = copy.copy(dev.faults.settings) if dev.faults is not None else FaultSettings()
        settings.rate = vf.max_tx_rate * 125_000.0
        dev.set_faults(settings)

    def vf_rate(self, name: str) -> float:
        """The rate (bytes/s) a VF device's link keeps when its faults are
        set again (``rdma link set ... faults``), 0 for any other device."""
        if name in self.vf_of:
            return self.vf_of[name][1].max_tx_rate * 125_000.0
        return 0.0

    def apply_state(self, pf: Pf, vf: Vf) -> None:
        """After a VF setting changed: whether its output is dropped, and
        its port state (through the daemon's netdev refresh, which asks
        ``port_state``)."""
        dev = self.daemon.devices.get(vf.name)
        if dev is None:
            return
        if not vf.netdev:                       # an IB VF follows the PF's port (device.ib_vf)
            if dev.pf_dev.vports is not None:
                dev.pf_dev.vports.changed()
            return
        self._update_blocked(vf, dev)
        self.daemon.refresh_netdev(dev)

    def _update_blocked(self, vf: Vf, dev) -> None:
        """Policy Down, or a spoof check the VF's current MAC fails: its
        output is dropped (``Port.tx_blocked``) and counted; policy Down
        also keeps the daemon's other devices' packets from it
        (``Port.rx_blocked``)."""
        spoofed = vf.spoofchk and not vf.trust and dev.mac != vf.mac
        blocked = "spoof check" if spoofed else ("policy Down" if vf.policy == "Down" else None)
        dev.rx_blocked = vf.policy == "Down"
        if blocked != dev.tx_blocked:
            vf.spoof_drops += dev.tx_blocked_drops
            dev.tx_blocked_drops = 0
            dev.tx_blocked = blocked
            dev.route_cache.clear()
            self.daemon.topology_changed()

    def port_state(self, dev, link_state: int) -> int:
        """The state ``dev``'s port takes when its netdev says
        ``link_state``: a VF's follows its policy (Follow: the PF's port,
        while its own netdev is up)."""
        if dev.name not in self.vf_of:
            return link_state
        pf, vf = self.vf_of[dev.name]
        if vf.policy == "Down":
            return PORT_DOWN
        if vf.policy == "Up":
            return PORT_ACTIVE
        pfdev = self.daemon.devices.get(pf.name)
        return pfdev.state if pfdev is not None and link_state == PORT_ACTIVE else PORT_DOWN

    def netdev_changed(self, dev) -> None:
        """``dev``'s netdev changed (MAC, state; the daemon refreshed it):
        a VF is checked again, a PF's VFs that follow it follow."""
        if dev.name in self.vf_of:
            vf = self.vf_of[dev.name][1]
            self._update_blocked(vf, dev)
            if vf.netdev:
                vf_vlan.bind_sockets(dev, vf.netdev)        # (and those opened for new addresses)
        elif dev.name in self.pfs:
            for vf in self.pfs[dev.name].vfs:
                vdev = self.daemon.devices.get(vf.name)
                if vdev is not None:
                    self.daemon.refresh_netdev(vdev)


def _link_layer(dev) -> str:
    return "InfiniBand" if dev is not None and dev.link_layer == vpi.LINK_LAYER_IB else "Ethernet"


def _on_off(v) -> bool:
    t = str(v).strip().lower()
    if t in ("on", "1", "true"):
        return True
    if t in ("off", "0", "false"):
        return False
    raise VerbsError(errno.EINVAL, f"expected on or off, not {v!r}")


def _policy(v) -> str:
    t = str(v).strip().lower()
    names = {"auto": "Follow", "enable": "Up", "disable": "Down", **{p.lower(): p for p in POLICIES}}
    if t not in names:
        raise VerbsError(errno.EINVAL, f"expected Up, Down or Follow (auto, enable, disable), not {v!r}")
    return names[t]


__all__ = ["Functions", "Pf", "Vf", "POLICIES", "add_function_device", "device_in_use", "mac_str", "parse_mac",
           "remove_function_device", "set_function_mac"]
