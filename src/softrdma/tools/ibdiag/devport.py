"""The diags' MAD port on a host's own InfiniBand device (``-C DEV -P
PORT``): what libibumad's umad file is to the real tools, a umad file of
softrdmad's device (``umad_open``; records of ``uapi.umad``) whose MADs
leave and arrive through the device's QP1, LID-routed over the fabric.

``DevicePort`` has the interface of the ibsim client
(``mgmt.umad.IbsimPort``: ``send``, ``wait``, ``recv_all``, ``control``
for the port's NodeInfo/PortInfo, ``fileno``, ``close``), so ``rpc.MadPort``
runs either: SMPs leave from the device's QP0 (VL15), the rest from its
QP1.

``device_for(ca, ca_port)``: the device a tool's options name -- ``-C``
naming a softrdma device, or, with neither ``-C`` nor the ibsim
environment, the first IB device whose port is Active (libibumad's first
usable CA) -- or None for the ibsim path.
"""

from __future__ import annotations

import errno
import os
import select
import socket

from ...mgmt.umad import TransportError
from ...uapi import umad as U
from ...uapi.rundir import socket_path
from ...verbs import device as verbs_device
from ...verbs.connection import Connection
from ...verbs.errors import PyverbsError
from ...wire import ibsim

GSI_QP = 1
SIM_CA = "ibsim0"                 # umad2sim's one CA: the ibsim path


class _Ctl:
    """What ``IbsimPort.control`` returns: the answer's data."""

    def __init__(self, data: bytes):
        self.data = data


def _ib_links() -> list[dict]:
    """The IB devices of the running daemon (none started for asking)."""
    try:
        conn = Connection(socket_path())
    except OSError:
        return []
    try:
        reply, _ = conn.call("links")
    except (PyverbsError, OSError):
        return []
    finally:
        conn.close()
    return [d for d in reply.get("links", []) if d.get("ib")]


def device_for(ca: str | None, ca_port: int) -> str | None:
    if ca == SIM_CA:
        return None
    if ca is not None:
        return ca if any(d["ifname"] == ca for d in _ib_links()) else None
    env = os.environ
    if env.get("IBSIM_SOCKNAME") or env.get("IBSIM_SERVER_NAME"):
        return None
    for d in _ib_links():
        if d["port_attr"]["state"] == 4 and ca_port in (0, d["port"]):
            return d["ifname"]
    return None


class DevicePort:
    def __init__(self, name: str, port: int = 1, classes=(), issm: bool = False):
        self.name = name
        try:
            conn = verbs_device.management()
        except (PyverbsError, OSError) as e:
            raise TransportError(f"cannot open {name}: {e}") from None
        try:
            reply, fds = conn.call("umad_open", want_fds=1, name=name, port=port or 1, classes=list(classes),
                                   issm=int(issm))
        except PyverbsError as e:
            raise TransportError(f"cannot open a umad file on {name}: {e}") from None
        finally:
            conn.close()
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
            out.append(ibsim.SimRequest(0, r.lid, GSI_QP, r.qpn, r.status, len(r.mad), r.mad))

    def close(self) -> None:
        self.sock.close()


__all__ = ["DevicePort", "device_for"]
