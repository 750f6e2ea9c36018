"""softrdmad: the device daemon -- the control socket and the one loop that
drives every device.

One selector loop, one thread.  Inputs: the listening socket, each client's
control connection, each device's UDP sockets, each QP/SRQ doorbell.  After
any input, and while traffic flows, the loop polls the shared rings,
routes what the transports produced, and fires QP timers.  An empty pass
gives the core away (``sched_yield``) -- at once, or, for a daemon pinned
to CPUs of its own (``--cpu``), once its spin budget since the last work is
spent (``placement``).  After a quiet
spell (``SPIN_S``, 2 ms; env SOFTRDMA_SPIN_S for experiments) it tells
every ring it sleeps (so the library rings the doorbell) and blocks until
the next input or QP deadline.  Before a QP timer fires, the device's
sockets are read empty; a pass that comes much later than the loop planned
(the process was descheduled) stops the ACK timers for the stalled time
(``Device.stalled``): the host's stall is not the peer's.

A client connection is the uverbs file of one Context: every object it
creates belongs to it, and all of them are destroyed when it closes --
whatever way the process ended (``session.Client``).  A request goes to
its handler through the one table of commands (``commands.HANDLERS``, checked against ``uapi.commands``) in
``Daemon.run_command``.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import logging
import os
import selectors
import signal
import socket
import struct
import time
import traceback

from ..enums import IBV_EVENT_GID_CHANGE, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR
from ..errors import VerbsError
from ..mgmt.cm.counters import COUNTER_NAMES as CM_COUNTER_NAMES
from ..transport.counters import TRAFFIC, as_dict
from ..uapi.commands import check_request
from ..uapi.control import MAX_MSG, ControlError, recv_msg, valid_seq
from ..uapi.rundir import SOCKET_NAME
from .commands import HANDLERS, FREE
from .commands.restrack import Restrack
from .core import Device
from .ib import LINK_LAYER_IB
from .ipoib_host import IpoibHost
from .net import gid_to_ip
from .netdev import netdev_info
from .placement import should_yield
from .rdma_cm import RdmaCm
from .session import MAX_CONTEXTS_PER_USER, PAGE_SIZE, Client, close_fds
from .netdev import LinkEvents
from .sriov import Functions
from .sysfs import SysfsTree, rxe_pma_counters, softrdma_device_attrs

log = logging.getLogger("softrdmad")
SPIN_S = float(os.environ.get("SOFTRDMA_SPIN_S", "0.002"))
STALL_S = 0.004           # what one loop pass may take; a later pass: the process was descheduled (a time slice)
LOCK_NAME = "softrdmad.lock"


class Daemon:
    """The loop, the listening socket, the clients and the devices of one
    run directory."""

    def __init__(self, run_dir: str, devices: list[Device], limits: dict[str, int] | None = None,
                 spin_budget_s: float = 0.0, ipoib: bool = False):
        self.run_dir = run_dir
        self.ipoib_on = ipoib                   # an IPoIB interface per IB port (``device.ipoib_host``)
        # how long an empty pass keeps the core after the last work (0 but
        # for a daemon pinned to CPUs of its own: placement.spin_budget_s)
        self.spin_budget_s = spin_budget_s
        # --limit NAME=N: device limits lowered for every device hosted, and
        # max_contexts_per_user; pages of MRs charged per uid (RLIMIT_MEMLOCK)
        self.limits = dict(limits or {})
        self.max_contexts_per_user = self.limits.pop("max_contexts_per_user", MAX_CONTEXTS_PER_USER)
        self.locked_pages: collections.Counter = collections.Counter()
        self.devices = {d.name: d for d in devices}
        self.sel = selectors.DefaultSelector()
        self.clients: dict[int, Client] = {}
        self.stopping = False
        self.last_busy = time.monotonic()
        self.ticked_at = self.last_busy         # when the loop last looked at the QP timers
        self.sleeping = False
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
        # one daemon per run directory: the lock lives as long as we do
        self.lock_fd = os.open(os.path.join(run_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.lock_fd)
            raise SystemExit(f"softrdmad: another softrdmad already serves {run_dir}") from None
        self.sock_path = os.path.join(run_dir, SOCKET_NAME)
        try:
            os.unlink(self.sock_path)
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o077)                       # only our user (and root) may connect
        try:
            self.listener.bind(self.sock_path)
        finally:
            os.umask(old)
        try:
            self._setup(devices)
        except BaseException:                       # leave no socket behind
            self.listener.close()
            try:
                os.unlink(self.sock_path)
            except FileNotFoundError:
                pass
            os.close(self.lock_fd)
            raise

    def _setup(self, devices: list[Device]) -> None:
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, ("listen", None))
        self.devices = {}
        self._by_ip = None
        self.netlink = None
        try:                                        # follow addresses and link state live
            self.netlink = LinkEvents()
            self.sel.register(self.netlink.fileno(), selectors.EVENT_READ, ("netlink", None))
        except Exception as e:                      # noqa: BLE001 -- no netlink: static addresses
            log.warning("not following address changes: %s", e)
            self.netlink = None
        self._next_ifindex = 0
        self.rdma_cm = RdmaCm(self)
        self.sysfs = SysfsTree(os.path.join(self.run_dir, "sys"))
        self.ipoib = IpoibHost(self, self.ipoib_on)
        self.pci = Functions(self)              # ConnectX-like devices: PCI identity, firmware, SR-IOV
        self.port_counters: dict = {}           # device -> its rdma_port_counter (commands.stat)
        self.restrack = Restrack()
        self.counters_at = 0.0
        self.udp_port = devices[0].udp_port if devices else 4791
        for dev in devices:
            self.add_device(self.pci.boot_device(dev))      # (its firmware boots: VPI's link type)

    @property
    def by_ip(self) -> dict:
        """Every address any of our devices has a GID for -> that device
        (packets to them are delivered without a socket)."""
        if self._by_ip is None:
            self._by_ip = {gid_to_ip(e.gid): d for d in self.devices.values() if d.link_layer != LINK_LAYER_IB
                           for _, e in d.gid_table}
        return self._by_ip

    def topology_changed(self) -> None:
        """Devices or addresses changed: forget every cached route."""
        self._by_ip = None
        for d in self.devices.values():
            d.route_cache.clear()

    # ------------------------------------------------------------ loop
    def stop(self, *_):
        self.stopping = True

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        try:
            while not self.stopping:
                self.step()
        finally:
            self.shutdown()

    def step(self, max_wait: float = 0.05) -> None:
        # max_wait bounds a sleep even when nothing is due: the sleep flag and
        # the producer index are a Dekker pair, and CPython cannot issue the
        # store-load fence that would make a lost doorbell impossible.
        now = time.monotonic()
        if now - self.last_busy >= SPIN_S and not self.sleeping:
            self._sleep_rings()                 # fails (stays awake) if work slipped in
        if not self.sleeping:
            timeout = 0.0
        else:
            timeout = max_wait
            for dev in self.devices.values():
                # timers fire after the inputs are read (below, and
                # Device.tick reads the sockets empty before one fires): an
                # ACK that waited in the socket while we were descheduled counts
                d = dev.next_deadline()
                if d is not None:
                    timeout = min(timeout, max(0.0, d - now))
                if dev.faults is not None and dev.faults.held:
                    timeout = min(timeout, max(0.0, dev.faults.next_due() - now))
                d = self.rdma_cm_deadline(dev)
                if d is not None:
                    timeout = min(timeout, max(0.001, d - now))
                if dev.link_layer == LINK_LAYER_IB:
                    for p in dev.ib_ports:
                        if p.link.retry_at is not None:
                            timeout = min(timeout, max(0.001, p.link.retry_at - now))
            d = self.ipoib.deadline if self.ipoib.ifs else None
            if d is not None:
                timeout = min(timeout, max(0.001, d - now))
        events = self.sel.select(timeout)
        if not events and timeout == 0.0 and should_yield(now, self.last_busy, self.spin_budget_s):
            # spinning with nothing to do: give the core to the applications
            # (two cores, busy-polling apps and daemons: without this every
            # round trip waits for a scheduler tick) -- at once, unless the
            # daemon has a core to itself and the budget is not spent
            os.sched_yield()
        fd_map = self.sel.get_map()
        for key, _ in events:
            if fd_map.get(key.fd) is not key:
                # closed or re-registered by an event handled before this one
                # (a client dropped with its doorbells): never touch its fd,
                # whose number may already name something else
                continue
            kind, data = key.data
            if kind == "udp":
                dev, s = data
                dev.receive(s, time.monotonic())
                self._busy()
            elif kind == "umad":
                dev, f = data
                if not dev.gsi.umad.readable(f, time.monotonic()):
                    try:
                        self.sel.unregister(f.sock)
                    except (KeyError, ValueError):
                        pass
                    dev.gsi.umad.close(f)
                self._busy()
            elif kind == "fabric":
                self.fabric_readable(data)
                self._busy()
            elif kind == "ipoib":
                self.ipoib.readable(data)
                self._busy()
            elif kind == "mcast":
                dev, s = data
                dev.mcast.receive(s, time.monotonic())
                self._busy()
            elif kind == "doorbell":
                try:
                    os.read(key.fd, 8)
                except OSError:                 # nothing there (an eventfd is all create_* accept)
                    pass
                self._busy()
            elif kind == "raw":                 # device.raw: a raw port's socket, a raw QP's or WQ's doorbell
                try:
                    data()
                except Exception:               # noqa: BLE001 -- one raw queue's fault must not stop the loop
                    log.exception("raw packet path")
            elif kind == "client":
                if data.outbox or data.broken:
                    self._client_writable(data)
                else:
                    self._client_readable(data)
            elif kind == "netlink":
                self._netlink_readable()
            elif kind == "listen":
                self._accept()
        now = time.monotonic()
        # Since the timers were last looked at, the loop meant to wait
        # ``timeout`` at most, and a pass takes well under STALL_S; a pass
        # later than that found the process not running (a busy host
        # deschedules it for tens of milliseconds).  Nobody could see an ACK
        # meanwhile: the ACK timers stop for all but STALL_S of it, so they
        # run on the daemon's own time -- and a daemon that is late on every
        # pass still advances them STALL_S a pass (a silent peer times out).
        since = self.ticked_at + timeout + STALL_S
        if now > since:
            for dev in self.devices.values():
                dev.stalled(since, now)
        self.ticked_at = now
        if now - self.counters_at >= 1.0:
            self.counters_at = now
            self.refresh_sysfs()
        by_ip = self.by_ip
        # asleep, every ring rings its doorbell (which wakes us): the rings
        # are read while awake, and when a sleep ends without input (a timer,
        # or max_wait, which also covers a lost doorbell)
        poll = not self.sleeping or not events
        if self.ipoib.ifs:
            self.ipoib.tick(now)
        for dev in self.devices.values():
            if dev.link_layer == LINK_LAYER_IB:
                self.fabric_service(dev, now)
            if poll and dev.poll_rings(now):
                self._busy()
            if dev.faults is not None and dev.flush_held(now):
                self._busy()
            dev.tick(now, by_ip)                # reads the sockets empty first if a timer is due
            # (what a same-daemon delivery makes the peer emit is routed too)
            if dev.route(by_ip, now):
                self._busy()
            self._dispatch_events(dev)
        rc = self.rdma_cm
        rc.poll(self.devices.values(), now)
        for d in self.devices.values():
            if d.route(by_ip, now):
                self._busy()
            if d.failures:
                self._log_failures(d)
        if rc.outq:
            rc.flush()

    @staticmethod
    def _log_failures(dev: Device) -> None:
        """The QPs ``Port.qp_failed`` took to ERR since the last pass: each
        exception with its traceback, for a bug report."""
        for qpn, exc in dev.failures:
            log.error("%s: QP %#x moved to ERR by an internal error (a softrdma bug; please report it):\n%s",
                      dev.name, qpn, "".join(traceback.format_exception(exc)).rstrip())
        dev.failures.clear()

    @staticmethod
    def rdma_cm_deadline(dev) -> float | None:
        """The next CM or QP1 timer of the device's ports (port 2 has its own agent and QP1)."""
        out = None
        for p in getattr(dev, "ib_ports", (dev,)):
            cm = getattr(p, "cm", None)
            for d in (p.gsi.deadline, cm.deadline if cm is not None and cm.ids else None):
                if d is not None and (out is None or d < out):
                    out = d
        return out

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def _netlink_readable(self) -> None:
        """Address or link changes: refresh the devices on that netdev."""
        touched = self.netlink.changed()
        if self.ipoib.ifs:
            self.ipoib.netlink_changed(touched)
        for dev in list(self.devices.values()):
            if dev.netdev_index in touched or -1 in touched:
                self.refresh_netdev(dev)

    def refresh_netdev(self, dev: Device) -> None:
        try:
            info = netdev_info(dev.netdev)
        except LookupError:
            info = None
        if info is None or not info.up:
            new_state = 1                           # PORT_DOWN
        else:
            new_state = 4
        if info is not None:
            changes, opened, closed = dev.set_addresses(info.mac, info.addresses)
            for sk in closed:
                try:
                    self.sel.unregister(sk.sock)
                except (KeyError, ValueError):
                    pass
                sk.close()
            for sk in opened:
                self.sel.register(sk.sock, selectors.EVENT_READ, ("udp", (dev, sk)))
            if changes:
                self.topology_changed()
                self.sysfs.set_gids(dev.name, 1, dev.gid_table)
                self._event_clients(dev, IBV_EVENT_GID_CHANGE)
        self.set_port_state(dev, self.pci.port_state(dev, new_state))
        self.pci.netdev_changed(dev)

    def set_port_state(self, dev: Device, new_state: int) -> None:
        if new_state != dev.state:
            dev.state = new_state
            self.sysfs.set_port(dev.name, 1, state=new_state, phys_state=5 if new_state == 4 else 3)
            self._event_clients(dev, IBV_EVENT_PORT_ACTIVE if new_state == 4 else IBV_EVENT_PORT_ERR)

    # ------------------------------------------------------------ InfiniBand ports
    def fabric_readable(self, port) -> None:
        """An IB port's fabric connection has input: PORT_INFO, PACKETS;
        its end takes the port Down and schedules a reconnect."""
        now = time.monotonic()
        if not port.service(now):
            self.fabric_lost(port, now)
        self._ib_port_events(port)

    def fabric_service(self, dev, now: float) -> None:
        """Each pass, for each port of the IB device: send what waits for
        the fabric's socket; reconnect a lost fabric when its back-off is
        over."""
        for port in dev.ib_ports:
            link = port.link
            if link.outbox:
                link.flush()
                self._busy()
            if link.sock is None and link.retry_at is not None and now >= link.retry_at:
                if link.connect():
                    log.info("%s/%d: attached to fabric %s, node %s", dev.name, port.num, link.base, link.node)
                    self.sel.register(link.sock, selectors.EVENT_READ, ("fabric", port))
                    port.attached()
                else:
                    link.close(now)
            if port.port_events:
                self._ib_port_events(port)

    def ib_port_added(self, dev, port) -> None:
        """``rdma link add NAME/N``: port N of an IB device is attached."""
        self.sel.register(port.link.sock, selectors.EVENT_READ, ("fabric", port))
        self._ib_sysfs_port(port)
        self.sysfs.add_umad(dev.name, port.num)
        port.port_events.clear()
        self.topology_changed()
        self.ipoib.add_port(port)

    def fabric_lost(self, dev, now: float) -> None:
        """(``dev``: the IB port whose connection ended.)"""
        link = dev.link
        if link.sock is not None:
            try:
                self.sel.unregister(link.sock)
            except (KeyError, ValueError):
                pass
        if link.error:
            log.warning("%s/%d: fabric link lost: %s", dev.name, dev.num, link.error[1])
        link.close(now)
        dev.link_lost()
        self._ib_port_events(dev)

    def _ib_port_events(self, dev) -> None:
        """What changed on an IB port: the sysfs port files, then the events
        to the clients (as ib_cache updates its cache before it dispatches)."""
        if not dev.port_events:
            return
        evs = dev.port_events[:]
        dev.port_events.clear()
        self.topology_changed()
        self._ib_sysfs_port(dev)
        for ev in evs:
            self._event_clients(dev.hca, ev, dev.num)
        self.ipoib.port_events(dev)         # (IPoIB: the interfaces on that port)

    def _ib_sysfs_port(self, dev) -> None:
        """(``dev``: an IB port: the device itself for port 1.)"""
        t = self.sysfs
        n = dev.num
        t.set_port(dev.name, n, state=dev.state, phys_state=dev.phys_state, rate=dev.rate, lid=dev.lid,
                   sm_lid=dev.sm_lid, lid_mask_count=dev.lmc, cap_mask=dev.cap_mask, link_layer="InfiniBand",
                   sm_sl=dev.sm_sl)
        t.set_gids(dev.name, n, dev.gid_table)
        t.set_pkeys(dev.name, n, dev.pkeys)

    def _event_clients(self, dev: Device, ev: int, port: int = 1) -> None:
        for cl in self.clients.values():
            if cl.device is dev:
                cl.event(ev, port=port)

    def _busy(self) -> None:
        self.last_busy = time.monotonic()
        if self.sleeping:
            self.sleeping = False
            for dev in self.devices.values():
                for dqp in dev.qps.values():
                    dqp.sq.wake()
                    if dqp.rq is not None:
                        dqp.rq.wake()
                for srq in dev.srqs:
                    srq.wq.wake()

    def _sleep_rings(self) -> None:
        ok = True
        for dev in self.devices.values():
            for dqp in dev.qps.values():
                ok &= dqp.sq.sleep()
                if dqp.rq is not None:
                    ok &= dqp.rq.sleep()
            for srq in dev.srqs:
                ok &= srq.wq.sleep()
        if ok:
            self.sleeping = True
        else:
            self._busy()

    def adopt_sleep(self, *queues) -> None:
        """A new queue sleeps if the daemon does (so the library rings its
        doorbell); if work is already in it, the daemon wakes."""
        if self.sleeping and not all(q.sleep() for q in queues if q is not None):
            self._busy()
    def _dispatch_events(self, dev: Device) -> None:
        if not dev.events:
            return
        evs = dev.events[:]
        dev.events.clear()
        owners = {id(d.qp): d for d in dev.qps.values()}
        for ev, obj in evs:
            dqp = owners.get(id(obj))
            if dqp is not None:
                dqp.owner.event(ev, qp=dqp.handle)
                continue
            for srq in dev.srqs:
                if srq.srq is obj:
                    srq.owner.event(ev, srq=srq.handle)

    # ------------------------------------------------------------ clients
    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return
        except OSError as e:                        # EMFILE, ENFILE, ENOBUFS...: the caller sees a reset
            log.warning("cannot accept a control connection: %s", e)
            return
        try:
            client = Client(self, sock)
        except OSError:                             # gone before we asked who it is
            sock.close()
            return
        if client.uid not in (os.getuid(), 0):
            sock.close()
            return
        sock.setblocking(False)
        self.clients[sock.fileno()] = client
        self.sel.register(sock, selectors.EVENT_READ, ("client", client))

    def client_interest(self, client: Client) -> None:
        """Read a client's requests while nothing waits to go to it; else
        wait until its socket takes more (and read nothing meanwhile: the
        replies of a process that does not read them cannot pile up)."""
        want = selectors.EVENT_WRITE if client.outbox else selectors.EVENT_READ
        try:
            if self.sel.get_key(client.sock).events != want:
                self.sel.modify(client.sock, want, ("client", client))
        except (KeyError, ValueError):              # dropped already
            pass

    def drop(self, client: Client) -> None:
        try:
            self.sel.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        self.clients.pop(client.sock.fileno(), None)
        client.close()
        client.broken = True                        # nothing more is sent to it
        while client.outbox:
            close_fds(client.outbox.popleft()[1])
        client.sock.close()

    def _client_writable(self, client: Client) -> None:
        if client.broken:
            self.drop(client)
            return
        try:
            client.flush()
        except BlockingIOError:
            return
        except OSError:
            self.drop(client)
            return
        self.client_interest(client)

    def _client_readable(self, client: Client) -> None:
        try:
            msg, fds = recv_msg(client.sock, max_bytes=MAX_MSG)
        except ControlError as e:                   # garbage, or too long: say so, keep the connection
            if not e.fragment:                      # (the rest of a refused message was answered with it)
                client.send({"seq": e.seq, "errno": e.errno, "msg": e.strerror})
            return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(client)
            return
        if msg is None or client.broken:
            close_fds(fds)
            self.drop(client)
            return
        # a request is no data-path work: it wakes no ring (that is a pass
        # over every QP's rings, and then spinning over them); a queue it
        # creates takes the daemon's sleep state instead (adopt_sleep)
        try:
            reply, out_fds = self.run_command(client, msg, fds)
        finally:
            # The request's fds are the dispatcher's, whatever the command
            # did: a command that keeps one keeps its own dup (or just the
            # mapping of a memfd), so each is closed here, exactly once.
            close_fds(fds)
        client.send(reply, out_fds)
        if self.rdma_cm.outq:                 # events a request caused go after its reply
            self.rdma_cm.flush()

    def run_command(self, client: Client, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        """The reply to one request, never an exception: every failure is
        an errno reply (``out_fds``, new fds the reply carries, belong to it)."""
        seq = msg.get("seq")
        if not (seq is None or valid_seq(seq)):
            return {"seq": None, "errno": errno.EINVAL, "msg": "bad request: seq must be an integer"}, []
        try:
            op = msg.get("op")
            # the command table: the command exists, a device is open if it
            # needs one, the fields read before any state are well formed
            check_request(op, msg, len(fds), client.device is not None)
            reply, out_fds = HANDLERS[op](self, client, msg, fds)
            return dict(reply or {}, seq=seq, errno=0), out_fds
        except VerbsError as e:
            reply = {"seq": seq, "errno": e.errno, "msg": e.strerror}
            if getattr(e, "extack", None):          # netlink's extended ack message
                reply["extack"] = e.extack
        except KeyError as e:
            reply = {"seq": seq, "errno": errno.EINVAL, "msg": f"bad request: missing field {e}"}
        except (TypeError, ValueError, OverflowError, struct.error) as e:
            reply = {"seq": seq, "errno": errno.EINVAL, "msg": f"bad request: {e}"}
        except OSError as e:
            reply = {"seq": seq, "errno": e.errno or errno.EIO, "msg": e.strerror or str(e)}
        except MemoryError:
            reply = {"seq": seq, "errno": errno.ENOMEM, "msg": "out of memory"}
        except Exception as e:                      # a bug must not take the daemon down
            log.exception("command %r from pid %d failed", msg.get("op"), client.pid)
            reply = {"seq": seq, "errno": errno.EIO, "msg": f"internal error: {type(e).__name__}: {e}"}
        return reply, []

    # ------------------------------------------------------------ devices
    def add_device(self, dev: Device) -> None:
        caps = dev.caps
        caps.max_mr_size = min(caps.max_mr_size, os.sysconf("SC_PHYS_PAGES") * PAGE_SIZE)
        for name, value in self.limits.items():
            setattr(caps, name, min(getattr(caps, name), value))
        dev.ifindex = self._next_ifindex
        self._next_ifindex += 1
        self.devices[dev.name] = dev
        self.topology_changed()
        self.rdma_cm.add_device(dev, int.from_bytes(dev.node_guid, "big"))
        self.rdma_cm.device_added(dev)
        for s in dev.sockets:
            self.sel.register(s.sock, selectors.EVENT_READ, ("udp", (dev, s)))
        t = self.sysfs
        if dev.link_layer == LINK_LAYER_IB:
            if dev.link.sock is not None:
                self.sel.register(dev.link.sock, selectors.EVENT_READ, ("fabric", dev))
            t.add_device(dev.name, dev.node_guid, dev.sys_image_guid, node_desc=f"{dev.name} softrdma",
                         **{k: v for k, v in self.pci.device_attrs(dev).items() if k != "parent"})
            self.pci.device_added(dev)
            self._ib_sysfs_port(dev)
            t.add_umad(dev.name, 1)
            dev.port_events.clear()                 # (the device is new: nobody to tell)
            self._write_counters(dev)
            self.ipoib.add_device(dev)
            return
        t.add_device(dev.name, **{**softrdma_device_attrs(dev.mac, dev.netdev), **self.pci.device_attrs(dev)})
        self.pci.device_added(dev)
        t.set_port(dev.name, 1, state=dev.state, phys_state=5 if dev.state == 4 else 3)
        t.set_gids(dev.name, 1, dev.gid_table)
        t.set_pkeys(dev.name, 1)
        t.set_ecn(dev.netdev, dev.cc.as_dict())
        self._write_counters(dev)

    def _write_counters(self, dev: Device) -> None:
        tr = dev.traffic
        hw = dev.hw_counters()
        pma = rxe_pma_counters(tr["tx_bytes"], tr["rx_bytes"], tr["tx_packets"], tr["rx_packets"])
        # rxe's PMA leaves these 0; PortCountersExtended defines them, and the daemon knows them
        pma.update(multicast_xmit_packets=dev.mcast.xmit_packets, multicast_rcv_packets=dev.mcast.rcv_packets)
        if dev.link_layer == LINK_LAYER_IB:
            ib = dev.ib_counters
            pma.update(port_xmit_discards=ib["port_xmit_discards"], port_rcv_errors=ib["port_rcv_errors"])
            for p in dev.ib_ports[1:]:               # port 2 ...: its own traffic and drops
                tr, ib = as_dict(p.cnt, TRAFFIC), p.ib_counters
                pp = rxe_pma_counters(tr["tx_bytes"], tr["rx_bytes"], tr["tx_packets"], tr["rx_packets"])
                pp.update(port_xmit_discards=ib["port_xmit_discards"], port_rcv_errors=ib["port_rcv_errors"])
                self.sysfs.update_counters(dev.name, p.num, pp, None)
        self.sysfs.update_counters(dev.name, 1, pma, hw)
        cm = getattr(dev, "cm", None)
        if cm is not None:
            self.sysfs.update_cm_counters(dev.name, 1, {
                g: dict(zip(CM_COUNTER_NAMES, getattr(cm, g)))
                for g in ("cm_tx_msgs", "cm_tx_retries", "cm_rx_msgs", "cm_rx_duplicates")})

    def refresh_sysfs(self) -> None:
        """Counters in the tree are current within a second, and what was
        written into a device's ECN and SR-IOV files is in force within a
        second."""
        for dev in self.devices.values():
            self._write_counters(dev)
            if dev.link_layer != LINK_LAYER_IB:
                self._ecn_writes(dev)
        self.pci.refresh()
        self.ipoib.refresh_sysfs()

    def _ecn_writes(self, dev: Device) -> None:
        """Apply what someone wrote into ``dev``'s ECN files (``echo 0 >
        .../roce_rp/enable/3``, as on mlx5); a value the knob refuses is
        logged and the file shows the value in force again."""
        writes = self.sysfs.ecn_writes(dev.netdev)
        if not writes:
            return
        for point, name, prio, text in writes:
            try:
                dev.cc.set(point, name, text.strip(), prio)
            except VerbsError as e:
                log.warning("%s: ecn/roce_%s/%s%s: %s", dev.netdev, point, name,
                            f"/{prio}" if prio is not None else "", e)
        dev.cc_changed()
        self.sysfs.set_ecn(dev.netdev, dev.cc.as_dict())

    # ------------------------------------------------------------ teardown
    def destroy(self, c: Client, kind: str, obj) -> None:
        free = FREE.get(kind)
        if free is not None:
            free(self, c, obj)

    def shutdown(self) -> None:
        for client in list(self.clients.values()):
            self.drop(client)
        self.pci.shutdown()
        self.ipoib.close()
        for dev in self.devices.values():
            dev.close()
            try:
                self.sysfs.remove_device(dev.name)
                if dev.netdev:
                    self.sysfs.remove_ecn(dev.netdev)
            except (KeyError, LookupError, OSError):
                pass
        if self.netlink is not None:
            self.netlink.close()
        self.sel.close()
        self.listener.close()
        try:
            os.unlink(self.sock_path)
        except FileNotFoundError:
            pass
        os.close(self.lock_fd)


__all__ = ["Daemon"]
