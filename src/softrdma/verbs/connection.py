"""The library's end of one control connection (one per Context).

Requests are synchronous, one at a time (a lock serializes threads):
``call`` sends one -- a command of the table, ``uapi.commands.CMD``, whose
leading fields it checks first as the daemon would -- and waits for its reply, the record with the same
``seq``; async-event records that arrive meanwhile are queued for
``Context.get_async_event``, replies to older requests are dropped.  An
error reply without a seq (the daemon could not read the request well
enough to tell) answers the one request outstanding.  A reply's errno
becomes ``PyverbsRDMAError(msg, errno)``.

The daemon is gone when the connection breaks: its end closed (the
process died), a record that is no message arrived, or no reply came
within ``REPLY_TIMEOUT_S``.  As with the kernel's disassociate, the
context then gets IBV_EVENT_DEVICE_FATAL and every verbs call on it fails
with EIO: ``call`` at once, and the shared queues registered with
``track`` (CQs, QPs, SRQs) are switched to ``Gone``, which raises on any
use.  The data path makes no system call per poll or post, so it asks
``check_alive`` only when it idles (an empty CQ, a full queue): one
poll(2) for the socket's hang-up, at most every ``LIVENESS_INTERVAL_S``.
"""

from __future__ import annotations

import collections
import errno
import os
import select
import socket
import threading
import time
import weakref

from ..enums import IBV_EVENT_DEVICE_FATAL
from ..errors import VerbsError
from ..uapi.commands import Command, check_request, lookup
from ..uapi.control import ControlError, close_fds, recv_msg, send_msg
from .errors import PyverbsRDMAError

#: the longest ``call`` waits for its reply (a daemon that stopped
#: answering is taken for gone; a dead one is noticed at once, by EOF)
REPLY_TIMEOUT_S = 60.0
#: the data path's idle check polls the socket at most this often
LIVENESS_INTERVAL_S = 0.05
#: empty polls of a CQ between two looks at the clock (an empty poll
#: yields the core, so on a busy machine each may take a scheduler slice)
IDLE_POLLS = 8
#: records one look at the socket reads at most (a peer that floods it
#: cannot keep the caller)
MAX_PENDING = 4096

_HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL | select.POLLRDHUP
_GONE_MSG = "the device is gone (softrdmad exited)"


def gone_error(what: str) -> PyverbsRDMAError:
    return PyverbsRDMAError(f"Failed to {what}: {_GONE_MSG}", errno.EIO)


class Gone:
    """What a queue's producer or consumer becomes once the daemon is gone:
    using it in any way (poll, post, arm) raises EIO."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what

    def __getattr__(self, name):
        raise gone_error("request notify CQ" if name == "req_notify" else self.what)


class Reply(dict):
    """A reply: a field it lacks is a malformed reply (EIO), not a KeyError."""

    def __missing__(self, key):
        raise PyverbsRDMAError(f"malformed reply from softrdmad: no {key!r}", errno.EIO)


class Connection:
    def __init__(self, path: str):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        # never blocking for ever: every wait is bounded (recv_msg's
        # fragment wait included, which takes the socket's timeout)
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self._seq = 0
        self._pid = os.getpid()          # (a forked child shares the socket: it must not shut it down)
        self._lock = threading.RLock()
        self._hangup = select.poll()
        self._hangup.register(self.sock, select.POLLRDHUP)
        self._next_check = 0.0
        self._tracked: weakref.WeakSet = weakref.WeakSet()
        # destroy requests of objects the program dropped unclosed, sent
        # before the next request (``destroy_later``)
        self._orphans: collections.deque = collections.deque()
        self.events: collections.deque = collections.deque()
        self.dead = False
        self.opened = False          # a device is open on it (``open`` succeeded)
        # contexts on it: the one that opened it and those imported from its
        # cmd_fd (ibv_import_device); it is closed with the last of them
        self.users = 1

    def fileno(self) -> int:
        return self.sock.fileno()

    # ------------------------------------------------------------ liveness
    def track(self, obj) -> None:
        """``obj.device_gone()`` is called when the daemon is gone (its
        shared queues then stop working)."""
        self._tracked.add(obj)

    def lost(self) -> None:
        """The daemon is gone: read what events it sent before, then queue
        IBV_EVENT_DEVICE_FATAL; stop every tracked queue."""
        if self.dead:
            return
        self.dead = True
        for obj in list(self._tracked):
            obj.device_gone()
        if self._lock.acquire(blocking=False):        # (a thread in ``call`` reads them itself)
            try:
                self._read_pending()
            finally:
                self._lock.release()
        self.events.append({"event": int(IBV_EVENT_DEVICE_FATAL)})

    def check_alive(self, what: str = "poll CQ") -> None:
        """EIO if the daemon is gone; looks (one poll(2), no read) at most
        every LIVENESS_INTERVAL_S, so the data path may call it when idle."""
        if not self.dead:
            now = time.monotonic()
            if now < self._next_check:
                return
            self._next_check = now + LIVENESS_INTERVAL_S
            try:
                hung_up = any(ev & _HANGUP for _, ev in self._hangup.poll(0))
            except (OSError, ValueError):             # closed under us
                hung_up = True
            if not hung_up:
                return
            self.lost()
        raise gone_error(what)

    # ------------------------------------------------------------ requests
    def call(self, cmd: Command | str, fds=(), want_fds: int = 0, **kw) -> tuple[dict, list[int]]:
        """Send the request ``cmd`` (a ``CMD`` entry, or its name: one the
        table does not have is refused as the daemon refuses it) and
        return (reply, fds): the reply's first ``want_fds`` fds (it must
        carry that many; more are closed).  A field the command does not
        have is a TypeError; what ``check_request`` refuses fails here as
        the daemon's reply would."""
        op = cmd if type(cmd) is str else cmd.name
        with self._lock:
            if self.dead:
                raise gone_error(op.replace("_", " "))
            if self._orphans:
                self._destroy_orphans()
            try:
                cmd = lookup(cmd)
                extra = kw.keys() - cmd.fields
                if extra:
                    raise TypeError(f"{op}: no field {', '.join(sorted(extra))} (uapi.commands)")
                if self.opened or not cmd.device:     # (else the daemon's "no device opened" comes first)
                    # as the daemon sees the fields: JSON has no int subclasses (IntEnum, IntFlag)
                    check_request(cmd, {k: int(v) if isinstance(v, int) and type(v) not in (int, bool) else v
                                        for k, v in kw.items()}, len(fds))
            except VerbsError as e:
                raise PyverbsRDMAError(f"Failed to {op.replace('_', ' ')}: {e.strerror}", e.errno) from None
            self._seq += 1
            seq = self._seq
            try:
                msg, got = self._exchange({"op": op, "seq": seq, **kw}, fds, seq)
            except TimeoutError:
                self.lost()
                raise PyverbsRDMAError(f"Failed to {op.replace('_', ' ')}: softrdmad did not answer within"
                                       f" {REPLY_TIMEOUT_S:g} s", errno.ETIMEDOUT) from None
            except (OSError, ControlError) as e:
                self.lost()
                raise PyverbsRDMAError(f"Failed to {op.replace('_', ' ')}: lost the connection to softrdmad"
                                       f" ({e.strerror or e})", errno.EIO) from None
        err = msg.get("errno", 0)
        if type(err) is not int or not 0 <= err < 4096 or (err == 0 and len(got) < want_fds):
            close_fds(got)
            raise PyverbsRDMAError(f"Failed to {op.replace('_', ' ')}: malformed reply from softrdmad", errno.EIO)
        if err:
            close_fds(got)
            text = msg.get("msg")
            exc = PyverbsRDMAError(f"Failed to {op.replace('_', ' ')}: "
                                   f"{text if isinstance(text, str) else os.strerror(err)}", err)
            exc.extack = msg.get("extack")        # the netlink-style extended ack, if the daemon gave one
            exc.reason = text if isinstance(text, str) else None    # the daemon's words alone
            raise exc
        close_fds(got[want_fds:])
        if op == "open":
            self.opened = True
        return Reply(msg), got[:want_fds]

    def destroy(self, cmd: Command, **kw) -> None:
        """A destroy/dealloc request: once the daemon is gone there is
        nothing left to destroy, and it succeeds (as after a disassociate)."""
        if self.dead:
            return
        try:
            self.call(cmd, **kw)
        except PyverbsRDMAError:
            if not self.dead:
                raise

    def destroy_later(self, cmd: Command, **kw) -> None:
        """Queue the destroy of an object the program dropped without
        closing it (pyverbs' __dealloc__ destroys it then).  The garbage
        collector may run anywhere, also inside ``call`` between a request
        and its reply, so nothing is sent here: the request goes before the
        next one (``_destroy_orphans``), whose checks then see the object
        gone -- a PD the dropped QP used can be deallocated."""
        self._orphans.append((cmd.name, kw))

    def _destroy_orphans(self) -> None:
        """Send the queued destroys (caller holds the lock).  Objects of one
        garbage cycle are finalized in no particular order, so one refused
        with EBUSY (a PD whose QP comes later in the queue) is tried again
        after the others, as long as that frees something."""
        while True:
            busy, progress = [], False
            while self._orphans:
                op, kw = self._orphans.popleft()
                self._seq += 1
                try:
                    msg, got = self._exchange({"op": op, "seq": self._seq, **kw}, (), self._seq)
                except (OSError, ControlError):
                    self.lost()
                    return
                close_fds(got)
                if msg.get("errno") == errno.EBUSY:
                    busy.append((op, kw))
                else:
                    progress = True
            if not busy or not progress:
                return                           # (what is still busy goes with the connection)
            self._orphans.extend(busy)

    def _exchange(self, request: dict, fds, seq: int) -> tuple[dict, list[int]]:
        """Send ``request``; its reply.  TimeoutError past REPLY_TIMEOUT_S;
        OSError or ControlError when the connection broke or carried
        something that is no message (the daemon is not one to trust then)."""
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        sock = self.sock
        try:
            sock.settimeout(REPLY_TIMEOUT_S)
            send_msg(sock, request, fds)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                msg, got = recv_msg(sock)
                if self._is_reply(msg, got, seq):
                    return msg, got
        finally:
            sock.settimeout(REPLY_TIMEOUT_S)        # (a fragment wait in poll_events takes it too)

    def _is_reply(self, msg: dict | None, got: list[int], seq: int) -> bool:
        """Whether ``msg`` answers request ``seq``; an event is queued, an
        older reply dropped (its fds closed)."""
        if msg is None:
            raise ConnectionResetError(errno.ECONNRESET, "softrdmad closed the connection")
        rseq = msg.get("seq")
        if rseq == seq and type(rseq) is int:
            return True
        if rseq is None and "event" in msg:
            close_fds(got)
            self.events.append(msg)
            return False
        if rseq is None and msg.get("errno"):
            # an error the daemon could not tie to a request: requests are
            # synchronous, so it is this one's
            return True
        close_fds(got)
        if rseq is None:
            raise ControlError("a record that is neither a reply nor an event")
        return False                             # the reply to an older request: not ours

    def poll_events(self) -> None:
        """Collect async events that arrived without a request."""
        if self.dead:
            return
        with self._lock:
            self._read_pending()

    def _read_pending(self) -> None:
        """Read what the socket holds now (caller holds the lock): events
        are queued, anything else dropped; EOF or garbage: the daemon is gone."""
        sock = self.sock
        for _ in range(MAX_PENDING):
            try:
                p = select.poll()                 # (select.select fails past fd 1023)
                p.register(sock, select.POLLIN)
                if not p.poll(0):
                    return
                msg, fds = recv_msg(sock)
            except (OSError, ControlError, ValueError):
                msg, fds = None, []
            close_fds(fds)
            if msg is None:
                self.lost()
                return
            if "event" in msg and msg.get("seq") is None:
                self.events.append(msg)

    def close(self) -> None:
        """Close the connection, and with it every object made on it.  As
        the kernel's close of a uverbs file, that is done when this
        returns: the daemon frees a client's objects when it reads its EOF
        and only then closes its end, so the EOF it sends back is waited
        for (bounded) -- a DM pool or PD the next context allocates from
        is free already."""
        sock = self.sock
        if not self.dead and sock.fileno() >= 0 and os.getpid() == self._pid:
            try:
                sock.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + REPLY_TIMEOUT_S
                while (left := deadline - time.monotonic()) > 0:
                    sock.settimeout(left)
                    msg, fds = recv_msg(sock)
                    close_fds(fds)
                    if msg is None:
                        break
            except (OSError, ControlError, ValueError):
                pass
        sock.close()
