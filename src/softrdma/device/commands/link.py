"""Link administration (``rdma link``/``rdma dev``): list the devices and
their port, add a device on a netdev (rxe_newlink; ``softrdmad --device``
makes its devices the same way), change a link's settings, delete one.

Adding, changing and deleting carry RDMA_NL_ADMIN_PERM: EPERM without
CAP_NET_ADMIN.
"""

from __future__ import annotations

import copy
import errno

from ...enums import IBV_EVENT_DEVICE_FATAL
from ...errors import VerbsError
from ...transport.qp import DeviceCaps
from ...uapi import request as rq
from ..core import Device
from ...transport.faults import FaultSettings
from ..gid import eui64
from ..netdev import active_mtu, netdev_info
from ..session import net_admin
from ..sysfs import guid_str
from .stat import stat_device_removed


def port_in_use(address: str, prog: str = "softrdmad") -> str:
    """The one line that says a device's UDP address is taken, and what to do."""
    return (f"{prog}: UDP {address} is already in use (another softrdmad, the kernel's rxe or another "
            f"program holds it): use the run directory of the daemon that serves it (SOFTRDMA_RUN or "
            f"--run-dir), or start this one with another --port or on another netdev")


def make_device(spec: str, port: int) -> Device:
    """The device ``NAME:NETDEV`` on ``port``.  A netdev that does not exist
    is SystemExit (the message); a UDP address that cannot be bound is a
    VerbsError with its errno (EADDRINUSE, ...) and the message as extack."""
    name, _, netdev = spec.partition(":")
    if not name or not netdev:
        raise SystemExit(f"softrdmad: bad --device {spec!r}: expected NAME:NETDEV")
    try:
        info = netdev_info(netdev)
    except LookupError as e:
        raise SystemExit(f"softrdmad: {e}") from None
    caps = DeviceCaps(active_mtu=active_mtu(info.mtu))
    try:
        return Device(name, netdev, info.addresses, mac=info.mac, port=port, caps=caps, netdev_index=info.index)
    except OSError as e:
        address = e.filename or f"{netdev} port {port}"
        if e.errno == errno.EADDRINUSE:
            msg = port_in_use(address)
        else:
            msg = f"softrdmad: cannot bind UDP {address}: {e.strerror}"
        err = VerbsError(e.errno or errno.EIO, msg)
        err.extack = msg.removeprefix("softrdmad: ")
        raise err from None


def cmd_links(daemon, c, m, fds):
    """Devices and their port (``rdma link``/``rdma dev``, ibv_devinfo, ibstat)."""
    out = []
    for d in daemon.devices.values():
        pa = d.port_attrs()
        out.append({"ifindex": d.ifindex, "ifname": d.name, "port": 1, "netdev": d.netdev,
                    "netdev_index": d.netdev_index, "gso": d.gso, "node_guid": guid_str(eui64(d.mac)),
                    "sys_image_guid": guid_str(eui64(d.mac)), "addresses": d.addresses,
                    "gids": [g.hex() for g in d.gids], "port_attr": pa, "hw_counters": d.hw_counters(),
                    "clients": sum(1 for cl in daemon.clients.values() if cl.device is d),
                    "udp": [[sk.ip, sk.port] for sk in d.sockets], "rx_dropped": dict(d.rx_dropped),
                    "gsi": {**d.gsi.counters, "rx_dropped": dict(d.gsi.rx_dropped),
                            "cm_rx_drops": d.cm.rx_drops if getattr(d, "cm", None) else 0},
                    "net": [sk.stats for sk in d.sockets]})
        # what nldev's fill_dev_info sends for an rxe device (``rdma dev``): node type CA, no
        # firmware string, rxe's device_cap_flags (RXE_DEVICE_CAP_FLAGS, the value
        # docs/formats/ibv_devinfo.md infers), no CQ DIM; one port
        out[-1].update(node_type=1, fw=daemon.pci.verbs_attrs(d.name).get("fw_ver", ""), caps=0x01A23C76,
                       dim=False, num_ports=1)      # (a ConnectX-like device: its running firmware)
    return {"links": out}, []


def _link_admin(c) -> None:
    """RDMA_NLDEV_CMD_NEWLINK/DELLINK (and softrdma's link set) carry
    RDMA_NL_ADMIN_PERM: EPERM without CAP_NET_ADMIN."""
    if not net_admin(c.pid):
        raise VerbsError(errno.EPERM, "CAP_NET_ADMIN is required to change links")


def _link_name(m: dict, key: str, max_len: int) -> str:
    """A device or netdev name: what the kernel accepts as one (a file name
    in sysfs: no '/', not '.' or '..', no '%' -- nldev_newlink)."""
    v = rq.string(m, key, max_len)
    if not v or v in (".", "..") or any(ch in v for ch in "/%:") or not v.isprintable() or any(
            ch.isspace() for ch in v):
        raise VerbsError(errno.EINVAL, f"{key}: bad name {v!r}")
    return v


def cmd_link_add(daemon, c, m, fds):
    _link_admin(c)
    name, netdev = _link_name(m, "name", 63), _link_name(m, "netdev", 15)
    gso = m.get("gso", True)
    if type(gso) is not bool:
        raise VerbsError(errno.EINVAL, "gso is on or off")
    if name in daemon.devices:
        raise VerbsError(errno.EEXIST, f"device {name} already exists")
    if any(d.netdev == netdev for d in daemon.devices.values()):
        raise VerbsError(errno.EEXIST, f"{netdev} already has an RDMA link")
    try:
        dev = make_device(f"{name}:{netdev}", daemon.udp_port)
    except SystemExit as e:
        raise VerbsError(errno.ENODEV, str(e)) from None
    except VerbsError:                  # make_device's own: errno and extack as they are
        raise
    except OSError as e:
        raise VerbsError(e.errno or errno.EIO, str(e)) from None
    dev.set_gso(gso)
    daemon.add_device(dev)
    return {"ifindex": dev.ifindex}, []


def cmd_link_set(daemon, c, m, fds):
    """Change a link's settings; now: ``faults`` (fault injection)."""
    _link_admin(c)
    name = rq.string(m, "name")
    dev = daemon.devices.get(name)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    if "faults" in m:
        seed = rq.uint(m, "seed", rq.U64, None)
        try:
            settings = FaultSettings.from_dict(rq.obj(m, "faults", {}))
        except (TypeError, ValueError) as e:
            raise VerbsError(errno.EINVAL, f"bad faults: {e}") from None
        settings.rate = settings.rate or daemon.pci.vf_rate(name)     # a VF's max_tx_rate stays
        dev.set_faults(settings, seed)
    return {"faults": dev.faults.settings.as_dict() if dev.faults else None,
            "fault_counters": dev.faults.counters() if dev.faults else None}, []


def cmd_ecn(daemon, c, m, fds):
    """A device's ECN / DCQCN settings (``transport.dcqcn``); ``set``:
    {"roce_np"/"roce_rp": {knob: value, "enable": {priority: 0|1}},
    "traffic_class": n}, all applied or none (EINVAL names the first bad
    one).  The ECN files in the sysfs tree follow."""
    name = rq.string(m, "name")
    dev = daemon.devices.get(name)
    changes = rq.obj(m, "set", {})
    if changes:
        _link_admin(c)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    if changes:
        trial = copy.deepcopy(dev.cc)
        for key, v in changes.items():
            if key == "traffic_class":
                trial.set_tclass(v)
            elif key in ("roce_np", "roce_rp") and isinstance(v, dict):
                for knob, value in v.items():
                    if knob == "enable" and isinstance(value, dict):
                        for prio, on in value.items():
                            trial.set(key[5:], "enable", on, _prio(prio))
                    else:
                        trial.set(key[5:], knob, value)
            else:
                raise VerbsError(errno.EINVAL, f"no ECN setting {key!r}")
        dev.cc.__dict__.update(trial.__dict__)        # the QPs hold dev.cc itself
        dev.cc_changed()
        daemon.sysfs.set_ecn(dev.netdev, dev.cc.as_dict())
    return {"ecn": dev.cc.as_dict()}, []


def _prio(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        raise VerbsError(errno.EINVAL, f"priority {v!r} is not a number") from None


def cmd_link_delete(daemon, c, m, fds):
    _link_admin(c)
    name = rq.string(m, "name")
    dev = daemon.devices.get(name)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    daemon.pci.check_delete(name)
    remove_device(daemon, dev, c)
    return {}, []


def remove_device(daemon, dev, c=None) -> None:
    """Take ``dev`` out of the daemon: its contexts disassociated (the
    caller's ``c`` too), its sockets closed, its sysfs entries gone."""
    for cl in list(daemon.clients.values()):
        if cl.device is dev and cl is not c:
            cl.event(IBV_EVENT_DEVICE_FATAL)
            daemon.drop(cl)
    if c is not None and c.device is dev:   # the caller's own context: disassociated, its objects gone
        c.close()
        c.device = None
        c.event(IBV_EVENT_DEVICE_FATAL)
    for s in [*dev.sockets, *dev.mcast.sockets.values()]:
        try:
            daemon.sel.unregister(s.sock)
        except (KeyError, ValueError):
            pass
    dev.close()
    del daemon.devices[dev.name]
    daemon.rdma_cm.device_removed(dev)
    stat_device_removed(daemon, dev)
    daemon.topology_changed()
    daemon.sysfs.remove_device(dev.name)
    daemon.sysfs.remove_ecn(dev.netdev)
    daemon.pci.device_removed(dev.name)
