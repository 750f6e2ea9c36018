"""A control connection and the objects it owns: the daemon's uverbs file.

``Client`` is one connection -- the process at the other end (pid, uid,
comm, capabilities read when it connected or opened a device), the device
it opened, its objects (``Objects``: handle -> (kind, object)), the pages
its MRs pin, and the records waiting to go to it.  ``room_for`` checks a
device's object limits over all its clients (rxe's pools); ``caps_of``,
``net_admin`` and ``memlock_limit`` read what the kernel would check of
the calling process.
"""

from __future__ import annotations

import array
import collections
import errno
import logging
import os
import resource
import socket
import struct

from ..errors import VerbsError
from ..uapi.control import encode
from .core import Device
from .pci import presents_pci

log = logging.getLogger("softrdmad")

#: the object kinds the device counts against its limits (DeviceCaps), and
#: the limit each is checked against
OBJECT_LIMITS = {"qp": "max_qp", "cq": "max_cq", "mr": "max_mr", "pd": "max_pd", "srq": "max_srq",
                 "ah": "max_ah", "mw": "max_mw"}
#: contexts (control connections with a device open) one user may hold at
#: once unless it has CAP_SYS_RESOURCE, as an rlimit (``--limit max_contexts_per_user=N``)
MAX_CONTEXTS_PER_USER = 1024
CAP_NET_ADMIN = 12
CAP_IPC_LOCK = 14
CAP_SYS_RESOURCE = 24
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
#: records queued for a client that does not read its socket, past which
#: further async events for it are dropped (and counted); replies are never
#: dropped, and a client with anything queued is not read from until the
#: queue drains, so replies cannot pile up
MAX_QUEUED = 1024


def _peer_cred(sock: socket.socket) -> tuple[int, int, int]:
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid, gid


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def caps_of(pid: int) -> int:
    """The effective capability set of ``pid`` (0 if unknown)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def net_admin(pid: int) -> bool:
    """netlink_capable(skb, CAP_NET_ADMIN) for the process at the other end
    of a control connection: its effective capability set."""
    return bool(caps_of(pid) >> CAP_NET_ADMIN & 1)


def memlock_limit(pid: int) -> int | None:
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
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return None if soft == resource.RLIM_INFINITY else soft


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


class Client:
    """One control connection: its device and the objects it owns.

    Everything sent to the client goes through ``send``: the socket is
    non-blocking, and what it cannot take now waits in ``outbox`` (records
    with the fds they carry, which the outbox owns) until the socket is
    writable -- a process that stops reading its socket never blocks the
    daemon's loop."""

    def __init__(self, daemon, sock: socket.socket):
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
        self.pages = None                           # device.odp.ProcessPages: its memory, if the daemon may reach it
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
            close_fds(fds)
            fds = []
        if self.broken or (event and len(self.outbox) >= MAX_QUEUED):
            if event and not self.broken:
                self.events_dropped += 1
            close_fds(fds)
            return
        queued = bool(self.outbox)
        for i, data in enumerate(records):
            if not self.outbox:
                try:
                    self._send_record(data, fds if i == 0 else ())
                    if i == 0:
                        close_fds(fds)
                    continue
                except BlockingIOError:
                    pass
                except OSError:
                    self.broken = True            # the peer is gone: dropped when its EOF or HUP is seen
                    if i == 0:
                        close_fds(fds)
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
            close_fds(fds)

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


def room_for(c: Client, kind: str) -> None:
    """EINVAL if the device holds its limit of ``kind`` already: rxe's
    pools (__rxe_add_to_pool: num_elem > max_elem -> -EINVAL); counted
    over every client of the device.  A ConnectX function's limit is its
    share of the card (``device.resprofile``): ENOMEM past it, mlx5's
    errno for the firmware's resource-limit status."""
    dev = c.device
    name = OBJECT_LIMITS[kind]
    limit = getattr(dev.caps, name)
    used = sum(cl.objects.count[kind] for cl in c.daemon.clients.values() if cl.device is dev)
    if used >= limit:
        code = errno.ENOMEM if presents_pci(dev.name) else errno.EINVAL
        raise VerbsError(code, f"{dev.name} has {used} {kind.upper()}s, its {name} ({limit})")


def close_fds(fds) -> None:
    """Close fds this process owns: each exactly once, by its one owner."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError as e:                        # would be a double close: a bug, never fatal
            log.error("closing fd %d: %s", fd, e)
