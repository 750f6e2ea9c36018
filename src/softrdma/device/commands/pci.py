"""PCI functions of the ConnectX-like devices (``device.sriov``): what
``mst``, ``mlxconfig``, ``flint``, ``mlxfwreset``, ``ip link set <pf> vf
N ...`` and a write to ``sriov_numvfs`` ask of the daemon.

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
