"""One heavy sweep (opensm's osm_state_mgr heavy-sweep path), sans-IO, phase after phase.

discovery → LIDs (lid_mgr; PortInfo Set of LID/LMC/SMLID on end ports whose
LID or SM LID changes; with ClientReregister, as opensm's
lid_mgr_set_physp_pi sets it, on every port that supports it
(CapabilityMask IsClientReregistrationSupported) when this is the SM's
first sweep as master, when the port's SM LID is not ours, or when the
port is new to the subnet -- its clients then join their multicast groups
again, with an SM that knows none of them) → routing (the chosen engine,
minhop fallback) →
SwitchInfo Set (LinearFDBTop, LifeTime) → LFT blocks Set (block i of every
switch, then block i+1, as opensm pipelines them; only blocks that changed
since the last sweep) → every linked port in INIT set ARMED, then every
ARMED port set ACTIVE → SUBNET UP.

Each phase posts its SMPs to the ``MadAgent``; the driver calls ``poll``
whenever the queue runs idle, which starts the next phase.  Port state Sets
carry LinkState only (PhysLinkState, speeds and widths left at "no change"
or their current values), the rest of PortInfo as last read.
"""

from __future__ import annotations

import time

from ..mgmt.agent import MadAgent
from ..wire.mad import Method
from ..wire.smp import (CAP_IS_CLIENT_REREGISTRATION_SUPPORTED, PORT_INFO, SWITCH_INFO, SmpAttr, build_dr_smp,
                        smp_data)
from . import lft_dump, log as L
from .discovery import Discovery, dr_status
from .guid2lid import Guid2Lid
from .light import FEED
from .lid_mgr import assign_lids
from .routing import compute
from .subnet import NO_PATH, Node, Physp, Subnet
from .virt import route_vports

PORT_INIT, PORT_ARMED, PORT_ACTIVE = 2, 3, 4
PACKET_LIFE_TIME = 0x12          # opensm's default packet_life_time
LFT_BLOCK = 64
SUBNET_PREFIX = 0xFE80000000000000
HOQ_LIFE = 0x12                  # opensm's head_of_queue_lifetime (switch-to-switch ports)
LEAF_HOQ_LIFE = 0x10             # leaf_head_of_queue_lifetime (switch ports to CAs, port 0)


class HeavySweep:
    def __init__(self, q: MadAgent, log: L.Log, engine: str = "minhop", roots=None,
                 g2l: Guid2Lid | None = None, lmc: int = 0, previous: dict[int, bytes] | None = None,
                 disc: Discovery | None = None, lmc_esp0: bool = False, setups=(), first_master: bool = False,
                 known_ports: set[int] | None = None):
        self.q = q
        # opensm's first_time_master_sweep; the port GUIDs of the previous sweep (others are new)
        self.first_master = first_master
        self.known_ports = known_ports
        self.lmc_esp0 = lmc_esp0
        self.log = log
        self.engine = engine
        self.roots = set(roots or ())
        self.g2l = g2l if g2l is not None else Guid2Lid()
        self.lmc = lmc
        self.previous = previous or {}      # switch GUID -> LFT this SM programmed before
        self.discovered = disc is not None       # discovery already ran (the election needed it)
        self.disc = disc or Discovery(q, log)
        self.subnet: Subnet = self.disc.subnet
        self.lfts: dict[Node, bytearray] = {}
        self.engine_used = ""
        self.phase = "init"
        self.done = False
        self.failed = 0
        self.times: dict[str, float] = {}
        # setups (pkey_setup, qos_setup): their phases run after the LIDs, before the routing
        self._phases = [self._lids, *(f for s in setups for f in s.phases(self)),
                        self._route, self._arm, self._activate, self._up]

    # -- driving ---------------------------------------------------------------------------
    def start(self) -> None:
        self.times["start"] = time.monotonic()
        self.phase = "discovering"
        if not self.discovered:
            self.disc.start()

    def poll(self) -> None:
        """Called when the queue is idle: start the next phase (which may submit nothing)."""
        while self.q.idle and not self.done and self._phases:
            self.times[self.phase] = time.monotonic()
            self._phases.pop(0)()

    # -- phases ----------------------------------------------------------------------------
    def _set(self, node: Node, attr: int, mod: int, data: bytes, what: str, port: Physp | None = None) -> None:
        def cb(r, what=what):
            if r is None:
                self.failed += 1
                self.log.error(f"{what}: timeout")
            elif dr_status(r):
                self.failed += 1
                self.log.error(f"{what}: MAD status {dr_status(r):#x}")
            elif port is not None:
                # the answer is the port as it is now (LinkState no longer "no change")
                port.port_info = bytes(smp_data(r)[:PORT_INFO.size])
            elif attr == SmpAttr.SWITCH_INFO:
                node.switch_info = bytes(smp_data(r)[:SWITCH_INFO.size])     # what the SA reports
        self.q.post_send(build_dr_smp(Method.SET, attr, node.dr_path, mod, data), cb)

    def _lids(self) -> None:
        sub = self.subnet
        self.log.verbose(f"discovered {len(sub.nodes)} nodes, "
                         f"{sum(1 for n in sub.nodes.values() if n.is_switch)} switches")
        if sub.sm_node is None:
            raise RuntimeError("discovery found no SM node")
        self.phase = "lids"
        # the LID table of the SM's previous sweeps (the LFTs it programmed span it)
        sub.lid_top = max(sub.lid_top, max((len(l) - 1 for l in self.previous.values()), default=0))
        assign_lids(sub, self.g2l, self.lmc, self.lmc_esp0)
        if sub.out_of_lids:
            self.log.error(f"ERR 0307: OPENSM RAN OUT OF LIDS!!! ({len(sub.out_of_lids)} ports left "
                           f"without a LID at LMC {self.lmc})")
        sm_lid = sub.ports[sub.sm_port_guid].lid
        self.sm_lid = sm_lid
        for p in sub.end_ports():
            if not p.port_info:
                continue
            pi = PORT_INFO.decode(p.port_info)
            want = dict(Lid=p.lid, SMLid=sm_lid, LMC=p.lmc, GidPrefix=SUBNET_PREFIX)
            if p.node.is_switch:
                want["HoqLife"] = LEAF_HOQ_LIFE
            new = self.known_ports is not None and p.guid not in self.known_ports
            if (self.first_master or pi["SMLid"] != sm_lid or new) \
                    and pi["CapMask"] & CAP_IS_CLIENT_REREGISTRATION_SUPPORTED:
                want["ClientReregister"] = 1     # (a port answers 0: the Set always goes)
                self.log.debug(f"Setting client rereg on 0x{p.guid:016x}, port {p.num}")
            if all(pi[k] == v for k, v in want.items()):
                continue
            data = bytearray(p.port_info)
            PORT_INFO.encode_into(data, 0, LinkState=0, PhysLinkState=0, **want)
            self._set(p.node, SmpAttr.PORT_INFO, p.num, bytes(data),
                      f"PortInfo Set LID {p.lid} on 0x{p.guid:016x}", port=p)

    def _route(self) -> None:
        self.phase = "routing"
        sub = self.subnet
        existing = {sw: self.previous[sw.guid] for sw in sub.switches() if sw.guid in self.previous}
        why: list[str] = []
        self.engine_used, self.lfts = compute(sub, self.engine, self.roots, existing or None, why)
        sub.lfts = self.lfts
        vport_top = route_vports(sub, self.lfts)        # (sm.virt: a vport's LID goes as its port's)
        if self.engine_used != self.engine:
            self.log.info(f"{self.engine}: cannot route this subnet"
                          f"{' (' + why[0] + ')' if why else ''}, falling back to minhop")
        self.log.info(f"{self.engine_used} tables configured on all switches")
        self.times["routed"] = time.monotonic()
        max_lid = max(sub.max_lid(), vport_top)
        for sw in sub.switches():
            si = bytearray(sw.switch_info or bytes(SWITCH_INFO.size))
            cur = SWITCH_INFO.decode(si)
            if cur["LinearFdbTop"] != max_lid or cur["LifeTime"] != PACKET_LIFE_TIME or cur["StateChange"]:
                SWITCH_INFO.encode_into(si, 0, LinearFdbTop=max_lid, LifeTime=PACKET_LIFE_TIME)
                self._set(sw, SmpAttr.SWITCH_INFO, 0, bytes(si), f"SwitchInfo Set on 0x{sw.guid:016x}")
        self._feed(self._lft_blocks(max_lid))

    def _lft_blocks(self, max_lid: int):
        sws = self.subnet.switches()
        for b in range(max_lid // LFT_BLOCK + 1):
            for sw in sws:
                new = self.lfts[sw]
                blk = bytes(new[b * LFT_BLOCK:(b + 1) * LFT_BLOCK]).ljust(LFT_BLOCK, bytes([NO_PATH]))
                old = self.previous.get(sw.guid)
                if old is not None and bytes(old[b * LFT_BLOCK:(b + 1) * LFT_BLOCK]).ljust(
                        LFT_BLOCK, bytes([NO_PATH])) == blk:
                    continue
                yield lambda sw=sw, b=b, blk=blk: self._set(sw, SmpAttr.LINEAR_FWD_TABLE, b, blk,
                                                            f"LFT block {b} Set on 0x{sw.guid:016x}")

    def _feed(self, posts) -> None:
        """Queue the SMPs of ``posts`` (callables that post one each) FEED at a time, the next
        ones when the queue runs idle: at 10,000s of nodes a phase is 100,000s of SMPs, and
        all of them queued at once would be a gigabyte of requests waiting."""
        n = 0
        for post in posts:
            post()
            n += 1
            if n == FEED:
                self._phases.insert(0, lambda: self._feed(posts))
                return

    def _linked_ports(self):
        for node in self.subnet.nodes.values():
            for num, p in node.ports.items():
                if num and p.remote is not None and p.port_info:
                    yield p

    def _port_state(self, p: Physp, state: int) -> None:
        data = bytearray(p.port_info)
        PORT_INFO.encode_into(data, 0, LinkState=state, PhysLinkState=0)
        if not (p.node.is_switch and p.num):
            PORT_INFO.encode_into(data, 0, Lid=p.lid, SMLid=self.sm_lid, LMC=p.lmc, GidPrefix=SUBNET_PREFIX)
        else:
            PORT_INFO.encode_into(data, 0, HoqLife=HOQ_LIFE if p.remote.node.is_switch else LEAF_HOQ_LIFE)

        def cb(r, p=p):
            if r is None or dr_status(r):
                self.failed += 1
                self.log.error(f"PortInfo Set state {state} on 0x{p.node.guid:016x} port {p.num} failed")
                return
            p.port_info = bytes(smp_data(r)[:PORT_INFO.size])
            p.state = PORT_INFO.get(p.port_info, "LinkState")
        self.q.post_send(build_dr_smp(Method.SET, SmpAttr.PORT_INFO, p.node.dr_path, p.num, bytes(data)), cb)

    def _arm(self) -> None:
        self.phase = "arming"
        self._feed(lambda p=p: self._port_state(p, PORT_ARMED)
                   for p in self._linked_ports() if p.state == PORT_INIT)

    def _activate(self) -> None:
        self.phase = "activating"
        self._feed(lambda p=p: self._port_state(p, PORT_ACTIVE)
                   for p in self._linked_ports() if p.state == PORT_ARMED)

    def _up(self) -> None:
        self.phase = "up"
        self.done = True
        self.times["up"] = time.monotonic()

    # -- results ---------------------------------------------------------------------------
    def lft_dump(self) -> str:
        return lft_dump.dumps(self.subnet, self.lfts)

    def programmed(self) -> dict[int, bytes]:
        return {sw.guid: bytes(lft) for sw, lft in self.lfts.items()}
