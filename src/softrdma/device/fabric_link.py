"""An InfiniBand port's connection to its fabric: the socket of
``wire.fabriclink`` (the one I/O of an IB port; ``device.ib`` is the rest).

``FabricLink`` connects to the data socket of ``softrdma fabric serve``
(``fabriclink.data_socket_path``: a file, so a daemon in another network
namespace reaches it), sends ATTACH (the CA port by node description,
topology name or ``0x<node GUID>``), and then reads messages -- PORT_INFO,
PACKETS, ERROR -- without blocking.  Outgoing PACKETS batches that the
socket does not take at once wait in ``outbox`` (as (message, length); bounded: past
``MAX_OUTBOX`` bytes a batch is dropped, as a congested link discards, and
counted by the caller).  A closed or refused connection is retried with a
back-off (``retry_at``): a fabric server that restarts gets its devices
back.
"""

from __future__ import annotations

import collections
import errno
import os
import socket

from ..wire import fabriclink as fl
from ..wire.errors import WireError

SNDBUF = 4 << 20
MAX_OUTBOX = 8 << 20                 # bytes of PACKETS waiting for the socket
RETRY_MIN_S, RETRY_MAX_S = 0.1, 1.0
RECV_BUDGET = 256                    # messages one ``receive`` reads at most


# glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_MMAP_THRESHOLD = 1 << 20
HEAP_TRIM_THRESHOLD = 32 << 20
_heap_kept = False


def keep_heap() -> bool:
    """Have glibc's malloc keep freed memory for the next message (once a
    process).  Every PACKETS message is a new buffer of up to 128 KiB (a
    receive, a run built for sending); by default glibc hands such blocks
    back to the kernel (the top of the heap trimmed past twice the
    largest mmapped block, an mmap/munmap for the first ones) and the next
    message faults its pages in again, zeroed: 2 to 7 page faults a 64 KiB
    written, a third of an IB daemon's CPU in a bulk transfer.  Blocks under
    ``HEAP_MMAP_THRESHOLD`` come from the heap, and up to
    ``HEAP_TRIM_THRESHOLD`` free at its top is kept.  False where this is
    not glibc (nothing changed)."""
    global _heap_kept
    if _heap_kept:
        return True
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    _heap_kept = bool(mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)) and \
        bool(mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD))
    return _heap_kept


class FabricLink:
    """One device port's connection to a fabric's CA port."""

    def __init__(self, base: str, node: str, port_num: int, device: str, directory: str | None = None):
        keep_heap()
        self.base = base
        self.node = node
        self.port_num = port_num
        self.device = device
        self.path = fl.data_socket_path(base, directory)
        self.sock: socket.socket | None = None
        self.outbox: collections.deque = collections.deque()
        self.outbox_bytes = 0
        self.retry_at: float | None = None
        self._backoff = RETRY_MIN_S
        self.error: tuple[int, str] | None = None     # the fabric's last ERROR, or why connecting failed

    @property
    def connected(self) -> bool:
        return self.sock is not None

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def connect(self) -> bool:
        """Connect and send ATTACH; False (``error`` says why) if the
        fabric's socket is not there or refuses."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            fl.set_buffers(s, SNDBUF)
            s.settimeout(2.0)
            s.connect(self.path)
            s.send(fl.pack_attach(self.port_num, self.node, self.device))
            s.setblocking(False)
        except OSError as e:
            s.close()
            self.error = (e.errno or errno.EIO, f"fabric {self.base} ({self.path}): {e.strerror or e}")
            return False
        self.sock = s
        self.error = None
        self._backoff = RETRY_MIN_S
        self.retry_at = None
        return True

    def close(self, now: float | None = None) -> None:
        """Close the connection; with ``now``, schedule a reconnect."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.outbox.clear()
        self.outbox_bytes = 0
        if now is not None:
            self.retry_at = now + self._backoff
            self._backoff = min(self._backoff * 2, RETRY_MAX_S)
        else:
            self.retry_at = None

    def receive(self) -> tuple[list, bool]:
        """The messages waiting, as (MsgType, bytes); and whether the
        connection ended (EOF, reset, or a message that is not the
        protocol's: the caller closes it)."""
        out = []
        s = self.sock
        if s is None:
            return out, True
        for _ in range(RECV_BUDGET):
            try:
                msg = s.recv(fl.MAX_MESSAGE + 4096)
            except (BlockingIOError, InterruptedError):
                return out, False
            except OSError as e:
                self.error = (e.errno or errno.EIO, f"fabric {self.base}: {e.strerror or e}")
                return out, True
            if not msg:
                self.error = (errno.ECONNRESET, f"fabric {self.base} closed the connection")
                return out, True
            try:
                t = fl.msg_type(msg)
            except WireError as e:
                self.error = (errno.EPROTO, f"fabric {self.base}: {e}")
                return out, True
            if t == fl.MsgType.ERROR:
                try:
                    self.error = fl.parse_error(msg)
                except WireError:
                    self.error = (errno.EPROTO, f"fabric {self.base}: a malformed ERROR")
                return out, True
            out.append((t, msg))
        return out, False

    def send_packets(self, frames: list) -> int:
        """Queue ``frames`` (native IB packets) and send what the socket
        takes; the number of frames dropped because the outbox is full."""
        return self.send_messages(fl.batches(frames))

    def send_messages(self, msgs: list) -> int:
        """Queue PACKETS messages built whole (``IbPort.route``: each a
        buffer, or a list of the buffers it is made of, header first, sent
        as one message by one ``sendmsg``) and send what the socket takes;
        the number of packets dropped because the outbox is full."""
        dropped = 0
        box = self.outbox
        for msg in msgs:
            n = sum(map(len, msg)) if msg.__class__ is list else len(msg)
            if self.outbox_bytes + n > MAX_OUTBOX:
                h = msg[0] if msg.__class__ is list else msg
                dropped += h[2] << 8 | h[3]
                continue
            box.append((msg, n))
            self.outbox_bytes += n
        self.flush()
        return dropped

    def send_control(self, msg: bytes) -> None:
        """A message other than PACKETS (PORT_CAP), in order with them."""
        self.outbox.append((msg, len(msg)))
        self.outbox_bytes += len(msg)
        self.flush()

    def flush(self) -> bool:
        """Send what waits; True when nothing is left."""
        s = self.sock
        box = self.outbox
        if s is None:
            return True
        while box:
            msg, n = box[0]
            try:
                if msg.__class__ is list:
                    s.sendmsg(msg)
                else:
                    s.send(msg)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:                  # the reader sees the end and closes (``receive``)
                box.clear()
                self.outbox_bytes = 0
                return True
            box.popleft()
            self.outbox_bytes -= n
        return True


def exists(base: str, directory: str | None = None) -> bool:
    return os.path.exists(fl.data_socket_path(base, directory))


__all__ = ["FabricLink", "exists", "keep_heap"]
