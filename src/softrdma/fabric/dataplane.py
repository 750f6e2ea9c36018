"""Forwarding native IB packets (``wire.lrh``) through the fabric's switches.

Owns :class:`DataPlane`, whose :meth:`DataPlane.forward_message` takes
a PACKETS message (``wire.fabriclink``) a device injected at its CA port
and says where each packet leaves the fabric: a CA port to deliver it to,
or a drop counted where the hardware counts it (IBA 16.1.3.5):

==================================== =====================================
what happens                         counter
==================================== =====================================
bad length, LNH or VCRC              PortRcvErrors of the port receiving
                                     it from the CA (its switch port)
no LFT/MFT entry, DLID beyond         PortRcvSwitchRelayErrors of the
LinearFDBTop, output port = input,    switch port it arrived by
the SL maps to VL15 on a data port
(the SL2VL table of the switch's
input and output port)
link down, a port not Active          PortXmitDiscards of the sending port
(VL15: not Init)
P_Key not in the table of a port     PortRcvConstraintErrors (inbound) /
enforcing partitions                  PortXmitConstraintErrors (outbound)
the destination CA port has no        PortXmitDiscards of the last switch
device attached                       port (the packet goes no further)
a CA port reached for a LID it        PortRcvErrors of that port
does not own (a stale LFT)
==================================== =====================================

Every link a packet crosses adds PktLen words and one packet to
PortXmitData/Pkts of the sender and PortRcvData/Pkts of the receiver
(multicast also to PortMulticastXmit/RcvPkts), so ``perfquery`` on a
switch port shows the traffic.  Packets for QP0 and QP1 are not forwarded
here: they come back as as :class:`MadIn` rows for the MAD
router (route.py), which owns the agents and the ibsim clients.

At each switch the packet's VL is its SL through the SL2VL table the SM
programmed for (input port, output port) (``SLtoVLMappingTable``; IBA's
default maps SL n to VL n, SL15 to VL7): the fabric has no per-VL
buffers, so the VL decides only whether a data packet may go on (VL15 is
the management VL).  The tables are read when a route is made, never per
packet.  As a switch does, each hop rewrites the LRH's VL field (and the
VCRC, which covers it; the ICRC does not): a packet reaches its CA port
with the VL of the last hop (``Route.vls``).  A multicast branch whose SL
maps to VL15 at an output port is dropped there, counted as unicast is.

Routes are cached per (ingress port, SL, DLID) and thrown away whenever the
fabric's ``generation`` moves (an SM Set, a link event: model.Fabric.touch),
so the per-packet work is a header check, a dict lookup and an append;
the counters of a unicast route are added once per batch, and a message
whose packets all go to one device is passed on as it came.  A bulk
transfer's message -- every packet LRH-only, to one unicast DLID and one
data QP, with one P_Key, good framing and CRCs -- is checked whole in one
compiled call (``lrh.verify_packets``, the receiving port's own check)
and routed once (``_whole``); anything else, or a message whose route
drops, takes the walk packet by packet, which counts what it drops.  A
route that enforces partitions remembers the P_Keys it passed
(``Route.pkeys_ok``).  No I/O.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..wire import fabriclink, lrh
from ..wire.errors import WireError
from ..wire.fastpath import vcrc
from ..wire.smp import PhysState, PortState, decode_sl2vl
from . import model
from .model import Fabric, Port

# LRH and, in a packet without GRH, the BTH's destination QP word
_LOCAL_HDRS = struct.Struct(">BBHHH4xI")
_BTH_PKEY = struct.Struct(">H")
_QPN = struct.Struct(">I")
_DETH = struct.Struct(">II")
_MIN_BYTES = lrh.LRH_BYTES + 12 + lrh.ICRC_BYTES + lrh.VCRC_BYTES   # >= _LOCAL_HDRS.size
_MCAST_BASE = lrh.MCAST_LID_BASE
_PERMISSIVE = lrh.PERMISSIVE_LID
_LOCAL, _GLOBAL = lrh.LNH_IBA_LOCAL, lrh.LNH_IBA_GLOBAL
MAX_HOPS = 64
MAD_BYTES = 256
DETH_BYTES = 8
BTH_BYTES = 12


class MadIn(NamedTuple):
    """A MAD a device sent (a packet to QP0 or QP1), for the MAD router."""

    port: Port            # where it entered the fabric
    slid: int
    dlid: int
    sqp: int
    dqp: int
    mad: bytes


class Route:
    """Where a packet from one ingress port to one DLID goes.

    ``hops``: the links it crosses as (sending port, receiving port);
    ``dests``: the CA ports it leaves the fabric at; ``drop``: the
    (port, counter) a dropped packet counts in, with ``hops`` then the
    links crossed before (a multicast route: a list of them, the
    branches of the tree that end in a drop); ``reason`` for the log.
    ``pkts``/``words`` collect a batch's counts for ``DataPlane._settle``."""

    __slots__ = ("hops", "dests", "drop", "reason", "mcast", "pkts", "words", "pkey_ports", "pkeys_ok",
                 "vls")

    def __init__(self, hops=(), dests=(), drop=None, reason="", mcast=False, pkey_ports=(), vls=None):
        self.hops = tuple(hops)
        self.dests = tuple(dests)
        # the VL of the last hop into each of ``dests`` (None: the packet's own,
        # no switch on the way), which the LRH carries when it arrives
        self.vls = tuple(vls) if vls is not None else (None,) * len(self.dests)
        self.drop = drop
        self.reason = reason
        self.mcast = mcast
        self.pkey_ports = tuple(pkey_ports)   # (port, inbound?) enforcing partitions on the way
        self.pkeys_ok: set = set()            # BTH P_Keys every port of ``pkey_ports`` takes
        self.pkts = 0
        self.words = 0


class DataPlane:
    """Forwards packets over one :class:`~softrdma.fabric.model.Fabric`.
    ``log`` receives one line per dropped packet when set."""

    def __init__(self, fabric: Fabric, log=None):
        self.fabric = fabric
        self.log = log
        self._cache: dict[int, Route] = {}   # id(ingress) << 21 | SL << 17 | VL15 << 16 | DLID
        self._gen = -1
        self.stats = {"forwarded": 0, "dropped": 0, "bad": 0, "mads": 0}

    # --- the entry points -----------------------------------------------------------------
    def forward(self, ingress: Port, frames, attached) -> tuple[dict, list[MadIn]]:
        """``frames`` (native IB packets) injected at CA port ``ingress``;
        ``attached``: the CA ports that have a device (a container).
        Returns ({CA port: [packets to deliver]}, [MADs for the MAD router]).
        The same walk as :meth:`forward_message`, for a list."""
        msg = fabriclink.pack_packets(list(frames))
        whole, out, mads = self.forward_message(ingress, msg, attached)
        if whole is not None:
            out = {whole: list(fabriclink.iter_packets(msg))}
        return out, mads

    def forward_message(self, ingress: Port, msg, attached):
        """A PACKETS message from the device at ``ingress``, walked in place.
        Returns (port, {}, mads) when every packet goes to that one port (the
        common case: the message can be passed on as it is), else (None,
        {CA port: [packets]}, mads).  WireError for a message whose framing
        is broken (the packets inside are checked one by one instead)."""
        if self.fabric.generation != self._gen:
            self._cache.clear()
            self._gen = self.fabric.generation
        m = memoryview(msg)
        end = len(m)
        if end < 4:
            raise WireError(f"PACKETS of {end} bytes")
        count = m[2] << 8 | m[3]
        whole = self._whole(ingress, m, count, attached)
        if whole is not None:
            return whole, {}, []
        out: dict[Port, list] = {}
        mads: list[MadIn] = []
        touched: list[Route] = []
        cache = self._cache
        key0 = id(ingress) << 21
        check = vcrc
        unpack_local = _LOCAL_HDRS.unpack_from
        bad = 0
        # While every packet goes to one port (``whole``) only their offsets are
        # kept (``pos``); the first that does not ends that (``split``): the
        # packets are then sorted into ``out`` by destination.
        whole = None
        pos: list[int] = []
        split = False
        o = 4
        try:
            for _ in range(count):
                if o + 2 > end:
                    raise WireError("PACKETS: truncated length")
                n = m[o] << 8 | m[o + 1]
                o += 2
                start = o
                o += n
                if o > end:
                    raise WireError(f"PACKETS: a packet of {n} bytes past the end")
                if n < _MIN_BYTES:
                    bad += 1
                    continue
                b0, b1, dlid, plen, slid, dqp = unpack_local(m, start)
                plen &= 0x7FF
                lnh = b1 & 3
                if (plen << 2) + 2 != n or (lnh != _LOCAL and lnh != _GLOBAL) or \
                        (m[o - 2] | m[o - 1] << 8) != check(m[start:o - 2]):
                    bad += 1
                    continue
                if lnh == _LOCAL:
                    bth = 8
                else:
                    bth = 48
                    if n < bth + BTH_BYTES + 6:
                        bad += 1
                        continue
                    dqp = _QPN.unpack_from(m, start + bth + 4)[0]
                dqp &= 0xFFFFFF
                if dqp <= 1:
                    mad = self._mad(ingress, m[start:o], bth, dlid, slid, dqp)
                    if mad is None:
                        bad += 1
                    else:
                        mads.append(mad)
                    continue
                vl15 = (b0 >> 4) == lrh.VL15
                key = key0 | (b1 >> 4) << 17 | vl15 << 16 | dlid
                r = cache.get(key)
                if r is None:
                    r = cache[key] = self._route(ingress, dlid, vl15, b1 >> 4)
                if r.pkey_ports and not self._pkey_ok(r, m[start:o], bth):
                    continue
                if r.mcast:
                    if not split:
                        split = self._split(m, whole, pos, out)
                    self._multicast(r, m[start:o], plen, attached, out, b0 >> 4)
                    continue
                if r.drop is not None:
                    self._dropped(r, plen)
                    continue
                dest = r.dests[0]
                if dest not in attached:
                    self._unattached(r, plen)
                    continue
                if r.pkts == 0:
                    touched.append(r)
                r.pkts += 1
                r.words += plen
                vl = r.vls[0]
                if vl is not None and vl != b0 >> 4:
                    if not split:
                        split = self._split(m, whole, pos, out)
                    out.setdefault(dest, []).append(_with_vl(m[start:o], vl))
                    continue
                if not split:
                    if dest is whole or whole is None:
                        whole = dest
                        pos.append(start)
                        continue
                    split = self._split(m, whole, pos, out)
                q = out.get(dest)
                if q is None:
                    out[dest] = [m[start:o]]
                else:
                    q.append(m[start:o])
            if o != end:
                raise WireError(f"PACKETS: {end - o} bytes after {count} packets")
        except WireError:                # a broken message is lost whole: nothing of it counts
            for r in touched:
                r.pkts = r.words = 0
            raise
        for r in touched:
            self._settle(r)
        if bad:
            self.stats["bad"] += bad
            first = ingress.remote if ingress.remote is not None else ingress
            first.counters()[model.PC_RCV_ERRORS] += bad
            if self.log:
                self.log(f"{bad} bad packet(s) from {ingress.name}")
        if not split:
            if whole is not None and len(pos) == count:
                return whole, {}, mads
            self._split(m, whole, pos, out)
        return None, out, mads

    def _whole(self, ingress: Port, m, count: int, attached):
        """The CA port a bulk message goes to whole, its counts added; None
        when it is not such a message (see the module docstring) or its
        route does not deliver it: the packet-by-packet walk decides."""
        if len(m) < 6 + _MIN_BYTES:
            return None
        b0, b1, dlid, _, _, _ = _LOCAL_HDRS.unpack_from(m, 6)
        if dlid >= _MCAST_BASE or not dlid:
            return None
        got = lrh.verify_packets(m, dlid, 0)       # (every packet: the same VL, SL, DLID, SLID)
        if got is None or got[0] <= 1:
            return None
        vl15 = (b0 >> 4) == lrh.VL15
        # the walk's cache entry: the P_Keys it passed (``pkeys_ok``) count here too
        key = id(ingress) << 21 | (b1 >> 4) << 17 | vl15 << 16 | dlid
        r = self._cache.get(key)
        if r is None:
            r = self._cache[key] = self._route(ingress, dlid, vl15, b1 >> 4)
        if r.mcast or r.drop is not None or r.dests[0] not in attached:
            return None
        if r.vls[0] is not None and r.vls[0] != b0 >> 4:
            return None                  # the walk rewrites each packet's VL
        if r.pkey_ports and (m[6 + 10] << 8 | m[6 + 11]) not in r.pkeys_ok:
            return None
        # every entry: be16 length, then PktLen words and the VCRC
        self._add(r.hops, count, sum(((seg - 4) >> 2) * k for _, seg, k in got[1]))
        self.stats["forwarded"] += count
        return r.dests[0]

    @staticmethod
    def _split(m, whole, pos, out) -> bool:
        """The packets kept as offsets for ``whole``, into ``out``."""
        if whole is not None:
            out.setdefault(whole, []).extend(m[p:p + (m[p - 2] << 8 | m[p - 1])] for p in pos)
        return True

    # --- counters --------------------------------------------------------------------------
    def _settle(self, r: Route) -> None:
        """Add a batch's packets and words to every link of a unicast route."""
        self._add(r.hops, r.pkts, r.words)
        self.stats["forwarded"] += r.pkts
        r.pkts = r.words = 0

    @staticmethod
    def _add(hops, pkts: int, words: int, mcast: bool = False) -> None:
        """``pkts`` packets of ``words`` words in all over each (sender, receiver) link."""
        for s, d in hops:
            tx, rx = s.counters(), d.counters()
            tx[model.PC_XMIT_PKTS] += pkts
            tx[model.PC_XMIT_DATA] += words
            rx[model.PC_RCV_PKTS] += pkts
            rx[model.PC_RCV_DATA] += words
            if mcast:
                tx[model.PC_MCAST_XMIT] += pkts
                rx[model.PC_MCAST_RCV] += pkts

    def _dropped(self, r: Route, words: int) -> None:
        self._add(r.hops, 1, words)
        port, slot = r.drop
        self._count(port, slot)
        self.stats["dropped"] += 1
        if self.log:
            self.log(f"drop at {port.name}: {r.reason}")

    @staticmethod
    def _count(port: Port, slot: int) -> None:
        port.counters()[slot] += 1

    def _unattached(self, r: Route, words: int) -> None:
        """The destination CA port has no device: the last switch port
        discards the packet instead of sending it."""
        self._add(r.hops[:-1], 1, words)
        last = r.hops[-1][0] if r.hops else r.dests[0]
        last.counters()[model.PC_XMIT_DISCARDS] += 1
        self.stats["dropped"] += 1
        if self.log:
            self.log(f"drop at {last.name}: no device attached at {r.dests[0].name}")

    # --- routing -----------------------------------------------------------------------------
    def _route(self, ingress: Port, dlid: int, vl15: bool, sl: int = 0) -> Route:
        if dlid >= _MCAST_BASE and dlid != _PERMISSIVE:
            return self._mroute(ingress, dlid, vl15, sl)
        if dlid == 0 or dlid == _PERMISSIVE:
            return Route(drop=(ingress, model.PC_XMIT_DISCARDS), reason=f"DLID {dlid:#x}")
        if ingress.has_lid(dlid):
            return Route(dests=(ingress,))                      # loopback: never on the wire
        hops: list = []
        pkey_ports: list = []
        cur = ingress
        vl = None                        # the VL of the hop being made (None: as sent)
        for _ in range(MAX_HOPS):
            bad = self._link_bad(cur, vl15)
            if bad:
                return Route(hops, drop=(cur, model.PC_XMIT_DISCARDS), reason=bad)
            r = self._hop(cur, hops, pkey_ports)
            node = r.node
            if not node.is_switch:
                if r.has_lid(dlid):
                    return Route(hops, dests=(r,), pkey_ports=pkey_ports, vls=(vl,))
                return Route(hops, drop=(r, model.PC_RCV_ERRORS),
                             reason=f"{r.name} does not own LID {dlid}")
            if self._enforces(r, out=False):
                pkey_ports.append((r, True))
            if node.ports[0].has_lid(dlid):
                return Route(hops, drop=(r, model.PC_RCV_SW_RELAY_ERRORS),
                             reason=f'data packet for switch "{node.nodeid}" itself')
            o = node.lft_get(dlid) if dlid <= node.lft_top else 0xFF
            if o == 0 or o > node.nports or o == r.num:
                return Route(hops, drop=(r, model.PC_RCV_SW_RELAY_ERRORS),
                             reason=f'"{node.nodeid}": no LFT entry for LID {dlid}'
                             if o != r.num else f'"{node.nodeid}": LID {dlid} loops back')
            if not vl15:
                vl = sl2vl(node, r.num, o)[sl]
                if vl == lrh.VL15:
                    return Route(hops, drop=(r, model.PC_RCV_SW_RELAY_ERRORS),
                                 reason=f'"{node.nodeid}": SL {sl} maps to VL15 from port {r.num} to {o}')
            cur = node.ports[o]
        return Route(hops, drop=(cur, model.PC_RCV_SW_RELAY_ERRORS),
                     reason=f"LID {dlid}: more than {MAX_HOPS} hops")

    def _hop(self, out: Port, hops: list, pkey_ports: list) -> Port:
        """Cross ``out``'s link (its state checked by the caller): the port reached."""
        r = out.remote
        hops.append((out, r))
        if out.node.is_switch and self._enforces(out, out=True):
            pkey_ports.append((out, False))
        return r

    @staticmethod
    def _link_bad(out: Port, vl15: bool) -> str:
        """Why ``out`` cannot send now ('' when it can): data needs both
        ends Active (the receiver at least Armed), VL15 both Init."""
        r = out.remote
        if r is None or out.phys != PhysState.LINK_UP or r.phys != PhysState.LINK_UP:
            return f"{out.name}: link not up"
        if vl15:
            ok = out.state >= PortState.INIT and r.state >= PortState.INIT
        else:
            ok = out.state == PortState.ACTIVE and r.state >= PortState.ARMED
        if not ok:
            return (f"{out.name} -> {r.name}: port states {PortState(out.state).name}/"
                    f"{PortState(r.state).name}")
        return ""

    @staticmethod
    def _enforces(p: Port, out: bool) -> bool:
        return bool(p.part_enforce & (model.PART_ENFORCE_OUT if out else model.PART_ENFORCE_IN))

    def _mroute(self, ingress: Port, dlid: int, vl15: bool, sl: int = 0) -> Route:
        """The multicast tree from ``ingress``: every link crossed (as hops,
        in order), the CA ports reached (each with the VL of its last hop),
        and the drops on the way as (port, counter) in ``drop`` -- a list
        here.  A branch whose SL maps to VL15 at an output port is a drop
        counted in the input port's PortRcvSwitchRelayErrors, as unicast."""
        hops: list = []
        dests: list = []
        vls: list = []
        drops: list = []
        pkey_ports: list = []
        idx = dlid - _MCAST_BASE
        bad = self._link_bad(ingress, vl15)
        if bad:
            return Route(drop=(ingress, model.PC_XMIT_DISCARDS), reason=bad)
        todo = [(ingress, 0, None)]
        seen: set = set()
        while todo:
            out, depth, vl = todo.pop(0)
            r = self._hop(out, hops, pkey_ports)
            node = r.node
            if not node.is_switch:
                if r is not ingress:
                    dests.append(r)
                    vls.append(vl)
                continue
            if node.index in seen or depth >= MAX_HOPS:
                continue
            seen.add(node.index)
            if self._enforces(r, out=False):
                pkey_ports.append((r, True))
            top = node.mft_top
            mask = (node.mft or {}).get(idx, 0) if not top or dlid <= top else 0
            mask &= ~(1 << r.num) & ~1
            if not mask:
                drops.append((r, model.PC_RCV_SW_RELAY_ERRORS))
                continue
            for o in range(1, node.nports + 1):
                if mask >> o & 1:
                    q = node.ports[o]
                    ovl = None if vl15 else sl2vl(node, r.num, o)[sl]
                    if ovl == lrh.VL15:
                        drops.append((r, model.PC_RCV_SW_RELAY_ERRORS))
                        continue
                    why = self._link_bad(q, vl15)
                    if why:
                        drops.append((q, model.PC_XMIT_DISCARDS))
                    else:
                        todo.append((q, depth + 1, ovl))
        rt = Route(hops, dests, mcast=True, pkey_ports=pkey_ports, vls=vls)
        rt.drop = drops
        return rt

    def _multicast(self, r: Route, frame, words: int, attached, out: dict, vl: int) -> None:
        """One multicast packet down its tree (counted per packet: rare)."""
        last = {d: s for s, d in r.hops}
        skipped = {last[d] for d in r.dests if d not in attached}
        self._add([h for h in r.hops if h[0] not in skipped], 1, words, mcast=True)
        for port, slot in r.drop:
            self._count(port, slot)
        for s in skipped:
            s.counters()[model.PC_XMIT_DISCARDS] += 1
        self.stats["dropped"] += len(r.drop) + len(skipped)
        for d, dvl in zip(r.dests, r.vls):
            if d in attached:
                out.setdefault(d, []).append(frame if dvl is None or dvl == vl else _with_vl(frame, dvl))
                self.stats["forwarded"] += 1

    # --- partitions ---------------------------------------------------------------------------
    def _pkey_ok(self, r: Route, frame, bth: int) -> bool:
        """The BTH P_Key against the table of every port on the route that
        enforces partitions (IBA 10.9.3: a full member matches either
        membership, a limited one only a full member)."""
        pkey = _BTH_PKEY.unpack_from(frame, bth + 2)[0]
        if pkey in r.pkeys_ok:
            return True
        base = pkey & 0x7FFF
        for p, inbound in r.pkey_ports:
            table = p.pkeys if p.pkeys is not None else [model.DEFAULT_PKEY]
            if not any((k & 0x7FFF) == base and base and (pkey & 0x8000 or k & 0x8000)
                       for k in table):
                self._count(p, model.PC_RCV_CONSTRAINT if inbound else model.PC_XMIT_CONSTRAINT)
                self.stats["dropped"] += 1
                if self.log:
                    self.log(f"drop at {p.name}: P_Key {pkey:#06x} not in its table")
                return False
        r.pkeys_ok.add(pkey)
        return True

    # --- MADs -----------------------------------------------------------------------------------
    def _mad(self, ingress: Port, frame, bth: int, dlid: int, slid: int, dqp: int):
        """A UD packet to QP0/QP1: the MAD after BTH and DETH, for route.Router.
        The fabric ends these packets (its agents answer, or the MAD goes on
        as a sim_request), so it checks the ICRC as the receiving CA would;
        None for a packet too short or with a bad ICRC."""
        o = bth + BTH_BYTES
        end = len(frame) - lrh.ICRC_BYTES - lrh.VCRC_BYTES
        pad = (frame[bth + 1] >> 4) & 3
        if end - pad - o - DETH_BYTES < MAD_BYTES:
            return None
        if int.from_bytes(frame[end:end + lrh.ICRC_BYTES], "little") != \
                lrh.icrc(frame[:end], lrh.LNH_IBA_GLOBAL if bth > lrh.LRH_BYTES else lrh.LNH_IBA_LOCAL):
            return None
        _, sqp = _DETH.unpack_from(frame, o)
        self.stats["mads"] += 1
        return MadIn(ingress, slid, dlid, sqp & 0xFFFFFF, dqp,
                     bytes(frame[o + DETH_BYTES:o + DETH_BYTES + MAD_BYTES]))


def _with_vl(frame, vl: int) -> bytes:
    """A copy of ``frame`` as a switch sends it on VL ``vl``."""
    f = bytearray(frame)
    lrh.set_vl(f, vl)
    return bytes(f)


def sl2vl(node, inp: int, out: int) -> tuple[int, ...]:
    """The 16 VLs of a switch's SL2VL table for (input port, output port),
    as the SM set it (the default table when it did not)."""
    return decode_sl2vl((node.sl2vl or {}).get((inp, out), model.DEFAULT_SL2VL))


def mad_packet(mad, *, slid: int, dlid: int, sqp: int, dqp: int, sl: int = 0,
               pkey: int = model.DEFAULT_PKEY) -> bytes:
    """A MAD as the native IB packet a device's QP0/QP1 receives: LRH
    (VL15 for QP0), BTH UD SEND_ONLY, DETH (Q_Key 0x80010000 for QP1,
    the source QP), the MAD, ICRC, VCRC."""
    from ..wire.headers import BTH
    from ..wire.opcodes import Opcode
    qkey = 0x80010000 if dqp == 1 else 0
    body = BTH.pack(Opcode.UD_SEND_ONLY, 0, pkey, dqp & 0xFFFFFF, 0) + \
        _DETH.pack(qkey, sqp & 0xFFFFFF) + bytes(mad)
    return lrh.encap(body, dlid=dlid, slid=slid, sl=sl, vl=lrh.VL15 if dqp == 0 else 0)
