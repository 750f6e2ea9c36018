"""Moving MADs through the fabric: directed routes, LID routes, traps.

Owns :class:`Router`, whose :meth:`Router.inject` is the one entry point
a server calls with a MAD that a client sent from a port.  It returns the
MADs that come out somewhere as :class:`Delivery` rows: a response of an
SMA/PMA, a MAD for an SM or other client on some port (SMInfo, traps, SA
queries, responses from a client), or the MAD back to its sender with
``status=ETIMEDOUT`` when the fabric dropped it (ibsim's convention).

Directed routes follow IBA 14.2.2: the hop pointer and the initial path
on the way out (each node records its arrival port in the return path),
the return path with the D bit set on the way back, and the LID-routed
part before the directed part when DrSLID is not the permissive LID
(``ibportstate``'s and ``iblinkinfo -S``'s neighbour queries; ibsim drops
those).  A LID-routed part *after* the directed part (DrDLID) is not
supported and is dropped with a reason.  LID routes go hop by hop
through the LFTs the SM programmed, honouring LinearFDBTop and the
logical port states.  Every link crossed bumps the PortCounters of both
ends.  Link up/down events set SwitchInfo.PortStateChange and produce
trap 128 to the switch's SM LID.
"""

from __future__ import annotations

import functools
import random
import struct
from typing import NamedTuple

from ..wire import smp
from ..wire.ibsim import ETIMEDOUT, SIM_REQUEST
from ..wire.mad import IB_MGMT_MAD_SIZE, MgmtClass, Method
from ..wire.smp import IB_LID_PERMISSIVE, PhysState, PortState
from . import agents, model
from .model import Fabric, Port

#: PortXmitData/PortRcvData units (4 octets) of one MAD packet on the wire:
#: LRH 8 + BTH 12 + DETH 8 + MAD 256 + ICRC 4 = 288 octets.
MAD_WORDS = 72
MAX_HOPS = 64

_SMP_CLASSES = (MgmtClass.SUBN_LID_ROUTED, MgmtClass.SUBN_DIRECTED_ROUTE)
_TRAP_REPRESS = int(Method.TRAP_REPRESS)
_DIRECTED = int(MgmtClass.SUBN_DIRECTED_ROUTE)
# the directed-route hot path's constants as plain ints (an enum member costs a lookup)
_GET, _SET, _GET_RESP = int(Method.GET), int(Method.SET), int(Method.GET_RESP)
_SMP_DATA, _DR_MAX_HOPS = smp.SMP_DATA_SIZE, smp.DR_MAX_HOPS
_SM_INFO, _NOTICE = int(smp.SmpAttr.SM_INFO), int(smp.SmpAttr.NOTICE)
_SWITCH = int(smp.NodeType.SWITCH)
_LINK_UP = int(PhysState.LINK_UP)
_PC_XMIT_PKTS, _PC_XMIT_DATA = model.PC_XMIT_PKTS, model.PC_XMIT_DATA
_PC_RCV_PKTS, _PC_RCV_DATA = model.PC_RCV_PKTS, model.PC_RCV_DATA
_DR_PATH, _DR_RPATH = smp.DR_PATH_OFFSET, smp.DR_RPATH_OFFSET
_DR_WORD = struct.Struct(">HBB")       # D bit and status, hop pointer, hop count (byte 4)
_DR_LIDS = struct.Struct(">HH")        # DrSLID, DrDLID (byte 32)
_MOD = struct.Struct(">I")

try:                                   # the compiled common directed-route SMP, where built
    from . import _smpfast
    _smpfast.setup(model.Port, model.Node,
                   (_PC_XMIT_DATA, _PC_RCV_DATA, _PC_XMIT_PKTS, _PC_RCV_PKTS),
                   (_LINK_UP, _SWITCH, MAD_WORDS, _GET, _SET, _GET_RESP, _SM_INFO, _NOTICE,
                    _TRAP_REPRESS, _DIRECTED, int(smp.SmpAttr.NODE_INFO)))
    _smp_directed = _smpfast.directed
except ImportError:                    # pragma: no cover - no C compiler at install
    _smp_directed = None


def _count_hop(out: Port, into: Port) -> None:
    """One MAD over the link from ``out`` to ``into``: PortXmit* and PortRcv* of the ends."""
    pc = out.pc
    if pc is None:
        pc = out.counters()
    pc[_PC_XMIT_PKTS] += 1
    pc[_PC_XMIT_DATA] += MAD_WORDS
    pc = into.pc
    if pc is None:
        pc = into.counters()
    pc[_PC_RCV_PKTS] += 1
    pc[_PC_RCV_DATA] += MAD_WORDS


class Delivery(NamedTuple):
    """A MAD that leaves the fabric at ``port`` for destination QP ``qp``.

    ``dropped`` means the fabric lost the request and this is it coming
    back to its sender with ``status`` ETIMEDOUT; otherwise status is 0
    and the receiver is whoever listens on (port, qp) (for a response: the
    client named by its TID).  ``spontaneous`` marks a trap the fabric
    raised itself: if nobody listens it is simply lost."""

    port: Port
    qp: int
    mad: bytes
    slid: int
    dlid: int
    sqp: int
    status: int = 0
    dropped: bool = False
    spontaneous: bool = False     # made by the fabric (a trap), not caused by the sender


class Drop(Exception):
    """Internal: the MAD is lost here (the reason goes to the log)."""


class Router:
    """Routes MADs over one :class:`~softrdma.fabric.model.Fabric`.

    Randomness (the `error` drop rate) comes from a seeded generator, so
    runs are reproducible; there is no clock.  ``log`` receives a line per
    dropped MAD when set."""

    def __init__(self, fabric: Fabric, seed: int = 0, log=None):
        self.fabric = fabric
        self.sma = agents.Sma(self)
        self.pma = agents.Pma()
        self.rng = random.Random(seed)
        self.log = log
        self.trap_tid = 0
        self.dropped = 0
        self._pending: list[Delivery] = []
        self._near: dict = {}                # node -> its ports and their partners (node_changed)

    # --- the entry point ------------------------------------------------------------------
    def inject(self, port: Port, mad, slid: int, dlid: int, sqp: int, dqp: int) -> list[Delivery]:
        """A MAD sent by a client on ``port``; what comes out of the fabric."""
        mad = bytearray(mad)
        self._pending = []
        try:
            if len(mad) != IB_MGMT_MAD_SIZE:
                raise Drop(f"MAD of {len(mad)} bytes")
            if mad[0] != 1 or mad[2] > 2:
                raise Drop(f"base version {mad[0]} / class version {mad[2]}")
            method = mad[3]
            if method == _TRAP_REPRESS:
                return []                      # the SMA does not resend traps: nothing to stop
            if mad[1] == _DIRECTED:
                out = self._directed(port, mad, dlid, sqp, dqp)
            else:
                out = self._lid_routed(port, mad, slid, dlid, sqp, dqp)
        except Drop as e:
            out = [self._dropped(port, mad, e, slid, dlid, sqp, dqp)]
        return self._pending + out if self._pending else out

    def _dropped(self, port: Port, mad, why: Drop, slid, dlid, sqp, dqp) -> Delivery:
        """The fabric lost the MAD: it goes back to its sender with ETIMEDOUT (ibsim's way)."""
        self.dropped += 1
        if self.log:
            self.log(f"drop from {port.name}: {why}")
        return Delivery(port, sqp, bytes(mad), dlid, slid, dqp, ETIMEDOUT, True)

    # --- the compiled common case -------------------------------------------------------
    fast = _smp_directed is not None

    def directed_fast(self, port: Port, req: bytes, tid_top: int, answer_port: Port):
        """A client's sim_request through the compiled directed-route path
        (``_smpfast``: the same walk, counters and SMA as ``inject`` for a plain
        DR Get or Set).  None: it is not that case and nothing changed --
        ``inject`` it.  Otherwise (deliveries, packet): ``packet`` is the
        sim_request answering the client at ``answer_port`` (or None), and
        ``deliveries`` what else comes out (traps of a Set, an answer leaving
        elsewhere), to be delivered first."""
        return self.fast_result(port, req, _smp_directed(port, tid_top, self.sma.process,
                                                         answer_port, self, req))

    def fast_handler(self, port: Port, tid_top: int, answer_port: Port):
        """``directed_fast`` as a one-argument callable of the request, for a
        compiled loop (``_sendmmsg.serve``); what it returns goes through
        ``fast_result`` unless it is the answer's bytes."""
        return functools.partial(_smp_directed, port, tid_top, self.sma.process, answer_port, self)

    def fast_result(self, port: Port, req: bytes, r):
        """What the compiled path returned for ``req`` from ``port``, as
        ``directed_fast`` returns it."""
        if r is None or type(r) is bytes:
            return None if r is None else ([], r)
        kind = r[0]
        if kind == 2:                          # answered, after the traps its Set raised
            return self._pending, r[1]
        dlid, slid, dqp, sqp = SIM_REQUEST.unpack(req)[:4]
        if kind == 0:                          # answered; it leaves at another port
            return self._pending + [Delivery(r[1], sqp, r[2], IB_LID_PERMISSIVE, IB_LID_PERMISSIVE,
                                             dqp)], None
        _, cur, mad, hop_cnt = r               # a Set's way back is not plain: the reference walks it
        try:
            back = self._dr_return(cur, mad, hop_cnt, IB_LID_PERMISSIVE, IB_LID_PERMISSIVE)
            out = Delivery(back, sqp, bytes(mad), IB_LID_PERMISSIVE, IB_LID_PERMISSIVE, dqp)
        except Drop as e:
            out = self._dropped(port, mad, e, slid, dlid, sqp, dqp)
        return self._pending + [out], None

    # --- LID routing ---------------------------------------------------------------------
    def _lid_routed(self, port, mad, slid, dlid, sqp, dqp):
        base = port.node.ports[0] if port.node.is_switch else port
        if slid == 0:
            slid = base.lid
        smp_class = mad[1] == MgmtClass.SUBN_LID_ROUTED
        if dlid == IB_LID_PERMISSIVE:
            dest, arrival = base, port.num
        elif dlid == 0 or dlid >= model.MCAST_LID_BASE:
            raise Drop(f"DLID {dlid:#x} is not a unicast LID")
        else:
            dest, arrival = self.lid_route(port, dlid, smp_class)
        return self._arrive(dest, arrival, mad, slid, dlid, sqp, dqp)

    def lid_route(self, start: Port, dlid: int, smp_class: bool = True) -> tuple[Port, int]:
        """(destination port, number of the port it entered the node by)."""
        node = start.node
        if node.is_switch:
            cur_num = start.num
        else:
            if start.has_lid(dlid):
                return start, start.num
            cur = self._cross(start, smp_class)
            node, cur_num = cur.node, cur.num
            if not node.is_switch:
                if cur.has_lid(dlid):
                    return cur, cur_num
                raise Drop(f"{cur.name} does not own LID {dlid}")
        for _ in range(MAX_HOPS):
            p0 = node.ports[0]
            if p0.has_lid(dlid):
                return p0, cur_num
            out_num = node.lft_get(dlid) if dlid <= node.lft_top else 0xFF
            if out_num == 0 or out_num > node.nports:
                if cur_num:
                    node.ports[cur_num].counters()[model.PC_RCV_SW_RELAY_ERRORS] += 1
                raise Drop(f'"{node.nodeid}": no LFT entry for LID {dlid}')
            cur = self._cross(node.ports[out_num], smp_class)
            node, cur_num = cur.node, cur.num
            if not node.is_switch:
                if cur.has_lid(dlid):
                    return cur, cur_num
                raise Drop(f"{cur.name} reached for LID {dlid} it does not own")
        raise Drop(f"LID {dlid}: more than {MAX_HOPS} hops (LFT loop)")

    def _cross(self, out: Port, smp_class: bool, logical: bool = True) -> Port:
        """Send over ``out``'s link: checks, counters, the port on the other side.
        SMPs (VL15) need both ends at least Init; other MADs need an Active
        sender and a receiver at least Armed (IBA 7.2)."""
        r = out.remote
        if r is None or out.phys != PhysState.LINK_UP or r.phys != PhysState.LINK_UP:
            out.counters()[model.PC_XMIT_DISCARDS] += 1
            raise Drop(f"{out.name}: link not up")
        if logical:
            if smp_class:
                ok = out.state >= PortState.INIT and r.state >= PortState.INIT
            else:
                ok = out.state == PortState.ACTIVE and r.state >= PortState.ARMED
            if not ok:
                out.counters()[model.PC_XMIT_DISCARDS] += 1
                raise Drop(f"{out.name} -> {r.name}: port states "
                           f"{PortState(out.state).name}/{PortState(r.state).name}")
        if out.err_rate and not out.err_attr and self.rng.randrange(100) < out.err_rate:
            out.counters()[model.PC_XMIT_DISCARDS] += 1
            raise Drop(f"{out.name}: error rate {out.err_rate}%")
        pc = out.counters()
        pc[model.PC_XMIT_PKTS] += 1
        pc[model.PC_XMIT_DATA] += MAD_WORDS
        pc = r.counters()
        pc[model.PC_RCV_PKTS] += 1
        pc[model.PC_RCV_DATA] += MAD_WORDS
        return r

    def _cross_vl15(self, out: Port) -> Port:
        """``_cross(out, True, logical=False)`` -- a directed-route hop -- with the
        common case (both ends physically up, no error rate) inline: the hop
        counters and the port on the other side.  Anything else takes ``_cross``."""
        r = out.remote
        if r is None or out.phys != _LINK_UP or r.phys != _LINK_UP or out.err_rate:
            return self._cross(out, True, logical=False)
        _count_hop(out, r)
        return r

    # --- directed routes -------------------------------------------------------------------
    def _directed(self, port, mad, dlid, sqp, dqp):
        if len(mad) != IB_MGMT_MAD_SIZE:
            smp.parse_dr(mad)                  # raises the WireError a short MAD gets
        ds, hop_ptr, hop_cnt = _DR_WORD.unpack_from(mad, 4)
        dr_slid, dr_dlid = _DR_LIDS.unpack_from(mad, 32)
        response = bool(mad[3] & 0x80)
        if (ds >> 15) != response:
            raise Drop(f"D bit {ds >> 15} on a {'response' if response else 'request'}")
        if hop_cnt > _DR_MAX_HOPS:
            raise Drop(f"hop count {hop_cnt}")
        if response:
            dest = self._dr_return(port, mad, hop_cnt, dr_slid, dr_dlid)
            return [Delivery(dest, 0, bytes(mad), IB_LID_PERMISSIVE, IB_LID_PERMISSIVE, sqp)]
        if hop_ptr != 0:
            raise Drop(f"hop pointer {hop_ptr} on a new request")
        if dr_dlid != IB_LID_PERMISSIVE:
            raise Drop("DrDLID (LID-routed part after the directed part) is not supported")
        cur = port
        if dr_slid != IB_LID_PERMISSIVE:
            # LID-routed to the node where the directed part starts
            cur, _ = self.lid_route(port, dlid, True)
        cross = self._cross_vl15
        hops = []                              # (port out, port in) of each hop
        for i in range(1, hop_cnt + 1):
            node = cur.node
            if i > 1 and node.type != _SWITCH:
                raise Drop(f'"{node.nodeid}" is not a switch but the path goes on (hop {i})')
            o = mad[_DR_PATH + i]
            if not 1 <= o <= node.nports:
                raise Drop(f'"{node.nodeid}" has no port {o} (hop {i})')
            out = node.ports[o]
            cur = cross(out)
            hops.append((out, cur))
            mad[_DR_RPATH + i] = cur.num
        mad[6] = hop_cnt + 1                   # the hop pointer
        node = cur.node
        arrival = cur.num
        dest = node.ports[0] if node.type == _SWITCH else cur
        attr = (mad[16] << 8) | mad[17]
        method = mad[3]
        if (method == _GET or method == _SET) and attr != _SM_INFO and attr != _NOTICE:
            # self.sma.handles(method, attr), inline
            if (dest.err_rate or cur.err_rate) and self._agent_drops(dest, cur, attr):
                raise Drop(f"{cur.name}: error rate")
            status, data = self.sma.process(node, arrival, method, attr, _MOD.unpack_from(mad, 20)[0],
                                            mad[64:64 + _SMP_DATA])
            mad[3] = _GET_RESP
            _DR_WORD.pack_into(mad, 4, 0x8000 | (status & 0x7FFF), hop_cnt + 1, hop_cnt)
            mad[64:64 + _SMP_DATA] = data
            if method == _GET and dr_slid == IB_LID_PERMISSIVE:
                back = self._dr_back(hops, port, mad)
                if back is not None:
                    return [Delivery(back, sqp, bytes(mad), IB_LID_PERMISSIVE, IB_LID_PERMISSIVE, dqp)]
            back = self._dr_return(cur, mad, hop_cnt, dr_slid, dr_dlid)
            return [Delivery(back, sqp, bytes(mad), IB_LID_PERMISSIVE, IB_LID_PERMISSIVE, dqp)]
        # SMInfo, traps: for the SM on that port
        return [Delivery(dest, dqp, bytes(mad), IB_LID_PERMISSIVE, IB_LID_PERMISSIVE, sqp)]

    @staticmethod
    def _dr_back(hops, start: Port, mad):
        """A Get's answer going back by the return path just written: the same
        links the other way, which a Get changed nothing on -- so only the
        counters move, as ``_dr_return`` would move them.  None (take
        ``_dr_return``) when a port on the way has an error rate."""
        for out, r in hops:
            if out.err_rate or r.err_rate:
                return None
        for out, r in reversed(hops):
            _count_hop(r, out)
        mad[6] = 0                             # the hop pointer
        cur = hops[0][0] if hops else start
        node = cur.node
        return node.ports[0] if node.type == _SWITCH else cur

    def _dr_return(self, start: Port, mad, hop_cnt: int, dr_slid: int, dr_dlid: int) -> Port:
        """Walk a D=1 SMP back along its return path; the port it reaches."""
        if dr_dlid != IB_LID_PERMISSIVE:
            raise Drop("DrDLID (LID-routed part after the directed part) is not supported")
        cross = self._cross_vl15
        cur = start
        for hp in range(hop_cnt, 0, -1):
            node = cur.node
            if hp < hop_cnt and node.type != _SWITCH:
                raise Drop(f'"{node.nodeid}" is not a switch but the return path goes on')
            o = mad[_DR_RPATH + hp]
            if not 1 <= o <= node.nports:
                raise Drop(f'"{node.nodeid}" has no port {o} (return hop {hp})')
            cur = cross(node.ports[o])
        mad[6] = 0                             # the hop pointer
        if dr_slid != IB_LID_PERMISSIVE:
            cur, _ = self.lid_route(cur, dr_slid, True)
        # on a switch the requester (an SM) sits behind port 0
        node = cur.node
        return node.ports[0] if node.type == _SWITCH else cur

    # --- arrival at an end port -------------------------------------------------------------
    def _agent_drops(self, dest: Port, arrived: Port, attr: int) -> bool:
        p = arrived if arrived.err_rate else dest
        return bool(p.err_rate and (not p.err_attr or p.err_attr == attr)
                    and self.rng.randrange(100) < p.err_rate)

    def _arrive(self, dest: Port, arrival: int, mad, slid, dlid, sqp, dqp):
        node = dest.node
        cls, method = mad[1], mad[3]
        attr, mod = (mad[16] << 8) | mad[17], int.from_bytes(mad[20:24], "big")
        response = bool(method & 0x80)
        agent = None
        if not response:
            if cls == MgmtClass.SUBN_LID_ROUTED and self.sma.handles(method, attr):
                agent, size = self.sma, smp.SMP_DATA_SIZE
            elif cls == MgmtClass.PERF_MGMT:
                agent, size = self.pma, smp.GS_DATA_SIZE
        if agent is None:
            return [Delivery(dest, dqp, bytes(mad), slid, dlid, sqp)]
        arrived_port = node.ports[arrival] if arrival else dest
        if self._agent_drops(dest, arrived_port, attr):
            raise Drop(f"{arrived_port.name}: error rate")
        if method not in (Method.GET, Method.SET):
            status, data = smp.SmpStatus.METHOD_UNSUPPORTED, mad[64:64 + size]
        else:
            # LID-routed to a switch, a MAD reaches its SMA port 0 (LocalPort 0 on
            # ibsim); a CA answers on the port it came in by
            local = 0 if node.is_switch else (arrival or dest.num)
            status, data = agent.process(node, local, method, attr, mod, mad[64:64 + size])
        mad[3] = Method.GET_RESP
        mad[4:6] = status.to_bytes(2, "big")
        mad[64:64 + len(data)] = data
        rslid = dlid if dlid != IB_LID_PERMISSIVE else dest.lid
        if slid == IB_LID_PERMISSIVE or slid == 0:
            raise Drop("no LID to send the response to")
        back, _ = self.lid_route(dest, slid, cls == MgmtClass.SUBN_LID_ROUTED)
        return [Delivery(back, sqp, bytes(mad), rslid, slid, dqp)]

    # --- change notification (fabric.generation / fabric.dirty, for the data plane) -------
    def node_changed(self, node, ports: bool = True) -> None:
        """An SMP Set on ``node``: routes may change; with ``ports`` (a
        PortInfo, P_Key table or GUIDInfo Set) its ports and their
        neighbours' attributes too."""
        if not ports:
            self.fabric.touch()
            return
        near = self._near.get(node)
        if near is None:           # its ports and their link partners (cables do not move)
            ps = [p for p in node.ports if p is not None]
            near = self._near[node] = (*ps, *(p.remote for p in ps if p.remote is not None))
        self.fabric.touch(*near)

    def _ports_changed(self, *ports) -> None:
        self.fabric.touch(*ports, *(p.remote for p in ports if p.remote is not None))

    # --- link events (also the SMA's PortInfo Set effects) ---------------------------------
    def disable(self, p: Port) -> None:
        self._link_change(p, PhysState.DISABLED)

    def enable(self, p: Port) -> None:
        if p.phys != PhysState.DISABLED:
            return
        p.phys = PhysState.POLLING
        r = p.remote
        if r is not None and r.phys != PhysState.DISABLED:
            self._link_change(p, PhysState.LINK_UP)

    def retrain(self, p: Port) -> None:
        """PortInfo Set PortState=Down: the link drops and trains again to Init."""
        self._ports_changed(p)
        r = p.remote
        if r is None or p.phys != PhysState.LINK_UP:
            p.state = PortState.DOWN
            return
        for q in (p, r):
            q.state = PortState.INIT
        if r.node.is_switch:
            r.node.state_change = 1

    def link_down(self, p: Port) -> list[Delivery]:
        """The `link down` command / ibsim's Unlink: the cable goes dark."""
        self._pending = []
        self._link_change(p, PhysState.POLLING)
        return self._pending

    def link_up(self, p: Port) -> list[Delivery]:
        self._pending = []
        if p.remote is None:
            raise model.FabricError(f"{p.name} has no cable")
        why = p.mismatch()
        if why is not None:
            raise model.FabricError(f"{why}: the link cannot train")
        if p.phys == PhysState.DISABLED:
            p.phys = PhysState.POLLING
        self._link_change(p, PhysState.LINK_UP)
        return self._pending

    def _link_change(self, p: Port, phys: int) -> None:
        self._ports_changed(p)
        r = p.remote
        ends = [p] if r is None else [p, r]
        was_up = p.phys == PhysState.LINK_UP and r is not None and r.phys == PhysState.LINK_UP
        if phys == PhysState.LINK_UP:
            if r is None or r.phys == PhysState.DISABLED or was_up:
                return
            why = p.mismatch()
            if why is not None:                # the ends enable no common width/speed: it
                if self.log:                   # does not train (ibsim would stop here)
                    self.log(f"{p.name} stays down: {why}")
                return
            for q in ends:
                q.phys = PhysState.LINK_UP
                q.state = PortState.INIT
            p.train()
        else:
            p.phys = phys
            p.state = PortState.DOWN
            if r is not None:
                if r.phys == PhysState.LINK_UP:
                    r.phys = PhysState.POLLING
                r.state = PortState.DOWN
            if was_up:
                for q in ends:
                    q.counters()[model.PC_LINK_DOWNED] += 1
            else:
                return
        for q in ends:
            if q.node.is_switch:
                q.node.state_change = 1
                self._trap128(q.node)

    def _trap128(self, node) -> None:
        p0 = node.ports[0]
        if not p0.lid or not p0.smlid:
            return
        data = smp.NOTICE.encode(NoticeIsGeneric=1, NoticeType=1, NoticeProducerType=2,
                                 NoticeTrapNumber=smp.TRAP_LINK_STATE_CHANGE,
                                 NoticeIssuerLID=p0.lid, NoticeDataLID=p0.lid)
        self._pending.extend(self._trap(p0, data, smp.TRAP_LINK_STATE_CHANGE))

    def _trap(self, src: Port, notice, number: int) -> list[Delivery]:
        """A Trap(Notice) from the SMA behind ``src`` to its SM's LID."""
        self.trap_tid = (self.trap_tid + 1) & 0xFFFFFFFF
        mad = smp.build_smp(Method.TRAP, smp.SmpAttr.NOTICE, 0, notice, tid=self.trap_tid)
        try:
            dest, _ = self.lid_route(src, src.smlid, True)
        except Drop as e:
            if self.log:
                self.log(f"trap {number} from {src.name} lost: {e}")
            return []
        return [Delivery(dest, 0, bytes(mad), src.lid, src.smlid, 0, spontaneous=True)]

    def trap144(self, p: Port) -> list[Delivery]:
        """A CA port's CapabilityMask changed (an SM bound to it or gone):
        trap 144 from its SMA to its SM (IBA 14.2.5.1), so that the SM
        sweeps and finds the other SM."""
        if not p.lid or not p.smlid:
            return []
        cap = smp.PORT_INFO.decode(agents.port_info(p.node, p, p.num))["CapMask"]
        return self._trap(p, smp.notice_144(p.lid, cap), smp.TRAP_CAPABILITY_MASK_CHANGE)
