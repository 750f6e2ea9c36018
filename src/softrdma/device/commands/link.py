"""Link administration (``rdma link``/``rdma dev``): list the devices and
their port, add a device on a netdev (rxe_newlink; ``softrdmad --device``
makes its devices the same way), change a link's settings, delete one.

Adding, changing and deleting carry RDMA_NL_ADMIN_PERM: EPERM without
CAP_NET_ADMIN.
"""

from __future__ import annotations

import copy
import errno
import select
import selectors
import time

from ...enums import IBV_EVENT_DEVICE_FATAL
from ...errors import VerbsError
from ...transport.qp import DeviceCaps
from ...uapi import request as rq
from ..core import Device
from ..ib import LINK_LAYER_IB, IbDevice
from ...transport.faults import FaultSettings
from ..netdev import active_mtu, netdev_info
from ..session import net_admin
from ..sysfs import guid_str, rate_str
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
                    "netdev_index": d.netdev_index, "gso": d.gso, "node_guid": guid_str(d.node_guid),
                    "sys_image_guid": guid_str(d.sys_image_guid), "addresses": d.addresses,
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
        if d.link_layer == LINK_LAYER_IB:
            ports = [_ib_port_entry(p) for p in d.ib_ports]
            out[-1].update(ib=ports[0]["ib"], ports=ports, num_ports=len(ports))
    return {"links": out}, []


def _ib_port_entry(p) -> dict:
    """One port of an IB device as ``links`` lists it (``ports``)."""
    speed, lanes = p.rate
    return {"port": p.num, "port_attr": p.port_attrs(), "gids": [g.hex() for g in p.gids],
            "ib": {"fabric": p.fabric, "node": p.node_sel, "ca_port": p.link.port_num,
                   "attached": p.link.connected, "port_guid": guid_str(p.port_guid),
                   "subnet_prefix": p.subnet_prefix.hex(), "pkeys": list(p.pkeys),
                   "rate": rate_str(speed, lanes), "counters": p.ib_counters,
                   "node_desc": f"{p.name} softrdma", "umad_files": len(p.gsi.umad.files)}}


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
    kind = rq.string(m, "type", 15, "rxe")
    if kind == "ib":
        return _link_add_ib(daemon, m)
    if kind != "rxe":
        raise VerbsError(errno.EOPNOTSUPP, f"link type {kind!r}: softrdma adds rxe and ib links")
    name, netdev = _link_name(m, "name", 63), _link_name(m, "netdev", 15)
    gso = m.get("gso", True)
    if type(gso) is not bool:
        raise VerbsError(errno.EINVAL, "gso is on or off")
    if name in daemon.devices:
        raise VerbsError(errno.EEXIST, f"device {name} already exists")
    if any(d.netdev == netdev for d in daemon.devices.values() if d.netdev):
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


def _link_add_ib(daemon, m):
    """An InfiniBand device: its port attached to a CA port of a running
    fabric (``softrdma fabric serve``), the fabric's answer awaited (the
    port's PortInfo, or its refusal's errno: ENOENT no such CA, EBUSY port
    taken, EINVAL not a CA).  ``NAME/N`` adds port N to the IB device NAME
    (N: its next port; the device keeps working on its other ports)."""
    raw = rq.string(m, "name", 67)
    dev_name, slash, num = raw.partition("/")
    m = {**m, "name": dev_name}
    name = _link_name(m, "name", 63)
    base, node = rq.string(m, "fabric", 255, ""), rq.string(m, "node", 255, "")
    port = rq.uint(m, "port", rq.U8, 1)
    if not base or "/" in base or not node:
        raise VerbsError(errno.EINVAL, "an ib link needs a fabric and a node")
    if not 1 <= port <= 254:
        raise VerbsError(errno.EINVAL, f"port {port}: CA ports are 1..254")
    if slash and (not num.isdigit() or not 1 <= int(num) <= MAX_IB_PORTS):
        raise VerbsError(errno.EINVAL, f"{raw}: a device port is 1..{MAX_IB_PORTS}")
    num_i = int(num) if slash else 1
    owner = daemon.devices.get(name)
    if num_i == 1 and owner is not None:
        raise VerbsError(errno.EEXIST, f"device {name} already exists")
    if num_i > 1:
        if owner is None or owner.link_layer != LINK_LAYER_IB:
            raise VerbsError(errno.ENODEV, f"no IB device {name!r} to add port {num_i} to")
        if num_i != len(owner.ib_ports) + 1:
            raise VerbsError(errno.EEXIST if num_i <= len(owner.ib_ports) else errno.EINVAL,
                             f"{name} has {len(owner.ib_ports)} port(s): the next one is "
                             f"{name}/{len(owner.ib_ports) + 1}")
    for d in daemon.devices.values():
        if d.link_layer != LINK_LAYER_IB:
            continue
        for p in d.ib_ports:
            if (p.fabric, p.node_sel, p.link.port_num) == (base, node, port):
                raise VerbsError(errno.EEXIST, f"{d.name}/{p.num} is already attached to {node} port {port}"
                                               f" of {base}")
    if num_i > 1:
        p = owner.add_port(base, node, port)
        _attach(p, base, lambda: owner.remove_port(p))
        daemon.ib_port_added(owner, p)
        return {"ifindex": owner.ifindex, "port": p.num}, []
    dev = IbDevice(name, base, node, port_num=port)
    _attach(dev, base, dev.close)
    daemon.add_device(dev)
    return {"ifindex": dev.ifindex}, []


def _attach(p, base: str, undo) -> None:
    """Connect port ``p`` to its fabric and await the first PORT_INFO; the
    fabric's refusal (``undo`` run) as the errno it gave."""
    if not p.link.connect():
        err, why = p.link.error
        undo()
        _refused(errno.ENOENT if err in (errno.ENOENT, errno.ECONNREFUSED) else err,
                 f"no fabric {base} is serving ({why})")
    if not _await_port_info(p):
        undo()
        _refused(*(p.link.error or (errno.ETIMEDOUT, f"fabric {base} did not answer")))
    p.attached()                        # the CapabilityMask bits the port holds (as on a reconnect)


def _refused(err: int, why: str):
    e = VerbsError(err, why)
    e.extack = why                       # rdma link add prints it as "Error: ..."
    raise e


MAX_IB_PORTS = 2                     # mlx5's most: a ConnectX HCA has one or two ports


def _await_port_info(dev, timeout: float = 5.0) -> bool:
    """Wait for the fabric's first PORT_INFO (or its ERROR) on a new link."""
    sock = dev.link.sock
    end = time.monotonic() + timeout
    while not dev.seen_info:
        left = end - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            return False
        if not dev.service(time.monotonic()):
            return False
    return True


def cmd_umad_open(daemon, c, m, fds):
    """A umad file on an IB device's port (``device.umad``): the tool's end
    of its socket, the agent's hi_tid, and the port as the fabric describes
    it (NodeInfo, PortInfo: what a tool reads from sysfs and its own SMA)."""
    name = rq.string(m, "name")
    num = rq.uint(m, "port", rq.U8, 1)
    classes = m.get("classes") or []
    if not isinstance(classes, list) or not all(type(x) is int and 0 <= x <= 0xFF for x in classes):
        raise VerbsError(errno.EINVAL, "classes: a list of management classes (0..255)")
    dev = daemon.devices.get(name)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    if dev.link_layer != LINK_LAYER_IB:
        raise VerbsError(errno.EOPNOTSUPP, f"{name} is a RoCE device: its MADs are rdma_cm's")
    p = dev.port(num)
    f = p.gsi.umad.open(classes, issm=bool(rq.uint(m, "issm", rq.U8, 0)))
    daemon.sel.register(f.sock, selectors.EVENT_READ, ("umad", (p, f)))
    theirs, f.theirs = f.theirs, None
    raw = p.raw_info
    return {"hi_tid": f.hi_tid, "lid": p.lid, "sm_lid": p.sm_lid,
            "node_info": raw.node_info.hex() if raw else "", "port_info": raw.port_info.hex() if raw else ""}, \
        [theirs.detach()]


def cmd_link_set(daemon, c, m, fds):
    """Change a link's settings; now: ``faults`` (fault injection)."""
    _link_admin(c)
    name = rq.string(m, "name")
    dev = daemon.devices.get(name)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    if "faults" in m:
        if dev.link_layer == LINK_LAYER_IB:
            raise VerbsError(errno.EOPNOTSUPP, f"{name} is an InfiniBand port: its faults are the fabric's"
                                               " (softrdma fabric link down)")
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
    """``rdma link delete NAME``: the device; ``NAME/N``: port N of an IB
    device (its last one, N > 1), detached from its fabric."""
    _link_admin(c)
    name = rq.string(m, "name")
    base, slash, num = name.partition("/")
    if slash:
        return _port_delete(daemon, base, num)
    dev = daemon.devices.get(name)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    daemon.pci.check_delete(name)
    remove_device(daemon, dev, c)
    return {}, []


def _port_delete(daemon, name: str, num: str):
    """Port N of an IB device goes away as on a hot-unplug of that port:
    its fabric link and umad files closed, its sysfs entries gone, the QPs
    bound to it (INIT ``port_num``) to ERR with their WRs flushed
    (IBV_EVENT_QP_FATAL); query_port of N is then EINVAL."""
    dev = daemon.devices.get(name)
    if dev is None:
        raise VerbsError(errno.ENODEV, f"no device {name!r}")
    ports = getattr(dev, "ib_ports", None)
    if not num.isdigit() or ports is None or not 1 <= int(num) <= len(ports):
        raise VerbsError(errno.ENODEV, f"no link {name}/{num}")
    n = int(num)
    if n == 1:
        raise VerbsError(errno.EINVAL, f"{name}/1 is the device itself: rdma link delete {name}")
    if n != len(ports):
        raise VerbsError(errno.EBUSY, f"{name}/{len(ports)} goes first: ports are removed last first")
    p = ports[n - 1]
    _unregister_port(daemon, p)
    for dqp in list(dev.qps.values()):
        qp = dqp.qp
        attr = getattr(qp, "attr", None)
        if attr is not None and attr.port_num == n and hasattr(qp, "to_error"):
            qp.to_error()
            dqp.publish()
    daemon.ipoib.remove_port(p)                 # (its ib%d goes with it)
    dev.remove_port(p)
    daemon.sysfs.remove_port(name, n)
    daemon.topology_changed()
    return {}, []


def _unregister_port(daemon, p) -> None:
    """The daemon's loop stops watching an IB port's fabric link and umad files."""
    for s in (p.link.sock, *p.gsi.umad.files):
        if s is not None:
            try:
                daemon.sel.unregister(s)
            except (KeyError, ValueError):
                pass


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
    if dev.link_layer == LINK_LAYER_IB:
        for p in dev.ib_ports:
            _unregister_port(daemon, p)
    daemon.ipoib.remove_device(dev)
    dev.close()
    del daemon.devices[dev.name]
    daemon.rdma_cm.device_removed(dev)
    stat_device_removed(daemon, dev)
    daemon.topology_changed()
    daemon.sysfs.remove_device(dev.name)
    if dev.netdev:
        daemon.sysfs.remove_ecn(dev.netdev)
    daemon.pci.device_removed(dev.name)
