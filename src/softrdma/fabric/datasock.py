"""The fabric server's data socket: InfiniBand device ports attached to CA ports.

Owns the ``SOCK_SEQPACKET`` listener at ``wire.fabriclink.data_socket_path``
and its connections, one per attached device port, speaking
``wire.fabriclink``: ATTACH binds a connection to one CA port (ERROR
ENOENT / EINVAL / EBUSY otherwise), PORT_INFO is pushed at attach and
whenever the port's attributes change (the model's ``dirty`` set,
drained after every pass of the server's loop), PACKETS go both ways.
Data packets are forwarded by dataplane.DataPlane; packets to QP0/QP1 are
MADs and go through the server's MAD router (route.Router) as if an
ibsim client at that port had sent them, and MADs the router delivers
at a port with a device (and no ibsim client listening there) reach the
device as native IB packets.

A connection closing detaches its port and does nothing else.  A
malformed message closes its connection with one log line; nothing a
device sends reaches further than that.  Sends never block: a device
whose socket is full loses the packet (counted in ``stats``).
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import stat

from ..wire import fabriclink, smp
from ..wire.errors import WireError
from ..wire.fabriclink import MsgType
from ..wire.mad import Method
from ..wire.smp import NodeType, SmpAttr
from . import agents, model
from .dataplane import DataPlane, MadIn, mad_packet
from .model import FabricError, Port

RECV_BURST = 64                      # messages read from one connection per wakeup
SOCK_BUF = 4 << 20
_RECV_SIZE = fabriclink.MAX_MESSAGE + 64


class Conn:
    __slots__ = ("sock", "port", "device", "last_info", "fd", "is_sm")

    def __init__(self, sock):
        self.sock = sock
        self.fd = sock.fileno()
        self.port: Port | None = None
        self.device = ""
        self.last_info = b""
        self.is_sm = False             # the device set IsSM (PORT_CAP)


class DataSocket:
    """The data socket of one Server (which owns the selector, the MAD
    router and the ibsim clients).  The server calls :meth:`poll` after
    each pass of its loop and :meth:`deliver_mad` for a MAD that no ibsim
    client takes; :meth:`close` on exit."""

    def __init__(self, server, path: str | None = None):
        self.server = server
        self.fabric = server.fabric
        self.path = path or fabriclink.data_socket_path(server.base)
        self.plane = DataPlane(self.fabric, log=self._log_drop)
        self.conns: dict[int, Conn] = {}
        self.by_port: dict[Port, Conn] = {}
        self.stats = {"attached": 0, "closed": 0, "bad_msgs": 0, "full": 0, "full_drops": 0,
                      "mads_out": 0}
        self.listener = self._listen()
        server.sel.register(self.listener, selectors.EVENT_READ, self._on_accept)

    # --- the listening socket -------------------------------------------------------------
    def _listen(self) -> socket.socket:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise FabricError(f"{self.path} exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                probe.connect(self.path)
            except OSError:
                os.unlink(self.path)              # stale: its server is gone
            else:
                raise FabricError(f"{self.path}: another fabric server is running")
            finally:
                probe.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.bind(self.path)
            s.listen(64)
        except OSError as e:
            s.close()
            raise FabricError(f"cannot listen on {self.path}: {e.strerror}") from None
        s.setblocking(False)
        return s

    def close(self) -> None:
        for c in list(self.conns.values()):
            self._close(c, None)
        try:
            self.server.sel.unregister(self.listener)
        except (KeyError, ValueError):
            pass
        self.listener.close()
        try:
            if os.path.exists(self.path) and stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        except OSError:
            pass

    # --- logging --------------------------------------------------------------------------
    def _log(self, msg: str) -> None:
        self.server.log(f"fabric: {msg}")

    def _log_drop(self, msg: str) -> None:
        if self.server.verbose > 1:             # the console's `verbose 2` turns it on
            self._log(f"data: {msg}")

    # --- connections ----------------------------------------------------------------------
    def _on_accept(self, sock) -> None:
        for _ in range(16):
            try:
                s, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._log(f"data socket accept: {e.strerror}")
                return
            s.setblocking(False)
            fabriclink.set_buffers(s, SOCK_BUF)     # a send that finds it full loses the message (``_send``)
            c = Conn(s)
            self.conns[c.fd] = c
            self.server.sel.register(s, selectors.EVENT_READ, lambda _s, c=c: self._on_readable(c))

    def _close(self, c: Conn, why: str | None) -> None:
        if self.conns.get(c.fd) is not c:
            return
        del self.conns[c.fd]
        if c.port is not None and self.by_port.get(c.port) is c:
            del self.by_port[c.port]
            self.fabric.devices.pop(c.port, None)
            c.port.rereg_sup = False
            if c.is_sm:                      # its SM is gone with it
                c.port.has_sm = False
                self.fabric.touch(c.port)
                self._deliver(self.server.router.trap144(c.port))
        try:
            self.server.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        self.stats["closed"] += 1
        if why and (c.port is not None or self.server.verbose):
            where = f" at {c.port.name}" if c.port is not None else ""
            self._log(f"device {c.device or '?'}{where} detached: {why}")

    def _refuse(self, c: Conn, err: int, reason: str) -> None:
        self._send(c, fabriclink.pack_error(err, reason))
        self._close(c, None)
        self._log(f"attach refused ({errno.errorcode.get(err, err)}): {reason}")

    def _on_readable(self, c: Conn) -> None:
        for _ in range(RECV_BURST):
            try:
                msg = c.sock.recv(_RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._close(c, f"receive failed: {e.strerror}")
                return
            if not msg:
                self._close(c, "connection closed")
                return
            try:
                self._message(c, msg)
            except Exception as e:           # whatever a device sends ends at its connection
                self.stats["bad_msgs"] += 1
                why = str(e) if isinstance(e, (WireError, FabricError)) else f"{type(e).__name__}: {e}"
                self._log(f"device {c.device or '?'}: bad message, connection closed: {why}")
                self._close(c, None)
                return
            if self.conns.get(c.fd) is not c:
                return

    def _message(self, c: Conn, msg: bytes) -> None:
        t = fabriclink.msg_type(msg)
        if c.port is None:
            if t != MsgType.ATTACH:
                raise WireError(f"{t.name} before ATTACH")
            self._attach(c, *fabriclink.parse_attach(msg))
            return
        if t == MsgType.PACKETS:
            self._packets(c, msg)
        elif t == MsgType.PORT_CAP:
            self._port_cap(c, *fabriclink.parse_port_cap(msg))
        else:
            raise WireError(f"{t.name} from a device")

    def _port_cap(self, c: Conn, set_mask: int, clear_mask: int) -> None:
        """CapabilityMask bits from the device; the fabric's model of a CA
        port keeps IsSM and IsClientReregistrationSupported (the others are
        the port's kind's, as on ibsim)."""
        p = c.port
        if p is None:                        # not attached (refused): nothing to hold them
            return
        rereg = smp.CAP_IS_CLIENT_REREGISTRATION_SUPPORTED
        if (set_mask | clear_mask) & rereg and p.rereg_sup != bool(set_mask & rereg):
            p.rereg_sup = bool(set_mask & rereg)
            self.fabric.touch(p)
        if set_mask & smp.CAP_IS_SM:
            if c.is_sm or p.has_sm:          # already, or an ibsim client's SM holds it
                return
            c.is_sm = p.has_sm = True
        elif clear_mask & smp.CAP_IS_SM and c.is_sm:
            c.is_sm = p.has_sm = False
        else:
            return
        self.fabric.touch(p)
        self._deliver(self.server.router.trap144(p))

    def _attach(self, c: Conn, num: int, selector: str, device: str) -> None:
        c.device = device[:64]
        node = self._find_node(selector)
        if node is None:
            return self._refuse(c, errno.ENOENT, f"no CA {selector!r} on this fabric")
        if node.type != NodeType.CA:
            return self._refuse(c, errno.EINVAL, f'"{node.nodeid}" is not a CA')
        if not 1 <= num <= node.nports:
            return self._refuse(c, errno.EINVAL, f'"{node.nodeid}" has no port {num}')
        p = node.ports[num]
        other = self.by_port.get(p)
        if other is not None:
            return self._refuse(c, errno.EBUSY, f"{p.name} is taken by device {other.device!r}")
        c.port = p
        self.by_port[p] = c
        self.fabric.devices[p] = c.device
        self.stats["attached"] += 1
        self._log(f"device {c.device or '?'} attached at {p.name}")
        self._push_info(c)

    def _find_node(self, selector: str):
        try:
            return self.fabric.node(selector.strip('"'))
        except FabricError:
            pass
        if selector.lower().startswith("0x"):      # a port GUID names its CA too
            try:
                guid = int(selector, 16)
            except ValueError:
                return None
            for n in self.fabric.nodes:
                if not n.is_switch and any(q is not None and q.guid == guid for q in n.ports):
                    return n
        return None

    # --- PORT_INFO ------------------------------------------------------------------------------
    def port_info_msg(self, p: Port) -> bytes:
        """What the port's SMA answers now, as one PORT_INFO message."""
        node = p.node
        sma = self.server.router.sma
        ni = agents.node_info(node, p.num)[:fabriclink.NODE_INFO_BYTES]
        pi = agents.port_info(node, p, p.num)[:fabriclink.PORT_INFO_BYTES]
        if p.client_rereg:                   # an SM asked the port's clients to reregister
            pi = bytearray(pi)
            smp.PORT_INFO.encode_into(pi, 0, ClientReregister=1)
        _, gi = sma.process(node, p.num, Method.GET, SmpAttr.GUID_INFO, 0,
                            bytes(64))
        cap = node.pkey_cap(p)
        table = list(p.pkeys) if p.pkeys is not None else [model.DEFAULT_PKEY]
        table = (table + [0] * cap)[:cap]
        return fabriclink.pack_port_info(ni, pi, bytes(gi)[:fabriclink.GUID_INFO_BYTES], table)

    def _push_info(self, c: Conn) -> bool:
        """PORT_INFO if it changed since the last one sent; False if the
        socket took nothing."""
        msg = self.port_info_msg(c.port)
        if msg == c.last_info:
            return True
        if not self._send(c, msg):
            return False
        c.last_info = msg
        c.port.client_rereg = 0              # told once
        return True

    def poll(self) -> None:
        """After a pass of the server loop: push PORT_INFO to the devices
        whose ports changed."""
        dirty = self.fabric.dirty
        if not dirty:
            return
        by_port = self.by_port
        if len(dirty) < len(by_port):
            todo = [(p, by_port[p]) for p in dirty if p in by_port]
        else:
            todo = [(p, c) for p, c in by_port.items() if p in dirty]
        dirty.clear()
        for p, c in todo:
            if not self._push_info(c) and self.by_port.get(p) is c:
                dirty.add(p)                 # its socket is full: again after the next pass

    # --- packets --------------------------------------------------------------------------------
    def _send(self, c: Conn, msg, npkts: int = 0) -> bool:
        """One message, never waiting: a full socket loses it (``npkts``
        packets counted in ``full_drops``)."""
        try:
            c.sock.send(msg)
            return True
        except (BlockingIOError, InterruptedError):
            self.stats["full"] += 1
            self.stats["full_drops"] += npkts
            return False
        except OSError as e:
            self._close(c, f"send failed: {e.strerror}")
            return False

    def _packets(self, c: Conn, msg: bytes) -> None:
        whole, out, mads = self.plane.forward_message(c.port, msg, self.by_port)
        if whole is not None:                # all for one device: the message as it came
            self._send(self.by_port[whole], msg, msg[2] << 8 | msg[3])
        for dest, pkts in out.items():
            to = self.by_port.get(dest)
            if to is None:
                continue
            for m in fabriclink.batches(pkts):
                self._send(to, m, m[2] << 8 | m[3])
        for m in mads:
            self._mad_from_device(m)

    # --- MADs -----------------------------------------------------------------------------------
    def _mad_from_device(self, m: MadIn) -> None:
        """A MAD a device sent: through the MAD router as from an ibsim
        client at its port; what comes out goes to a client or a device."""
        self._deliver(self.server.router.inject(m.port, m.mad, m.slid, m.dlid, m.sqp, m.dqp))

    def _deliver(self, deliveries) -> None:
        """The router's deliveries of a device's MAD (or of a trap): to the
        ibsim client listening there, else to the device there."""
        srv = self.server
        for d in deliveries:
            if d.dropped:
                continue                     # the device's own timeout covers a lost MAD
            to = srv._find(d)
            if to is not None:
                srv._send(to, d.mad, d.slid, d.dlid, d.sqp, d.qp, 0, None)
            else:
                self.deliver_mad(d)

    def deliver_mad(self, d) -> bool:
        """A route.Delivery for a port with a device attached: sent to it
        as a native packet.  False if no device is there."""
        c = self.by_port.get(d.port)
        if c is None:
            return False
        slid = d.slid if d.slid else 0
        pkt = mad_packet(d.mad, slid=slid, dlid=d.dlid, sqp=d.sqp, dqp=d.qp)
        self.stats["mads_out"] += 1
        return self._send(c, fabriclink.pack_packets([pkt]), 1)

    # --- for the console's `attached` ---------------------------------------------------------
    def attached_text(self) -> str:
        """The console's ``attached`` lines for the devices."""
        return "".join(f'\nDevice {c.device or "?"}: attached at "{p.node.nodeid}" port {p.num}, '
                       f"lid {p.lid}" for p, c in sorted(self.by_port.items(),
                                                          key=lambda i: (i[0].node.index, i[0].num)))

    def stats_text(self) -> str:
        """The console's ``stats`` words for the data plane."""
        st = {"devices": len(self.by_port), **self.stats,
              **{f"pkts_{k}": v for k, v in self.plane.stats.items()}}
        return "".join(f" {k}={v}" for k, v in st.items())
