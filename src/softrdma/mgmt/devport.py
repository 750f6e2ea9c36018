"""A umad port on a host's own InfiniBand device: what libibumad's umad
(and issm) file is to the real tools and to opensm -- a umad file of
softrdmad's device (``umad_open``; records of ``uapi.umad``) whose MADs
leave and arrive through the device's QP0 and QP1, over the fabric.

``DevicePort`` has the interface of the ibsim client (``umad.IbsimPort``:
``send``, ``wait``, ``recv_all``, ``control`` for the port's
NodeInfo/PortInfo, ``fileno``, ``close``), so the diags' ``rpc.MadPort``
and the SM's loop run either: a MAD to QP0 leaves as an SMP from the
device's QP0 (VL15), the rest from its QP1.  Opened with ``issm`` it is
the kernel's issm file: the port holds IsSM while it is open, and the
SMPs and SA requests of the classes it registered come to it.

``ib_links()``: the running daemon's IB devices (``links``);
``port_by_guid(guid)``: the (device, port) whose port GUID that is.  The
daemon is only asked, never started: its control socket speaks the
framing of ``uapi.control`` directly.
"""

from __future__ import annotations

import errno
import select
import socket

from ..uapi import umad as U
from ..uapi.control import ControlError, close_fds, recv_msg, send_msg
from ..uapi.rundir import socket_path
from ..wire import ibsim
from .umad import TransportError

GSI_QP = 1
REPLY_TIMEOUT_S = 30.0


class _Ctl:
    """What ``IbsimPort.control`` returns: the answer's data."""

    def __init__(self, data: bytes):
        self.data = data


def _call(op: str, want_fds: int = 0, **kw) -> tuple[dict, list[int]]:
    """One management request to this run directory's softrdmad; OSError
    when none runs or it refuses (its errno and words)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.settimeout(REPLY_TIMEOUT_S)
        sock.connect(socket_path())
        send_msg(sock, {"op": op, "seq": 1, **kw})
        while True:
            try:
                msg, fds = recv_msg(sock)
            except ControlError as e:
                raise OSError(errno.EIO, f"malformed reply from softrdmad ({e})") from None
            if msg is None:
                raise OSError(errno.EIO, "softrdmad closed the connection")
            if msg.get("seq") == 1:
                break
            close_fds(fds)                      # an event record: not ours
    finally:
        sock.close()
    err = msg.get("errno", 0)
    if err or len(fds) < want_fds:
        close_fds(fds)
        raise OSError(err or errno.EIO, msg.get("msg") or "malformed reply from softrdmad")
    close_fds(fds[want_fds:])
    return msg, fds[:want_fds]


def ib_links() -> list[dict]:
    """The IB devices of the running daemon (none started for asking)."""
    try:
        reply, _ = _call("links")
    except OSError:
        return []
    return [d for d in reply.get("links", []) if d.get("ib")]


def port_by_guid(guid: int) -> tuple[str, int] | None:
    """The device and port whose port GUID is ``guid`` (``ibstat -p``), or None."""
    for d in ib_links():
        for p in d.get("ports") or [d]:
            if int(p["ib"]["port_guid"].replace(":", ""), 16) == guid:
                return d["ifname"], p["port"]
    return None


class DevicePort:
    def __init__(self, name: str, port: int = 1, classes=(), issm: bool = False):
        self.name = name
        self.port_num = port or 1
        try:
            reply, fds = _call("umad_open", want_fds=1, name=name, port=port or 1, classes=list(classes),
                               issm=int(issm))
        except OSError as e:
            raise TransportError(f"cannot open a umad file on {name}: {e.strerror or e}") from None
        self.sock = socket.socket(fileno=fds[0])
        self.sock.setblocking(False)
        self.hi_tid = reply["hi_tid"]
        self.node_info = bytes.fromhex(reply["node_info"]) or bytes(40)
        self.port_info = bytes.fromhex(reply["port_info"]) or bytes(64)
        self.failed: list[ibsim.SimRequest] = []      # sends handed back at once (QP0, a full socket)

    def control(self, type_: int, data=b"") -> _Ctl:
        if type_ == ibsim.SimCtlType.GET_PORTINFO:
            return _Ctl(self.port_info)
        if type_ == ibsim.SimCtlType.GET_NODEINFO:
            return _Ctl(self.node_info)
        raise TransportError(f"{self.name}: no {ibsim.SimCtlType(type_).name} on a device port")

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, mad: bytes, dlid: int = 0xFFFF, dqp: int = 0, sqp: int = GSI_QP, length: int | None = None,
             *, slid: int | None = None, block: float = 1.0) -> None:
        mad = bytes(mad[:U.MAD_BYTES]).ljust(U.MAD_BYTES, b"\0")
        rec = U.pack(mad, lid=dlid, qpn=dqp)
        try:
            self.sock.send(rec)
        except BlockingIOError:
            select.select([], [self.sock], [], block)
            try:
                self.sock.send(rec)
            except OSError:
                self.failed.append(ibsim.SimRequest(dlid, 0, dqp, sqp, errno.ETIMEDOUT, len(mad), mad))
        except OSError as e:
            raise TransportError(f"{self.name}: the daemon closed the umad file ({e.strerror})") from None

    def wait(self, timeout: float | None) -> bool:
        if self.failed:
            return True
        return bool(select.select([self.sock], [], [], None if timeout is None else max(0.0, timeout))[0])

    def recv_all(self) -> list[ibsim.SimRequest]:
        out, self.failed = self.failed, []
        while True:
            try:
                msg = self.sock.recv(U.RECORD_BYTES + 1)
            except (BlockingIOError, InterruptedError):
                return out
            if not msg:
                raise TransportError(f"{self.name}: the daemon closed the umad file")
            try:
                r = U.unpack(msg)
            except ValueError:
                continue
            # dqp: the QP it came in on (an SMP's class says QP0), sqp: the sender's
            dqp = 0 if r.mad[1] in (0x01, 0x81) else GSI_QP
            out.append(ibsim.SimRequest(0, r.lid, dqp, r.qpn, r.status, len(r.mad), r.mad))

    def close(self) -> None:
        self.sock.close()


__all__ = ["DevicePort", "ib_links", "port_by_guid"]
