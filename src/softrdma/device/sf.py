"""Sub-functions (SFs) of a ConnectX-like PF, as mlx5's SF manager and
devlink/mlxdevm show them: ``port add pci/<bdf> flavour pcisf pfnum 0
sfnum N``, ``port function set ... hw_addr ... state active|inactive``,
``port del``, and the ports each PF has.

A PF may have as many SFs as its ``PF_TOTAL_SF`` (NV configuration, at the
last firmware boot; 0: "SF ports are not supported.").  An SF port is
added inactive (function state ``inactive``, opstate ``detached``), with
the hardware address 00:00:00:00:00:00 until one is set.  Activating it
makes the SF a device of its own: an RDMA device named as mlx5 names its
devices (the next free ``mlx5_<n>``) on the auxiliary device
``mlx5_core.sf.<id>`` (the PF's ``device/`` has a link of that name to the
SF's ``device/``, which holds the auxiliary device's ``sfnum`` and
``uevent``), on a netdev of its own -- a macvlan on the PF's netdev named
``<pf netdev>s<sfnum>`` (systemd's name for an SF's netdev,
``enp3s0f0s88``), made the way a VF's is (``device.sriov``'s
``add_function_device``) -- with the function's hardware address (a
random one while it is all zeros, as mlx5's SF driver picks).
Deactivating, or deleting the port of an active SF, takes the device and
its netdev away -- refused with EBUSY while the SF's device has open
contexts, as for a VF.

Port indexes are mlx5's: ``vhca_id << 16 | vport``, the uplink's vport
0xffff (the ``physical`` port), a VF's vport its number + 1, an SF's
0x8000 + its index in the PF's SF table (``pci/0000:5e:00.0/32768`` for
the first SF of ``mlx5_0``).  Errors carry mlx5's extack messages and
errnos (sf/devlink.c: EOPNOTSUPP for another flavour, a pfnum not the
PF's, a missing sfnum, an external controller; EEXIST for an sfnum in
use; ENOSPC when the table is full); an unknown device or port is ENODEV.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from ..errors import VerbsError
from .pci import FIRST_BUS, pf_bus
from .fnnetdev import (add_function_device, device_in_use, function_netdev_name, mac_str, parse_mac,
                       remove_function_device, set_function_mac)

SF_BASE = 0x8000                # the vport of a PF's first SF (mlx5's sf base id)
UPLINK_VPORT = 0xFFFF
ZERO_MAC = bytes(6)


def devlink_error(code: int, extack: str | None = None) -> VerbsError:
    """A devlink netlink error: the errno, and mlx5_core's extack message."""
    e = VerbsError(code, extack or os.strerror(code))
    e.extack = f"mlx5_core: {extack}" if extack else None
    return e


@dataclass
class Sf:
    pf: str                     # the PF device
    sfnum: int                  # the user's number
    id: int                     # its index in the PF's SF table
    port_index: int
    hw_addr: bytes = ZERO_MAC
    active: bool = False
    aux_id: int | None = None   # mlx5_core.sf.<aux_id> while active
    name: str | None = None     # its RDMA device while active
    netdev: str | None = None   # its netdev while active


class SubFunctions:
    """The SFs of the daemon's PFs (``Functions.sfs``)."""

    def __init__(self, functions):
        self.functions = functions
        self.daemon = functions.daemon
        self.by_pf: dict[str, list[Sf]] = {}
        self.of_device: dict[str, Sf] = {}          # an active SF's RDMA device -> the SF

    # -- lookups -------------------------------------------------------------

    @staticmethod
    def vhca_id(pf_name: str) -> int:
        return (pf_bus(pf_name) - FIRST_BUS) & 0xFF

    def handle(self, dev: str):
        """The PF of a devlink handle ``pci/<bdf>`` (ENODEV otherwise)."""
        bus, _, name = str(dev).partition("/")
        if bus == "pci":
            for pf in self.functions.pfs.values():
                if str(pf.fn.bdf) == name:
                    return pf
        raise devlink_error(errno.ENODEV)

    def port(self, dev: str, index: int):
        """(the PF, the SF) of port ``DEV/INDEX`` -- the SF None for the
        uplink's and the VFs' ports; ENODEV for no such port."""
        pf = self.handle(dev)
        for sf in self.by_pf.get(pf.name, []):
            if sf.port_index == index:
                return pf, sf
        if index in self._fixed_ports(pf):
            return pf, None
        raise devlink_error(errno.ENODEV)

    def _fixed_ports(self, pf) -> dict[int, dict]:
        """The uplink's and the VFs' ports, by index."""
        base = self.vhca_id(pf.name) << 16
        dev = self.daemon.devices.get(pf.name)
        out = {base | UPLINK_VPORT: {"type": "eth", "netdev": dev.netdev if dev is not None else None,
                                     "flavour": "physical", "port": 0, "splittable": False}}
        for vf in pf.vfs:
            out[base | (vf.index + 1)] = {"type": "eth", "flavour": "pcivf", "controller": 0, "pfnum": 0,
                                          "vfnum": vf.index, "external": False, "splittable": False,
                                          "function": {"hw_addr": mac_str(vf.mac)}}
        return out

    def ports(self, dev: str | None = None, index: int | None = None) -> list[dict]:
        """devlink's port objects: ``handle``, then the attributes in the
        order devlink prints them."""
        pfs = [self.handle(dev)] if dev is not None else sorted(self.functions.pfs.values(),
                                                                  key=lambda p: p.fn.bdf.rid)
        out = []
        for pf in pfs:
            rows = dict(self._fixed_ports(pf))
            for sf in self.by_pf.get(pf.name, []):
                rows[sf.port_index] = self.port_row(sf)
            for i in sorted(rows):
                if index is None or i == index:
                    out.append({"handle": f"pci/{pf.fn.bdf}/{i}", **rows[i]})
        if index is not None and not out:
            raise devlink_error(errno.ENODEV)
        return out

    def port_row(self, sf: Sf) -> dict:
        row = {"type": "eth"}
        if sf.netdev:
            row["netdev"] = sf.netdev
        row.update(flavour="pcisf", controller=0, pfnum=0, sfnum=sf.sfnum, external=False, splittable=False,
                   function={"hw_addr": mac_str(sf.hw_addr), "state": "active" if sf.active else "inactive",
                             "opstate": "attached" if sf.active else "detached"})
        return row

    def devs(self) -> list[str]:
        """devlink's instances: the PFs, and each active SF's auxiliary device."""
        out = [f"pci/{pf.fn.bdf}" for pf in sorted(self.functions.pfs.values(), key=lambda p: p.fn.bdf.rid)]
        out += sorted(f"auxiliary/mlx5_core.sf.{sf.aux_id}" for sf in self.of_device.values())
        return out

    def pf_of_device(self, name: str):
        sf = self.of_device.get(name)
        return self.functions.pfs.get(sf.pf) if sf is not None else None

    def reserved(self) -> set[str]:
        return set(self.of_device)

    # -- port add / function set / del ------------------------------------------

    def add(self, dev: str, flavour: str, pfnum: int, sfnum: int | None, controller: int | None,
            index: int | None = None) -> dict:
        """``port add DEV flavour pcisf pfnum N sfnum M`` (mlx5_devlink_sf_port_new)."""
        pf = self.handle(dev)
        if flavour != "pcisf":
            raise devlink_error(errno.EOPNOTSUPP, "Driver supports only SF port addition")
        if index is not None:
            raise devlink_error(errno.EOPNOTSUPP, "Driver does not support user defined port index assignment")
        if sfnum is None:
            raise devlink_error(errno.EOPNOTSUPP, "User must provide unique sfnum. Driver does not support"
                                                  " auto assignment")
        if controller:
            raise devlink_error(errno.EOPNOTSUPP, "External controller is unsupported")
        if pfnum != pf.fn.bdf.fn:
            raise devlink_error(errno.EOPNOTSUPP, "Invalid pfnum supplied")
        total = pf.nv.get_current("PF_TOTAL_SF")
        if not total:
            raise devlink_error(errno.EOPNOTSUPP, "SF ports are not supported.")
        table = self.by_pf.setdefault(pf.name, [])
        if any(s.sfnum == sfnum for s in table):
            raise devlink_error(errno.EEXIST, "SF already exist. Choose different sfnum")
        used = {s.id for s in table}
        free = [i for i in range(total) if i not in used]
        if not free:
            raise devlink_error(errno.ENOSPC)
        i = free[0]
        sf = Sf(pf.name, sfnum, i, self.vhca_id(pf.name) << 16 | (SF_BASE + i))
        table.append(sf)
        table.sort(key=lambda s: s.id)
        return {"handle": f"pci/{pf.fn.bdf}/{sf.port_index}", **self.port_row(sf)}

    def set(self, dev: str, index: int, hw_addr: str | None, state: str | None) -> None:
        """``port function set DEV/INDEX [hw_addr ADDR] [state active|inactive]``."""
        pf, sf = self.port(dev, index)
        if state not in (None, "active", "inactive"):
            raise devlink_error(errno.EINVAL)
        if sf is None:
            return self._set_fixed(pf, index, hw_addr, state)
        if hw_addr is not None:
            mac = parse_mac(hw_addr)
            if mac[0] & 1:      # devlink core's own check
                e = devlink_error(errno.EINVAL)
                e.extack = "Non-unicast hardware address unsupported"
                raise e
            sf.hw_addr = mac
            if sf.active:       # the e-switch's vport MAC: the SF's netdev follows
                set_function_mac(self.daemon, sf.name, sf.netdev, mac)
        if state == "active" and not sf.active:
            self._activate(sf)
        elif state == "inactive" and sf.active:
            self._deactivate(sf)

    def _set_fixed(self, pf, index: int, hw_addr: str | None, state: str | None) -> None:
        """Function attributes of the uplink's or a VF's port: a VF's
        hw_addr is its e-switch MAC (``ip link set <pf> vf N mac``); nothing
        else can be set (devlink core's messages)."""
        vport = index & 0xFFFF
        if vport == UPLINK_VPORT:
            e = devlink_error(errno.EOPNOTSUPP)
            e.extack = "Port doesn't support function attributes"
            raise e
        if state is not None:
            e = devlink_error(errno.EOPNOTSUPP)
            e.extack = "Function does not support state setting"
            raise e
        if hw_addr is not None:
            self.functions.set_vf(pf.name, vport - 1, {"mac": hw_addr})

    def delete(self, dev: str, index: int) -> None:
        """``port del DEV/INDEX``: an active SF is deactivated first (EBUSY in use)."""
        _, sf = self.port(dev, index)
        if sf is None:
            e = devlink_error(errno.EOPNOTSUPP)
            e.extack = "Port deletion is not supported"
            raise e
        if sf.active:
            self._deactivate(sf)
        self.by_pf[sf.pf].remove(sf)

    def _activate(self, sf: Sf) -> None:
        pf = self.functions.pfs[sf.pf]
        pfdev = self.daemon.devices[sf.pf]
        mac = sf.hw_addr
        if mac == ZERO_MAC:
            r = os.urandom(6)
            mac = bytes([r[0] & 0xFE | 0x02]) + r[1:]
        name = self.functions.free_name()
        netdev = function_netdev_name(pfdev.netdev, f"s{sf.sfnum}")
        used = {s.aux_id for s in self.of_device.values()}
        aux = next(k for k in range(len(self.functions.pfs), 1 << 16) if k not in used)
        sf.name, sf.netdev, sf.aux_id = name, netdev, aux
        self.of_device[name] = sf
        try:
            add_function_device(self.daemon, name, netdev, pfdev.netdev, mac)
        except BaseException:
            self.of_device.pop(name, None)
            sf.name = sf.netdev = sf.aux_id = None
            raise
        sf.active = True
        self._write(pf, sf)

    def _deactivate(self, sf: Sf) -> None:
        if device_in_use(self.daemon, sf.name):
            raise devlink_error(errno.EBUSY, "SF is in use (open contexts)")
        pf = self.functions.pfs[sf.pf]
        self.daemon.sysfs.remove(self.daemon.sysfs.device_path(pf.name) / "device" / f"mlx5_core.sf.{sf.aux_id}")
        remove_function_device(self.daemon, sf.name, sf.netdev)
        self.of_device.pop(sf.name, None)
        sf.active = False
        sf.name = sf.netdev = sf.aux_id = None

    def device_added(self, dev) -> None:
        """The SF's ``device/``: the auxiliary device's files."""
        sf = self.of_device[dev.name]
        tree = self.daemon.sysfs
        d = tree.device_path(dev.name) / "device"
        (d / "infiniband" / dev.name).mkdir(parents=True, exist_ok=True)
        tree.put(d / "sfnum", f"{sf.sfnum}\n")
        tree.put(d / "uevent", f"DRIVER=mlx5_core.sf\nMODALIAS=auxiliary:mlx5_core.sf\n")

    def _write(self, pf, sf: Sf) -> None:
        """The PF's ``device/mlx5_core.sf.<id>`` link to the SF's device."""
        link = self.daemon.sysfs.device_path(pf.name) / "device" / f"mlx5_core.sf.{sf.aux_id}"
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(os.path.join("..", "..", sf.name, "device"), link)

    def pf_busy(self, pf_name: str) -> int:
        """How many SF ports the PF has (a firmware reset waits for none)."""
        return len(self.by_pf.get(pf_name, []))

    def shutdown(self) -> None:
        for sf in self.of_device.values():
            remove_function_device(self.daemon, None, sf.netdev)


__all__ = ["Sf", "SubFunctions", "devlink_error"]
