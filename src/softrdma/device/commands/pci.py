"""PCI functions of the ConnectX-like devices (``device.sriov``): what
``mst``, ``mlxconfig``, ``flint``, ``mlxfwreset``, ``ip link set <pf> vf
N ...`` and a write to ``sriov_numvfs`` ask of the daemon; and their
sub-functions (``device.sf``): what ``mlxdevm`` asks.

Every change carries the kernel's permission for it (writing sysfs and
netlink's RTM_SETLINK, the firmware tools' access to the PCI
configuration space): EPERM without CAP_NET_ADMIN.
"""

from __future__ import annotations

import errno
import os

from ...errors import VerbsError
from ...uapi import request as rq
from ..firmware import ImageError, parse_image
from ..vpi import check_cable
from .link import _link_admin

#: the largest image a burn reads
MAX_IMAGE = 64 << 20


def cmd_pci_functions(daemon, c, m, fds):
    return {"functions": daemon.pci.describe()}, []


def cmd_nvconfig(daemon, c, m, fds):
    """The NV configuration (``rows``, ``cables``); ``set`` {NAME: value}
    stores next-boot values (all or none), ``reset`` every default,
    ``cable`` {port, kind: "ib"|"eth", fabric, node, ca_port | netdev}
    where a port goes for that protocol."""
    name = rq.string(m, "name")
    changes = rq.obj(m, "set", {})
    reset = m.get("reset", False)
    if type(reset) is not bool:
        raise VerbsError(errno.EINVAL, "reset is true or false")
    cable = rq.obj(m, "cable", {})
    pf = daemon.pci.pf_of(name)
    if changes or reset or cable:
        _link_admin(c)
    if changes:
        values = pf.nv.check(changes)
        pf.nv.set(values)
    elif reset:
        pf.nv.reset()
    elif cable:                 # where a port is plugged in for a protocol (``device.vpi``)
        port = cable.get("port", 1)
        if type(port) is not int or not 1 <= port <= 2:
            raise VerbsError(errno.EINVAL, f"port {port!r}: 1 or 2")
        kind = str(cable.get("kind", ""))
        pf.nv.set_cable(port, kind, check_cable(kind, cable))
    return {"rows": pf.nv.rows(), "cables": pf.nv.cables}, []


def cmd_fw_reset(daemon, c, m, fds):
    name = rq.string(m, "name")
    daemon.pci.pf_of(name)
    _link_admin(c)
    return daemon.pci.fw_reset(name), []


def cmd_fw_burn(daemon, c, m, fds):
    """Burn the image read from the request's fd onto the PF's flash: a
    corrupt image, or one for another device or PSID, is refused and the
    flash keeps what it had."""
    name = rq.string(m, "name")
    if len(fds) != 1:
        raise VerbsError(errno.EINVAL, "fw_burn needs the image fd")
    allow = m.get("allow_psid_change", False)
    if type(allow) is not bool:
        raise VerbsError(errno.EINVAL, "allow_psid_change is true or false")
    pf = daemon.pci.pf_of(name)
    _link_admin(c)
    data = b""
    while len(data) <= MAX_IMAGE:
        chunk = os.pread(fds[0], 1 << 20, len(data))
        if not chunk:
            break
        data += chunk
    if len(data) > MAX_IMAGE:
        raise VerbsError(errno.EFBIG, f"the image is larger than {MAX_IMAGE} bytes")
    try:
        img = parse_image(data)
    except ImageError as e:
        raise VerbsError(errno.EINVAL, str(e)) from None
    previous = pf.flash.version
    pf.flash.burn(img, pf.fn.model.device_id, allow)
    return {"version": img.version, "previous": previous}, []


def cmd_sriov_numvfs(daemon, c, m, fds):
    """``echo N > .../device/sriov_numvfs``."""
    name = rq.string(m, "name")
    _link_admin(c)
    daemon.pci.set_numvfs(name, m.get("numvfs"))
    return {}, []


def cmd_vf_set(daemon, c, m, fds):
    """``ip link set <pf> vf N mac|trust|spoofchk|state ...``."""
    name = rq.string(m, "name")
    vf = rq.uint(m, "vf", rq.U32)
    changes = rq.obj(m, "set")
    _link_admin(c)
    daemon.pci.set_vf(name, vf, changes)
    return {}, []


def _uint(m, key: str, limit: int, required: bool = False):
    """An optional devlink number (None when absent)."""
    v = m.get(key)
    if v is None:
        if required:
            raise VerbsError(errno.EINVAL, f"{key} is required")
        return None
    if type(v) is not int or not 0 <= v <= limit:
        raise VerbsError(errno.EINVAL, f"{key} must be a number 0..{limit}")
    return v


def _opt_str(m, key: str):
    v = m.get(key)
    if v is not None and type(v) is not str:
        raise VerbsError(errno.EINVAL, f"{key} must be a string")
    return v


def cmd_devm_show(daemon, c, m, fds):
    """``dev show`` and ``port show [DEV/INDEX]`` (DEVLINK_CMD_GET, _PORT_GET)."""
    dev = _opt_str(m, "dev")
    index = _uint(m, "index", rq.U32)
    return {"devs": daemon.pci.sfs.devs(), "ports": daemon.pci.sfs.ports(dev, index)}, []


def cmd_devm_port_add(daemon, c, m, fds):
    """``port add DEV flavour F pfnum N [sfnum M] [controller C]`` (DEVLINK_CMD_PORT_NEW)."""
    _link_admin(c)
    dev = rq.string(m, "dev")
    flavour = rq.string(m, "flavour")
    pfnum = _uint(m, "pfnum", rq.U16, required=True)
    sfnum = _uint(m, "sfnum", rq.U32)
    controller = _uint(m, "controller", rq.U32)
    index = _uint(m, "index", rq.U32)
    return {"port": daemon.pci.sfs.add(dev, flavour, pfnum, sfnum, controller, index)}, []


def cmd_devm_port_set(daemon, c, m, fds):
    """``port function set DEV/INDEX [hw_addr ADDR] [state active|inactive]`` (DEVLINK_CMD_PORT_SET)."""
    _link_admin(c)
    daemon.pci.sfs.set(rq.string(m, "dev"), rq.uint(m, "index", rq.U32), _opt_str(m, "hw_addr"),
                       _opt_str(m, "state"))
    return {}, []


def cmd_devm_port_del(daemon, c, m, fds):
    """``port del DEV/INDEX`` (DEVLINK_CMD_PORT_DEL)."""
    _link_admin(c)
    daemon.pci.sfs.delete(rq.string(m, "dev"), rq.uint(m, "index", rq.U32))
    return {}, []
