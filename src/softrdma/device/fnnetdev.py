"""The netdev and the RDMA device of a VF or an SF of a ConnectX-like PF
(``device.sriov``, ``device.sf``): a macvlan (bridge mode) on the PF's
netdev with the function's MAC, so the function has its own MAC,
addresses, GID table and node GUID, and a device on it made as ``rdma link
add`` makes one; and whether a function's device is in use (open
contexts: EBUSY for whatever would pull it away).
"""

from __future__ import annotations

import errno
import logging
import os

from ..errors import VerbsError

log = logging.getLogger("softrdmad")


def mac_str(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def parse_mac(text: str) -> bytes:
    parts = str(text).strip().split(":")
    if len(parts) != 6 or not all(len(p) in (1, 2) for p in parts):
        raise VerbsError(errno.EINVAL, f"bad MAC address {text!r}")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise VerbsError(errno.EINVAL, f"bad MAC address {text!r}") from None


def function_netdev_name(pf_netdev: str, suffix: str) -> str:
    """A function's netdev: the PF's name and ``suffix`` (``v0``, ``s88``),
    the PF's part cut to fit IFNAMSIZ."""
    return pf_netdev[:15 - len(suffix)] + suffix


def add_function_device(daemon, name: str, netdev: str, lower: str, mac: bytes):
    """A VF's or SF's RDMA device ``name`` on a netdev of its own: a macvlan
    (bridge mode) ``netdev`` on the PF's ``lower`` with the function's
    MAC.  The caller has registered the function under ``name`` first (so
    the device does not boot as a PF)."""
    from .commands.link import make_device
    _add_macvlan(netdev, lower, mac)
    try:
        dev = make_device(f"{name}:{netdev}", daemon.udp_port)
        daemon.add_device(dev)
    except BaseException:
        if name in daemon.devices:
            remove_function_device(daemon, name, netdev)
        else:
            _del_netdev(netdev)
        raise
    return dev


def remove_function_device(daemon, name: str | None, netdev: str) -> None:
    """A VF's or SF's device (if any) and its macvlan gone."""
    from .commands.link import remove_device
    dev = daemon.devices.get(name) if name is not None else None
    if dev is not None:
        remove_device(daemon, dev)
    if netdev:
        _del_netdev(netdev)


def set_function_mac(daemon, name: str | None, netdev: str, mac: bytes) -> None:
    """A function's new MAC on its macvlan, and its device's GIDs after it."""
    _set_netdev_mac(netdev, mac)
    dev = daemon.devices.get(name) if name is not None else None
    if dev is not None:
        daemon.refresh_netdev(dev)


def device_in_use(daemon, name: str | None) -> bool:
    """Whether the device ``name`` has open contexts (a function in use
    cannot be pulled away: EBUSY)."""
    dev = daemon.devices.get(name) if name is not None else None
    return dev is not None and any(cl.device is dev for cl in daemon.clients.values())


def _add_macvlan(name: str, lower: str, mac: bytes) -> None:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=lower)
        if not idx:
            raise VerbsError(errno.ENODEV, f"no netdev {lower!r}")
        if ipr.link_lookup(ifname=name):
            raise VerbsError(errno.EEXIST, f"netdev {name} already exists")
        try:
            ipr.link("add", ifname=name, kind="macvlan", link=idx[0], macvlan_mode="bridge", address=mac_str(mac))
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
        except NetlinkError as e:
            raise VerbsError(e.code or errno.EIO, f"cannot make the VF netdev {name} on {lower}:"
                                                  f" {os.strerror(e.code or errno.EIO)}") from None


def _set_netdev_mac(name: str, mac: bytes) -> None:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=name)
        if not idx:
            raise VerbsError(errno.ENODEV, f"no netdev {name!r}")
        try:
            ipr.link("set", index=idx[0], address=mac_str(mac))
        except NetlinkError as e:
            raise VerbsError(e.code or errno.EIO, f"cannot set {name}'s MAC: {os.strerror(e.code or errno.EIO)}") from None


def _del_netdev(name: str) -> None:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
    try:
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=name)
            if idx:
                ipr.link("del", index=idx[0])
    except NetlinkError as e:
        log.warning("cannot remove the VF netdev %s: %s", name, os.strerror(e.code or errno.EIO))


__all__ = ["add_function_device", "device_in_use", "function_netdev_name", "mac_str", "parse_mac", "remove_function_device",
           "set_function_mac"]
