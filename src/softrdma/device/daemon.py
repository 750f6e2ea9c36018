"""softrdmad: the device daemon -- the control socket, the clients' objects,
and the one loop that drives every device.

One selector loop, one thread.  Inputs: the listening socket, each client's
control connection, each device's UDP sockets, each QP/SRQ doorbell.  After
any input, and while traffic flows, the loop polls the shared rings,
routes what the transports produced, and fires QP timers.  After a quiet
spell (``SPIN_S``, 2 ms; env SOFTRDMA_SPIN_S for experiments) it tells
every ring it sleeps (so the library rings the doorbell) and blocks until
the next input or QP deadline.  Before a QP timer fires, the device's
sockets are read empty; a pass that comes much later than the loop planned
(the process was descheduled) stops the ACK timers for the stalled time
(``Device.stalled``): the host's stall is not the peer's.

A client connection is the uverbs file of one Context: every object it
creates belongs to it, and all of them are destroyed when it closes --
whatever way the process ended.
"""

from __future__ import annotations

import array
import collections
import contextlib
import errno
import fcntl
import logging
import os
import selectors
import signal
import socket
import struct
import time

from ..enums import (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_WRITE, IBV_EVENT_DEVICE_FATAL,
                     IBV_EVENT_GID_CHANGE, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR)
from ..errors import VerbsError
from ..transport.cm import COUNTER_NAMES as CM_COUNTER_NAMES
from ..transport.faults import FaultSettings
from ..transport.mw import MW
from ..transport.qp import QP, SRQ, QPAttr, QPCap
from . import abi
from . import request as rq
from .capture import BOTH, Capture
from .cm_commands import CmCommands
from .control import MAX_MSG, ControlError, encode, recv_msg, valid_seq
from .core import DevChannel, DevCQ, Device, DevQP, DevSRQ
from .net import gid_to_ip
from .rdma_cm import RdmaCm
from .shm import Ring
from .stat import StatCommands, net_admin
from .sysfs import SysfsTree, rxe_pma_counters, softrdma_device_attrs

log = logging.getLogger("softrdmad")
SPIN_S = float(os.environ.get("SOFTRDMA_SPIN_S", "0.002"))
STALL_S = 0.004           # what one loop pass may take; a later pass: the process was descheduled (a time slice)
SOCKET_NAME = "softrdmad.sock"
LOCK_NAME = "softrdmad.lock"
PROTOCOL_VERSION = 1


def default_run_dir() -> str:
    env = os.environ.get("SOFTRDMA_RUN")
    if env:
        return env
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "softrdma")
    # memory-backed like /run: the sysfs tree is thousands of small files
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return f"/dev/shm/softrdma-{os.getuid()}"
    return f"/tmp/softrdma-{os.getuid()}"


def _peer_cred(sock: socket.socket) -> tuple[int, int, int]:
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid, gid


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


class Objects(dict):
    """A client's objects, handle -> (kind, object), counting each kind as
    they come and go (``count``): the device's limits are checked against
    the sum over its clients without a pass over thousands of objects."""

    def __init__(self):
        super().__init__()
        self.count: collections.Counter = collections.Counter()

    def __setitem__(self, h, entry) -> None:
        old = self.get(h)
        if old is not None:
            self.count[old[0]] -= 1
        super().__setitem__(h, entry)
        self.count[entry[0]] += 1

    def __delitem__(self, h) -> None:
        kind = self[h][0]
        super().__delitem__(h)
        self.count[kind] -= 1

    def pop(self, h, *default):
        if h in self:
            entry = self[h]
            del self[h]
            return entry
        return super().pop(h, *default)

    def clear(self) -> None:
        super().clear()
        self.count.clear()


#: the object kinds the device counts against its limits (DeviceCaps), and
#: the limit each is checked against
OBJECT_LIMITS = {"qp": "max_qp", "cq": "max_cq", "mr": "max_mr", "pd": "max_pd", "srq": "max_srq",
                 "ah": "max_ah", "mw": "max_mw"}
#: contexts (control connections with a device open) one user may hold at
#: once unless it has CAP_SYS_RESOURCE, as an rlimit (``--limit max_contexts_per_user=N``)
MAX_CONTEXTS_PER_USER = 1024
CAP_SYS_RESOURCE = 24
CAP_IPC_LOCK = 14
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _caps_of(pid: int) -> int:
    """The effective capability set of ``pid`` (0 if unknown)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _memlock_limit(pid: int) -> int | None:
    """The soft RLIMIT_MEMLOCK of ``pid`` in bytes (None: unlimited), from
    /proc/PID/limits; the daemon's own if that cannot be read."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max locked memory"):
                    soft = line[len("Max locked memory"):].split()[0]
                    return None if soft == "unlimited" else int(soft)
    except (OSError, ValueError, IndexError):
        pass
    import resource
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return None if soft == resource.RLIM_INFINITY else soft


#: records queued for a client that does not read its socket, past which
#: further async events for it are dropped (and counted); replies are never
#: dropped, and a client with anything queued is not read from until the
#: queue drains, so replies cannot pile up
MAX_QUEUED = 1024


class Client:
    """One control connection: its device and the objects it owns.

    Everything sent to the client goes through ``send``: the socket is
    non-blocking, and what it cannot take now waits in ``outbox`` (records
    with the fds they carry, which the outbox owns) until the socket is
    writable -- a process that stops reading its socket never blocks the
    daemon's loop."""

    def __init__(self, daemon: "Daemon", sock: socket.socket):
        self.daemon = daemon
        self.sock = sock
        self.pid, self.uid, _ = _peer_cred(sock)
        self.comm = _comm(self.pid)
        # the kernel's has_cap_net_admin for what nldev shows (keys): decided
        # when the connection is made, from the process that made it
        self.net_admin = net_admin(self.pid)
        self.device: Device | None = None
        self.objects: Objects = Objects()
        self.memlock: int | None = None             # RLIMIT_MEMLOCK to charge MRs against (None: CAP_IPC_LOCK)
        self.pinned: dict[int, int] = {}            # id of an MR's (mr, region) entry -> pages charged
        self.ah_pd: dict[int, object] = {}          # AH handle -> its PD (an AddressVector has none)
        self._next = 1
        self.outbox: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self.broken = False                 # a send failed: the connection is dropped on its next event
        self.events_dropped = 0
        self.cm_token: str | None = None     # names this connection as an rdma_cm event channel (migrate)

    def add(self, kind: str, obj) -> int:
        h = self._next
        self._next += 1
        self.objects[h] = (kind, obj)
        return h

    def get(self, h, kind: str):
        entry = self.objects.get(h) if type(h) is int else None
        if entry is None or entry[0] != kind:
            raise VerbsError(errno.EINVAL, f"no {kind} with handle {h!r}")
        return entry[1]

    def pd_of(self, h: int):
        """The PD object ``h`` was made on (None for what has no PD)."""
        kind, obj = self.objects[h]
        if kind == "mr":
            return obj[0].pd
        if kind == "qp":
            return obj.qp.pd
        if kind == "srq":
            return obj.srq.pd
        if kind == "mw":
            return obj.pd
        if kind == "ah":
            return self.ah_pd.get(h)
        return None

    def ah_lookup(self, h: int):
        entry = self.objects.get(h)
        return entry[1] if entry is not None and entry[0] == "ah" else None

    def event(self, event_type: int, **kw) -> None:
        self.send({"event": int(event_type), **kw}, event=True)

    def send(self, msg: dict, fds=(), event: bool = False) -> None:
        """Send ``msg`` now, or queue what the socket cannot take.  ``fds``
        become the send's: each is closed once it went out (or could not)."""
        fds = list(fds)
        try:
            records = encode(msg)
        except (TypeError, ValueError) as e:          # a handler's bug: tell the client, keep going
            log.error("cannot encode a message for pid %d: %s", self.pid, e)
            records = encode({"seq": msg.get("seq"), "errno": errno.EIO, "msg": "reply could not be encoded"})
            _close_fds(fds)
            fds = []
        if self.broken or (event and len(self.outbox) >= MAX_QUEUED):
            if event and not self.broken:
                self.events_dropped += 1
            _close_fds(fds)
            return
        queued = bool(self.outbox)
        for i, data in enumerate(records):
            if not self.outbox:
                try:
                    self._send_record(data, fds if i == 0 else ())
                    if i == 0:
                        _close_fds(fds)
                    continue
                except BlockingIOError:
                    pass
                except OSError:
                    self.broken = True            # the peer is gone: dropped when its EOF or HUP is seen
                    if i == 0:
                        _close_fds(fds)
                    return
            self.outbox.append((data, fds if i == 0 else []))
        if self.outbox and not queued:
            self.daemon.client_interest(self)     # wait for room; read nothing from it meanwhile

    def _send_record(self, data: bytes, fds) -> None:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.sock.sendmsg([data], anc)

    def flush(self) -> None:
        """Send what waits while the socket takes it (OSError: the peer is gone)."""
        while self.outbox:
            data, fds = self.outbox[0]
            self._send_record(data, fds)
            self.outbox.popleft()
            _close_fds(fds)

    def close(self) -> None:
        """Destroy everything this client created (the process is gone)."""
        dev = self.device
        for h, (kind, obj) in sorted(self.objects.items(), reverse=True):
            try:
                self.daemon.destroy(self, kind, obj)
            except Exception:                      # noqa: BLE001 -- cleanup must go on
                log.exception("destroying %s %d", kind, h)
        self.objects.clear()
        if dev is not None:
            dev.tx[:] = [t for t in dev.tx if t[0].qp_num in dev.qps or t[0] is dev.gsi]


def _close_fds(fds) -> None:
    """Close fds this process owns: each exactly once, by its one owner."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError as e:                        # would be a double close: a bug, never fatal
            log.error("closing fd %d: %s", fd, e)


class Daemon(StatCommands, CmCommands):
    def __init__(self, run_dir: str, devices: list[Device], limits: dict[str, int] | None = None):
        self.run_dir = run_dir
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
            from pyroute2 import IPRoute
            from pyroute2.netlink.rtnl import RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR, RTMGRP_LINK
            self.netlink = IPRoute()
            self.netlink.bind(groups=RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_LINK)
            self.sel.register(self.netlink.fileno(), selectors.EVENT_READ, ("netlink", None))
        except Exception as e:                      # noqa: BLE001 -- no netlink: static addresses
            log.warning("not following address changes: %s", e)
            self.netlink = None
        self._next_ifindex = 0
        self.rdma_cm = RdmaCm(self)
        self.sysfs = SysfsTree(os.path.join(self.run_dir, "sys"))
        self.counters_at = 0.0
        self.udp_port = devices[0].udp_port if devices else 4791
        for dev in devices:
            self.add_device(dev)

    @property
    def by_ip(self) -> dict:
        """Every address any of our devices has a GID for -> that device
        (packets to them are delivered without a socket)."""
        if self._by_ip is None:
            self._by_ip = {gid_to_ip(e.gid): d for d in self.devices.values() for _, e in d.gid_table}
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
        events = self.sel.select(timeout)
        if not events and timeout == 0.0:
            # spinning with nothing to do: give the core to the applications
            # (two cores, busy-polling apps and daemons: without this every
            # round trip waits for a scheduler tick)
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
        for dev in self.devices.values():
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
        if rc.outq:
            rc.flush()

    @staticmethod
    def rdma_cm_deadline(dev) -> float | None:
        cm = getattr(dev, "cm", None)
        if cm is None or not cm.ids:
            return dev.gsi.deadline
        d, g = cm.deadline, dev.gsi.deadline
        return g if d is None else d if g is None else min(d, g)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def _netlink_readable(self) -> None:
        """Address or link changes: refresh the devices on that netdev."""
        try:
            msgs = self.netlink.get()
        except Exception:                           # noqa: BLE001
            return
        touched = {m.get("index") for m in msgs}
        for dev in self.devices.values():
            if dev.netdev_index in touched:
                self.refresh_netdev(dev)

    def refresh_netdev(self, dev: Device) -> None:
        from .netdev import netdev_info
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
        if new_state != dev.state:
            dev.state = new_state
            self.sysfs.set_port(dev.name, 1, state=new_state, phys_state=5 if new_state == 4 else 3)
            self._event_clients(dev, IBV_EVENT_PORT_ACTIVE if new_state == 4 else IBV_EVENT_PORT_ERR)

    def _event_clients(self, dev: Device, ev: int) -> None:
        for cl in self.clients.values():
            if cl.device is dev:
                cl.event(ev, port=1)

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

    def _drop(self, client: Client) -> None:
        try:
            self.sel.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        self.clients.pop(client.sock.fileno(), None)
        client.close()
        client.broken = True                        # nothing more is sent to it
        while client.outbox:
            _close_fds(client.outbox.popleft()[1])
        client.sock.close()

    def _client_writable(self, client: Client) -> None:
        if client.broken:
            self._drop(client)
            return
        try:
            client.flush()
        except BlockingIOError:
            return
        except OSError:
            self._drop(client)
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
            self._drop(client)
            return
        if msg is None or client.broken:
            _close_fds(fds)
            self._drop(client)
            return
        # a request is no data-path work: it wakes no ring (that is a pass
        # over every QP's rings, and then spinning over them); a queue it
        # creates takes the daemon's sleep state instead (_adopt_sleep)
        try:
            reply, out_fds = self.run_command(client, msg, fds)
        finally:
            # The request's fds are the dispatcher's, whatever the command
            # did: a command that keeps one keeps its own dup (or just the
            # mapping of a memfd), so each is closed here, exactly once.
            _close_fds(fds)
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
            reply, out_fds = self.command(client, msg, fds)
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

    # ------------------------------------------------------------ commands
    def command(self, c: Client, m: dict, fds: list[int]):
        op = m.get("op")
        handler = getattr(self, f"cmd_{op}", None) if isinstance(op, str) else None
        if handler is None:
            raise VerbsError(errno.EOPNOTSUPP, f"unknown command {op!r}")
        if not op.startswith("cm_") and op not in ("devices", "open", "resources", "links", "link_add", "link_delete", "link_set",
                      "stat_get", "stat_dump", "stat_set", "stat_del", "stat_get_status", "stat_snapshot") and \
                c.device is None:
            raise VerbsError(errno.EINVAL, "no device opened on this connection")
        return handler(c, m, fds)

    def cmd_devices(self, c, m, fds):
        return {"version": PROTOCOL_VERSION,
                "devices": [{"name": d.name, "netdev": d.netdev, "node_guid": _node_guid(d.mac)}
                            for d in self.devices.values()]}, []

    def cmd_open(self, c, m, fds):
        name = rq.string(m, "device")
        dev = self.devices.get(name)
        if dev is None:
            raise VerbsError(errno.ENODEV, f"no device {name!r}")
        if c.device is not None and c.device is not dev:
            # a uverbs file belongs to one device for its whole life
            raise VerbsError(errno.EINVAL, f"this connection has {c.device.name} open")
        if c.device is None:
            # a process's limits, read when it opens the device: contexts per
            # user (an rlimit: CAP_SYS_RESOURCE is exempt), and the pages its
            # MRs pin (ib_umem_get charges RLIMIT_MEMLOCK unless CAP_IPC_LOCK)
            caps = _caps_of(c.pid)
            if not caps >> CAP_SYS_RESOURCE & 1:
                mine = sum(1 for cl in self.clients.values() if cl.uid == c.uid and cl.device is not None)
                if mine >= self.max_contexts_per_user:
                    raise VerbsError(errno.EMFILE, f"user {c.uid} has {mine} contexts open, the most"
                                                   f" softrdmad allows one user ({self.max_contexts_per_user})")
            c.memlock = None if caps >> CAP_IPC_LOCK & 1 else _memlock_limit(c.pid)
        c.device = dev
        caps = dev.caps
        return {"device": dev.name, "node_guid": _node_guid(dev.mac), "attr": {
            "max_qp_wr": caps.max_qp_wr, "max_sge": caps.max_sge,
            "max_qp_rd_atom": caps.max_qp_rd_atom, "max_qp_init_rd_atom": caps.max_qp_init_rd_atom,
            "max_inline_data": caps.max_inline_data, "max_mtu": caps.max_mtu,
            "active_mtu": caps.active_mtu, "max_msg_sz": caps.max_msg_sz, "max_cqe": caps.max_cqe,
            "max_mr_size": caps.max_mr_size, **{a: getattr(caps, a) for a in OBJECT_LIMITS.values()}}}, []

    @staticmethod
    def _room_for(c, kind: str) -> None:
        """EINVAL if the device holds its limit of ``kind`` already: rxe's
        pools (__rxe_add_to_pool: num_elem > max_elem -> -EINVAL); counted
        over every client of the device."""
        dev = c.device
        name = OBJECT_LIMITS[kind]
        limit = getattr(dev.caps, name)
        used = sum(cl.objects.count[kind] for cl in c.daemon.clients.values() if cl.device is dev)
        if used >= limit:
            raise VerbsError(errno.EINVAL, f"{dev.name} has {used} {kind.upper()}s, its {name} ({limit})")

    def cmd_query_port(self, c, m, fds):
        if m.get("port", 1) != 1:
            raise VerbsError(errno.EINVAL, "port must be 1")
        return {"attr": c.device.port_attrs()}, []

    def cmd_query_gid(self, c, m, fds):
        idx = m.get("index", 0)
        if type(idx) is not int or not 0 <= idx < c.device.gid_table.capacity:
            raise VerbsError(errno.EINVAL, "GID index out of range")
        gid = c.device.gid(idx)
        return {"gid": (gid or bytes(16)).hex(), "type": "RoCE v2" if gid is not None else None}, []

    # -- the client's fds: the dispatcher (_client_readable) owns and closes
    #    every fd a request brought; a command keeps only what these give it
    def _ring(self, fd: int, what: str, *, slot_size: int | None = None, min_slot: int = 1) -> Ring:
        """The ring in the memfd ``fd`` (mapped: the fd itself stays the
        dispatcher's); EINVAL if it is no sealed memfd holding a ring with
        the slots the queue needs."""
        try:
            ring = Ring.map_fd(fd)
        except ValueError as e:
            raise VerbsError(errno.EINVAL, f"bad {what} ring: {e}") from None
        if (slot_size is not None and ring.slot_size != slot_size) or ring.slot_size < min_slot:
            got = ring.slot_size
            ring.close()
            raise VerbsError(errno.EINVAL, f"bad {what} ring: slots of {got} bytes, "
                                           f"{slot_size or min_slot} needed")
        return ring

    @staticmethod
    def _eventfd(fd: int, what: str) -> int:
        """Our own non-blocking duplicate of the eventfd ``fd`` (the caller
        owns the duplicate); EINVAL for any other kind of fd -- the loop
        reads and writes doorbells and must never meet a file, a pipe end
        or a socket there."""
        try:
            kind = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            kind = None if os.path.isdir("/proc/self/fd") else "anon_inode:[eventfd]"   # no /proc: trust it
        if kind != "anon_inode:[eventfd]":
            raise VerbsError(errno.EINVAL, f"the {what} doorbell must be an eventfd")
        own = os.dup(fd)
        os.set_blocking(own, False)
        return own

    def cmd_alloc_pd(self, c, m, fds):
        self._room_for(c, "pd")
        return {"pd": c.add("pd", object())}, []

    def cmd_dealloc_pd(self, c, m, fds):
        pd = c.get(m.get("pd"), "pd")
        # every MR, MW, QP, SRQ and AH holds a use count on its PD (ib_dealloc_pd_user's EBUSY)
        if any(c.pd_of(h) is pd for h in c.objects):
            raise VerbsError(errno.EBUSY, "PD still in use")
        del c.objects[m["pd"]]
        return {}, []

    def cmd_reg_mr(self, c, m, fds):
        pd = c.get(m.get("pd"), "pd")
        length = rq.uint(m, "length", rq.U64, lo=1)
        addr = rq.uint(m, "addr", rq.U64)
        access = rq.uint(m, "access", rq.U32)
        if addr + length - 1 > rq.U64:                 # ib_umem_get: the range wraps
            raise VerbsError(errno.EINVAL, "addr + length overflows")
        if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) and not access & IBV_ACCESS_LOCAL_WRITE:
            # ib_check_mr_access: the remote end may write only what we may
            raise VerbsError(errno.EINVAL, "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE")
        max_size = c.device.caps.max_mr_size
        if length > max_size:
            raise VerbsError(errno.EINVAL, f"MR of {length} bytes, above the device's max_mr_size ({max_size})")
        self._room_for(c, "mr")
        pages = 0
        if c.memlock is not None:                      # ib_umem_get's RLIMIT_MEMLOCK charge, per user
            if c.memlock == 0:                         # can_do_mlock
                raise VerbsError(errno.EPERM, "RLIMIT_MEMLOCK is 0: no memory may be pinned")
            pages = ((addr + length + PAGE_SIZE - 1) // PAGE_SIZE) - addr // PAGE_SIZE
            if self.locked_pages[c.uid] + pages > c.memlock // PAGE_SIZE:
                raise VerbsError(errno.ENOMEM, f"pinning {pages} more pages exceeds RLIMIT_MEMLOCK"
                                               f" ({c.memlock} bytes; user {c.uid} has"
                                               f" {self.locked_pages[c.uid]} pinned)")
        if len(fds) != 1:
            raise VerbsError(errno.EINVAL, "reg_mr needs the memory fd")
        from .shm import SharedRegion
        try:
            region = SharedRegion.map_fd(fds[0], length)
        except ValueError as e:
            raise VerbsError(errno.EINVAL, f"bad MR memory: {e}") from None
        try:
            mr = c.device.memory.register(pd, addr, length, access, region.view[:length])
        except BaseException:
            region.close()
            raise
        entry = (mr, region)
        h = c.add("mr", entry)
        if pages:
            c.pinned[id(entry)] = pages
            self.locked_pages[c.uid] += pages
        return {"mr": h, "lkey": mr.lkey, "rkey": mr.rkey}, []

    def cmd_dereg_mr(self, c, m, fds):
        obj = c.get(m.get("mr"), "mr")
        if obj[0].mws:                          # rxe_dereg_mr: not while windows are bound
            raise VerbsError(errno.EINVAL, "memory windows are bound to the MR")
        self.destroy(c, "mr", obj)
        del c.objects[m["mr"]]
        return {}, []

    def cmd_alloc_mw(self, c, m, fds):
        """ibv_alloc_mw: type 1 or 2 (uverbs: any other type is EINVAL)."""
        pd = c.get(m.get("pd"), "pd")
        mw_type = m.get("type")
        if type(mw_type) is not int or mw_type not in (1, 2):
            raise VerbsError(errno.EINVAL, f"memory window type {mw_type!r}")
        self._room_for(c, "mw")
        mw = MW(c.device.memory, pd, mw_type)
        return {"mw": c.add("mw", mw), "rkey": mw.rkey}, []

    def cmd_dealloc_mw(self, c, m, fds):
        mw = c.get(m.get("mw"), "mw")
        self.destroy(c, "mw", mw)
        del c.objects[m["mw"]]
        return {}, []

    def cmd_create_comp_channel(self, c, m, fds):
        ch = DevChannel(0)
        h = c.add("channel", ch)
        ch.handle = h
        # the application's end goes with the reply (which closes our copy
        # once sent); the daemon keeps its own end only
        theirs, ch.theirs = ch.theirs, None
        return {"channel": h}, [theirs.detach()]

    def cmd_destroy_comp_channel(self, c, m, fds):
        ch = c.get(m.get("channel"), "channel")
        if any(o[0] == "cq" and o[1].channel is ch for o in c.objects.values()):
            raise VerbsError(errno.EBUSY, "completion channel still used by a CQ")
        ch.close()
        del c.objects[m["channel"]]
        return {}, []

    def cmd_create_cq(self, c, m, fds):
        if len(fds) != 1:
            raise VerbsError(errno.EINVAL, "create_cq needs the ring fd")
        ch = c.get(m["channel"], "channel") if m.get("channel") else None
        self._room_for(c, "cq")
        max_cqe = c.device.caps.max_cqe
        cqe = rq.uint(m, "cqe", rq.U32, 1)
        if not 1 <= cqe <= max_cqe:                     # rxe_cq_chk_attr
            raise VerbsError(errno.EINVAL, f"CQ of {cqe} entries (1..max_cqe, {max_cqe})")
        ring = self._ring(fds[0], "CQ", slot_size=abi.CQE_BYTES)
        if ring.nslots > 1 << max_cqe.bit_length():     # the ring holds cqe + 1, a power of two
            ring.close()
            raise VerbsError(errno.EINVAL, f"CQ ring of {ring.nslots} slots for max_cqe {max_cqe}")
        cq = DevCQ(0, ring, ch, c)
        cq.handle = c.add("cq", cq)
        return {"cq": cq.handle}, []

    def cmd_destroy_cq(self, c, m, fds):
        cq = c.get(m.get("cq"), "cq")
        if any(o[0] == "qp" and cq in (o[1].qp.send_cq, o[1].qp.recv_cq) for o in c.objects.values()):
            raise VerbsError(errno.EBUSY, "CQ still used by a QP")
        self.destroy(c, "cq", cq)
        del c.objects[m["cq"]]
        return {}, []

    def cmd_create_qp(self, c, m, fds):
        dev = c.device
        pd = c.get(m.get("pd"), "pd")
        scq = c.get(m.get("send_cq"), "cq")
        rcq = c.get(m.get("recv_cq"), "cq")
        srq = c.get(m["srq"], "srq") if m.get("srq") else None
        need = 2 if srq is not None else 3
        if len(fds) != need:
            raise VerbsError(errno.EINVAL, f"create_qp needs {need} fds")
        self._room_for(c, "qp")
        cap = QPCap(**rq.fields(rq.obj(m, "cap", {}), rq.QP_CAP, "cap"))
        qp = QP(rq.uint(m, "qp_type"), dev.alloc_qpn(), pd=pd, memory=dev.memory, send_cq=scq, recv_cq=rcq,
                cap=cap, srq=srq.srq if srq else None, sq_sig_all=bool(m.get("sq_sig_all")), caps=dev.caps,
                tx=dev.tx, events=dev.events)
        with contextlib.ExitStack() as undo:            # every step undone if a later one fails
            sq = self._ring(fds[0], "send queue", min_slot=abi.send_slot_size(cap.max_send_sge,
                                                                               cap.max_inline_data))
            undo.callback(sq.close)
            rqr = None
            if srq is None:
                rqr = self._ring(fds[1], "receive queue", min_slot=abi.recv_slot_size(cap.max_recv_sge))
                undo.callback(rqr.close)
            doorbell = self._eventfd(fds[-1], "QP")
            undo.callback(os.close, doorbell)
            dqp = DevQP(0, qp, sq, rqr, doorbell, c, srq)
            self.sel.register(doorbell, selectors.EVENT_READ, ("doorbell", dqp))
            undo.pop_all()
        dqp.handle = c.add("qp", dqp)
        dev.add_qp(dqp)
        self._adopt_sleep(dqp.sq, dqp.rq)
        return {"qp": dqp.handle, "qp_num": qp.qp_num}, []

    def _adopt_sleep(self, *queues) -> None:
        """A new queue sleeps if the daemon does (so the library rings its
        doorbell); if work is already in it, the daemon wakes."""
        if self.sleeping and not all(q.sleep() for q in queues if q is not None):
            self._busy()

    def cmd_modify_qp(self, c, m, fds):
        dqp = c.get(m.get("qp"), "qp")
        mask = rq.uint(m, "mask")
        raw = rq.obj(m, "attr", {})
        a = rq.fields({k: v for k, v in raw.items() if k not in ("ah_attr", "cap")}, rq.QP_ATTR, "attr")
        if "ah_attr" in raw:
            a["ah_attr"] = self._checked_av(c, raw["ah_attr"])
        if "cap" in raw:
            a["cap"] = QPCap(**rq.fields(rq.obj(raw, "cap"), rq.QP_CAP, "cap"))
        self.stat_modify_qp(c.device, dqp, a, mask)
        dqp.qp.modify(QPAttr(**a), mask)
        return {}, []

    def cmd_query_qp(self, c, m, fds):
        dqp = c.get(m.get("qp"), "qp")
        a = dqp.qp.query()
        out = {k: getattr(a, k) for k in ("qp_state", "cur_qp_state", "path_mtu", "qkey", "rq_psn", "sq_psn",
                                          "dest_qp_num", "qp_access_flags", "pkey_index", "sq_draining",
                                          "max_rd_atomic", "max_dest_rd_atomic", "min_rnr_timer", "port_num",
                                          "timeout", "retry_cnt", "rnr_retry", "en_sqd_async_notify")}
        out = {k: int(v) for k, v in out.items()}
        av = a.ah_attr
        out["ah_attr"] = {"dgid": av.dgid.hex(), "sgid_index": av.sgid_index, "flow_label": av.flow_label,
                          "hop_limit": av.hop_limit, "traffic_class": av.traffic_class, "sl": av.sl,
                          "is_global": av.is_global, "port_num": av.port_num, "dlid": av.dlid}
        cap = dqp.qp.cap
        out["cap"] = {k: getattr(cap, k) for k in ("max_send_wr", "max_recv_wr", "max_send_sge",
                                                   "max_recv_sge", "max_inline_data")}
        return {"attr": out}, []

    def cmd_destroy_qp(self, c, m, fds):
        dqp = c.get(m.get("qp"), "qp")
        self.destroy(c, "qp", dqp)
        del c.objects[m["qp"]]
        return {}, []

    def _mcast_args(self, c, m):
        dqp = c.get(m.get("qp"), "qp")
        g = m.get("gid")
        lid = m.get("lid", 0)
        try:
            gid = bytes.fromhex(g) if isinstance(g, str) else b""
        except ValueError:
            gid = b""
        if len(gid) != 16 or type(lid) is not int or not 0 <= lid <= 0xFFFF:
            raise VerbsError(errno.EINVAL, "bad multicast GID or LID")
        return dqp.qp, gid, lid

    def cmd_attach_mcast(self, c, m, fds):
        """ibv_attach_mcast; the device joins the group while any QP is attached."""
        qp, gid, lid = self._mcast_args(c, m)
        dev = c.device
        opened = dev.mcast.attach(qp, gid, lid)
        if opened is not None:
            self.sel.register(opened.sock, selectors.EVENT_READ, ("mcast", (dev, opened)))
        return {}, []

    def cmd_detach_mcast(self, c, m, fds):
        qp, gid, lid = self._mcast_args(c, m)
        self._close_mcast_sockets([c.device.mcast.detach(qp, gid, lid)])
        return {}, []

    def _close_mcast_sockets(self, socks) -> None:
        """Group sockets nobody is attached to any more: leave the group."""
        for sk in socks:
            if sk is None:
                continue
            try:
                self.sel.unregister(sk.sock)
            except (KeyError, ValueError):
                pass
            sk.close()

    def cmd_create_srq(self, c, m, fds):
        pd = c.get(m.get("pd"), "pd")
        if len(fds) != 2:
            raise VerbsError(errno.EINVAL, "create_srq needs 2 fds")
        dev = c.device
        max_wr, max_sge = rq.uint(m, "max_wr", rq.U32, 256), rq.uint(m, "max_sge", rq.U32, 4)
        if not 1 <= max_wr <= dev.caps.max_qp_wr or max_sge > dev.caps.max_sge:     # rxe_srq_chk_init
            raise VerbsError(errno.EINVAL, f"SRQ max_wr {max_wr} (1..{dev.caps.max_qp_wr}), max_sge {max_sge}"
                                           f" (at most {dev.caps.max_sge})")
        self._room_for(c, "srq")
        srq = SRQ(max_wr, max_sge, rq.uint(m, "srq_limit", rq.U32, 0), events=dev.events)
        srq.pd = pd
        with contextlib.ExitStack() as undo:
            ring = self._ring(fds[0], "SRQ", min_slot=abi.recv_slot_size(max_sge))
            undo.callback(ring.close)
            doorbell = self._eventfd(fds[1], "SRQ")
            undo.callback(os.close, doorbell)
            dsrq = DevSRQ(0, srq, ring, doorbell, c)
            self.sel.register(doorbell, selectors.EVENT_READ, ("doorbell", dsrq))
            undo.pop_all()
        dsrq.handle = c.add("srq", dsrq)
        dev.srqs.append(dsrq)
        self._adopt_sleep(dsrq.wq)
        return {"srq": dsrq.handle}, []

    def cmd_modify_srq(self, c, m, fds):
        c.get(m.get("srq"), "srq").srq.modify(rq.uint(m, "srq_limit"))
        return {}, []

    def cmd_destroy_srq(self, c, m, fds):
        dsrq = c.get(m.get("srq"), "srq")
        if any(o[0] == "qp" and o[1].qp.srq is dsrq.srq for o in c.objects.values()):
            raise VerbsError(errno.EBUSY, "SRQ still used by a QP")
        self.destroy(c, "srq", dsrq)
        del c.objects[m["srq"]]
        return {}, []

    def _checked_av(self, c, d: dict):
        """An address vector the device can use (``Device.check_av``: its
        source GID exists and can reach the destination's family, as the
        kernel's rdma_check_ah_attr / rdma_resolve_ip require, else EINVAL);
        every field fits its ibv_ah_attr field first."""
        f = rq.ah_attr(d)
        if "dgid" in f:
            f["dgid"] = f["dgid"].hex()
        f.pop("src_path_bits", None)
        f.pop("static_rate", None)
        if "flow_label" in f:
            f["flow_label"] &= 0xFFFFF                   # 20 bits on the wire; the rest is ignored
        av = c.device.av_from(f)
        c.device.check_av(av, self.by_ip)
        return av

    def cmd_create_ah(self, c, m, fds):
        pd = c.get(m.get("pd"), "pd")
        av = self._checked_av(c, m.get("attr"))
        if not av.is_global:
            raise VerbsError(errno.EINVAL, "RoCE address handles need a GRH")
        self._room_for(c, "ah")
        h = c.add("ah", av)
        c.ah_pd[h] = pd
        return {"ah": h}, []

    def cmd_destroy_ah(self, c, m, fds):
        c.get(m.get("ah"), "ah")
        del c.objects[m["ah"]]
        c.ah_pd.pop(m["ah"], None)
        return {}, []

    def cmd_capture_start(self, c, m, fds):
        """Capture the opened device's packets into the caller's ring (fds:
        the ring's memfd, an eventfd the daemon writes when the reader
        sleeps); ``directions``: capture.RX, TX or BOTH."""
        if len(fds) != 2:
            raise VerbsError(errno.EINVAL, "capture_start needs the ring fd and the doorbell fd")
        dev = c.device
        directions = rq.uint(m, "directions", rq.U32, BOTH)
        with contextlib.ExitStack() as undo:
            ring = self._ring(fds[0], "capture")
            undo.callback(ring.close)
            doorbell = self._eventfd(fds[1], "capture")
            undo.callback(os.close, doorbell)
            try:
                cap = Capture(ring, doorbell, directions, dev.caps.max_mtu)
            except ValueError as e:
                raise VerbsError(errno.EINVAL, str(e)) from None
            undo.pop_all()
        cap.handle = c.add("capture", cap)
        dev.add_capture(cap)
        return {"capture": cap.handle, "entries": ring.nslots}, []

    def cmd_capture_stop(self, c, m, fds):
        """Stop a capture; its counters (packets, bytes, dropped) in the reply.
        What is in the ring stays there for the reader."""
        cap = c.get(m.get("capture"), "capture")
        stats = cap.stats()
        self.destroy(c, "capture", cap)
        del c.objects[m["capture"]]
        return stats, []

    def cmd_links(self, c, m, fds):
        """Devices and their port (``rdma link``/``rdma dev``, ibv_devinfo, ibstat)."""
        out = []
        for d in self.devices.values():
            pa = d.port_attrs()
            out.append({"ifindex": d.ifindex, "ifname": d.name, "port": 1, "netdev": d.netdev,
                        "netdev_index": d.netdev_index, "gso": d.gso, "node_guid": _node_guid(d.mac),
                        "sys_image_guid": _node_guid(d.mac), "addresses": d.addresses,
                        "gids": [g.hex() for g in d.gids], "port_attr": pa, "hw_counters": d.hw_counters(),
                        "clients": sum(1 for cl in self.clients.values() if cl.device is d),
                        "udp": [[sk.ip, sk.port] for sk in d.sockets], "rx_dropped": dict(d.rx_dropped),
                        "gsi": {**d.gsi.counters, "rx_dropped": dict(d.gsi.rx_dropped),
                                "cm_rx_drops": d.cm.rx_drops if getattr(d, "cm", None) else 0},
                        "net": [dict(vars(sk.stats)) for sk in d.sockets]})
            # what nldev's fill_dev_info sends for an rxe device (``rdma dev``): node type CA, no
            # firmware string, rxe's device_cap_flags (RXE_DEVICE_CAP_FLAGS, the value
            # docs/formats/ibv_devinfo.md infers), no CQ DIM; one port
            out[-1].update(node_type=1, fw="", caps=0x01A23C76, dim=False, num_ports=1)
        return {"links": out}, []

    @staticmethod
    def _link_admin(c) -> None:
        """RDMA_NLDEV_CMD_NEWLINK/DELLINK (and softrdma's link set) carry
        RDMA_NL_ADMIN_PERM: EPERM without CAP_NET_ADMIN."""
        if not net_admin(c.pid):
            raise VerbsError(errno.EPERM, "CAP_NET_ADMIN is required to change links")

    def cmd_link_add(self, c, m, fds):
        from .main import make_device
        self._link_admin(c)
        name, netdev = _link_name(m, "name", 63), _link_name(m, "netdev", 15)
        gso = m.get("gso", True)
        if type(gso) is not bool:
            raise VerbsError(errno.EINVAL, "gso is on or off")
        if name in self.devices:
            raise VerbsError(errno.EEXIST, f"device {name} already exists")
        if any(d.netdev == netdev for d in self.devices.values()):
            raise VerbsError(errno.EEXIST, f"{netdev} already has an RDMA link")
        try:
            dev = make_device(f"{name}:{netdev}", self.udp_port)
        except SystemExit as e:
            raise VerbsError(errno.ENODEV, str(e)) from None
        except VerbsError:                  # make_device's own: errno and extack as they are
            raise
        except OSError as e:
            raise VerbsError(e.errno or errno.EIO, str(e)) from None
        dev.set_gso(gso)
        self.add_device(dev)
        return {"ifindex": dev.ifindex}, []

    def cmd_link_set(self, c, m, fds):
        """Change a link's settings; now: ``faults`` (fault injection)."""
        self._link_admin(c)
        name = rq.string(m, "name")
        dev = self.devices.get(name)
        if dev is None:
            raise VerbsError(errno.ENODEV, f"no device {name!r}")
        if "faults" in m:
            seed = rq.uint(m, "seed", rq.U64, None)
            try:
                settings = FaultSettings.from_dict(rq.obj(m, "faults", {}))
            except (TypeError, ValueError) as e:
                raise VerbsError(errno.EINVAL, f"bad faults: {e}") from None
            dev.set_faults(settings, seed)
        return {"faults": dev.faults.settings.as_dict() if dev.faults else None,
                "fault_counters": dev.faults.counters() if dev.faults else None}, []

    def cmd_link_delete(self, c, m, fds):
        self._link_admin(c)
        name = rq.string(m, "name")
        dev = self.devices.get(name)
        if dev is None:
            raise VerbsError(errno.ENODEV, f"no device {name!r}")
        for cl in list(self.clients.values()):
            if cl.device is dev and cl is not c:
                cl.event(IBV_EVENT_DEVICE_FATAL)
                self._drop(cl)
        if c.device is dev:                  # the caller's own context: disassociated, its objects gone
            c.close()
            c.device = None
            c.event(IBV_EVENT_DEVICE_FATAL)
        for s in [*dev.sockets, *dev.mcast.sockets.values()]:
            try:
                self.sel.unregister(s.sock)
            except (KeyError, ValueError):
                pass
        dev.close()
        del self.devices[dev.name]
        self.rdma_cm.device_removed(dev)
        self.stat_device_removed(dev)
        self.topology_changed()
        self.sysfs.remove_device(dev.name)
        return {}, []

    def add_device(self, dev: Device) -> None:
        caps = dev.caps
        caps.max_mr_size = min(caps.max_mr_size, os.sysconf("SC_PHYS_PAGES") * PAGE_SIZE)
        for name, value in self.limits.items():
            setattr(caps, name, min(getattr(caps, name), value))
        dev.ifindex = self._next_ifindex
        self._next_ifindex += 1
        self.devices[dev.name] = dev
        self.topology_changed()
        self.rdma_cm.add_device(dev, int(_node_guid(dev.mac).replace(":", ""), 16))
        self.rdma_cm.device_added(dev)
        for s in dev.sockets:
            self.sel.register(s.sock, selectors.EVENT_READ, ("udp", (dev, s)))
        t = self.sysfs
        t.add_device(dev.name, **softrdma_device_attrs(dev.mac, dev.netdev))
        t.set_port(dev.name, 1, state=dev.state, phys_state=5 if dev.state == 4 else 3)
        t.set_gids(dev.name, 1, dev.gid_table)
        t.set_pkeys(dev.name, 1)
        self._write_counters(dev)

    def _write_counters(self, dev: Device) -> None:
        tr = dev.traffic
        hw = dev.hw_counters()
        pma = rxe_pma_counters(tr["tx_bytes"], tr["rx_bytes"], tr["tx_packets"], tr["rx_packets"])
        # rxe's PMA leaves these 0; PortCountersExtended defines them, and the daemon knows them
        pma.update(multicast_xmit_packets=dev.mcast.xmit_packets, multicast_rcv_packets=dev.mcast.rcv_packets)
        self.sysfs.update_counters(dev.name, 1, pma, hw)
        cm = getattr(dev, "cm", None)
        if cm is not None:
            self.sysfs.update_cm_counters(dev.name, 1, {
                g: dict(zip(CM_COUNTER_NAMES, getattr(cm, g)))
                for g in ("cm_tx_msgs", "cm_tx_retries", "cm_rx_msgs", "cm_rx_duplicates")})

    def refresh_sysfs(self) -> None:
        """Counters in the tree are current within a second."""
        for dev in self.devices.values():
            self._write_counters(dev)

    def cmd_resources(self, c, m, fds):
        """Every object of every client (``rdma resource show``).

        Besides the handle, each object carries what the kernel's restrack
        reports for it: ``id`` -- its pdn/cqn/mrn/srqn (the lqpn for a QP) --
        per device and kind from 0 and never reused (``xa_alloc_cyclic``),
        given when an object is first listed, in creation order; ``ctxn``, the
        id of its client's context; and per kind the kernel's fields (usecnt
        as ``users``, the PD's and CQs' ids, the port once the QP left
        RESET, ...).  ``contexts`` lists every context (client with a device).
        MR keys and addresses and the PD's local_dma_lkey go only to a client
        with CAP_NET_ADMIN (fill_res_mr_entry / fill_res_pd_entry)."""
        keys = c.net_admin
        ids = self.__dict__.setdefault("_restrack_ids", {})      # id(obj) -> (obj, restrack id)
        nxt = self.__dict__.setdefault("_restrack_next", {})     # device name -> (device, {kind: next id})

        def rid(dev, kind, obj):
            e = ids.get(id(obj))
            if e is not None and e[0] is obj:
                return e[1]
            d = nxt.get(dev.name)
            if d is None or d[0] is not dev:
                d = nxt[dev.name] = (dev, {})
            n = d[1].get(kind, 0)
            d[1][kind] = (n + 1) & 0xFFFFFFFF
            ids[id(obj)] = (obj, n)                  # holding obj keeps id(obj) from being reused
            return n

        live = set()
        for cl in self.clients.values():             # ids in creation order: clients, then handles
            if cl.device is not None:
                live.add(id(cl))
                rid(cl.device, "ctx", cl)
            for h in sorted(cl.objects):
                kind, obj = cl.objects[h]
                if kind in ("pd", "cq", "mr", "srq") and cl.device is not None:
                    live.add(id(obj))
                    rid(cl.device, kind, obj)
                elif kind == "cm_id" and obj.dev is not None:
                    live.add(id(obj))
                    rid(obj.dev, kind, obj)
        for k in [k for k in ids if k not in live]:
            del ids[k]
        out = []
        contexts = []
        for cl in self.clients.values():
            dev = cl.device
            if dev is not None:
                contexts.append({"dev": dev.name, "ctxn": rid(dev, "ctx", cl), "pid": cl.pid, "comm": cl.comm})
            objs = cl.objects
            # one pass over the client's objects for what the entries refer to
            # (thousands of objects must not cost thousands of passes each)
            qps = [o for k, o in objs.values() if k == "qp"]
            pds = {id(o): o for k, o in objs.values() if k == "pd"}
            srqs = {id(o.srq): o for k, o in objs.values() if k == "srq"}
            pd_users: dict[int, int] = collections.Counter()
            for k, o in objs.values():
                p = (o.qp.pd if k == "qp" else o[0].pd if k == "mr" else o.srq.pd if k == "srq"
                     else o.pd if k == "mw" else None)
                if p is not None:
                    pd_users[id(p)] += 1
            cq_users: dict[int, int] = collections.Counter()
            srq_qpns: dict[int, list] = collections.defaultdict(list)
            for d in qps:
                cq_users[id(d.qp.send_cq)] += 1
                cq_users[id(d.qp.recv_cq)] += 1
                if d.qp.srq is not None:
                    srq_qpns[id(d.qp.srq)].append(d.qp.qp_num)

            def pdn(pd, dev=dev, pds=pds):
                return rid(dev, "pd", pd) if pds.get(id(pd)) is pd else None

            for h, (kind, obj) in objs.items():
                r = {"pid": cl.pid, "comm": cl.comm, "kind": kind, "handle": h,
                     "dev": cl.device.name if cl.device else None}
                if dev is not None:
                    r["ctxn"] = rid(dev, "ctx", cl)
                if kind == "qp":
                    r.update(lqpn=obj.qp.qp_num, type=int(obj.qp.qp_type), state=int(obj.qp.state),
                             rqpn=obj.qp.dest_qpn, sq_psn=obj.qp.req_psn, rq_psn=obj.qp.resp_psn)
                    q = obj.qp
                    s = srqs.get(id(q.srq)) if q.srq is not None else None
                    r.update(id=q.qp_num, pdn=pdn(q.pd), srqn=rid(dev, "srq", s) if s is not None else None,
                             port=int(q.attr.port_num) if int(q.state) != 0 else None,
                             path_mig_state=int(q.attr.path_mig_state),
                             path_mtu=int(dev.caps.active_mtu if int(q.qp_type) == 4 else q.attr.path_mtu),
                             send_cqn=rid(dev, "cq", q.send_cq), recv_cqn=rid(dev, "cq", q.recv_cq))
                elif kind == "mr":
                    if keys:
                        r.update(lkey=obj[0].lkey, rkey=obj[0].rkey, iova=obj[0].addr)
                    r.update(mrlen=obj[0].length, id=rid(dev, "mr", obj), pdn=pdn(obj[0].pd), access=obj[0].access)
                elif kind == "cq":
                    r.update(cqe=obj.ring.nslots - 1)
                    r.update(id=rid(dev, "cq", obj), users=cq_users[id(obj)], dim=False)
                elif kind == "pd":
                    r.update(id=rid(dev, "pd", obj), users=pd_users[id(obj)])
                    if keys:
                        r.update(local_dma_lkey=0)
                elif kind == "cm_id":
                    # fill_res_cm_id_entry: only IDs on a device; no lqpn (a user QP is
                    # not the kernel's cm_id->qp)
                    if obj.dev is not None:
                        r.update(dev=obj.dev.name, port=1, id=rid(obj.dev, "cm_id", obj), ps=obj.ps,
                                 state=obj.state, src_addr=[str(obj.src_ip or "0.0.0.0"), obj.src_port],
                                 dst_addr=[str(obj.dst_ip or ("0.0.0.0" if obj.family == 4 else "::")),
                                           obj.dst_port])
                elif kind == "srq":
                    lq = srq_qpns.get(id(obj.srq), [])
                    r.update(id=rid(dev, "srq", obj), pdn=pdn(obj.srq.pd), type=0, lqpn=sorted(lq), users=len(lq))
                out.append(r)
        return {"resources": out, "contexts": contexts}, []

    # ------------------------------------------------------------ teardown
    def destroy(self, c: Client, kind: str, obj) -> None:
        dev = c.device
        if kind == "qp":
            self._close_mcast_sockets(dev.mcast.detach_all(obj.qp))
            self.stat_destroy_qp(dev, obj)
            dev.remove_qp(obj)
            try:
                self.sel.unregister(obj.doorbell)
            except (KeyError, ValueError):
                pass
            os.close(obj.doorbell)
            obj.sq_ring.close()
            if obj.rq_ring is not None:
                obj.rq_ring.close()
        elif kind == "srq":
            dev.srqs.remove(obj)
            try:
                self.sel.unregister(obj.doorbell)
            except (KeyError, ValueError):
                pass
            os.close(obj.doorbell)
            obj.ring.close()
        elif kind == "cq":
            obj.ring.close()
        elif kind == "mr":
            mr, region = obj
            dev.memory.dereg_mr(mr)
            mr.view = None
            mr.buf = None
            region.close()
            pages = c.pinned.pop(id(obj), 0)
            if pages:
                self.locked_pages[c.uid] -= pages
        elif kind == "mw":
            obj.dealloc()
        elif kind == "channel":
            obj.close()
        elif kind == "capture":
            dev.remove_capture(obj)
            obj.close()
        elif kind == "cm_id":
            self.rdma_cm.destroy_id(obj)

    def shutdown(self) -> None:
        for client in list(self.clients.values()):
            self._drop(client)
        for dev in self.devices.values():
            dev.close()
            try:
                self.sysfs.remove_device(dev.name)
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


def _link_name(m: dict, key: str, max_len: int) -> str:
    """A device or netdev name: what the kernel accepts as one (a file name
    in sysfs: no '/', not '.' or '..', no '%' -- nldev_newlink)."""
    v = rq.string(m, key, max_len)
    if not v or v in (".", "..") or any(ch in v for ch in "/%:") or not v.isprintable() or any(
            ch.isspace() for ch in v):
        raise VerbsError(errno.EINVAL, f"{key}: bad name {v!r}")
    return v


def _node_guid(mac: bytes) -> str:
    """rxe's node GUID from the MAC (EUI-64), as sysfs prints it."""
    eui = bytes([mac[0] ^ 2, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]])
    return ":".join(eui[i:i + 2].hex() for i in range(0, 8, 2))


__all__ = ["Daemon", "Client", "default_run_dir"]
