"""The SM's life over one ibsim port: sweeps, the election, polling, answering; the timers.

``SmLoop.run`` is opensm's state manager in one loop: DISCOVERING (a
discovery sweep, then SMInfo of every other port with the IsSM capability
and ``SmInfoState.decide``), MASTER (heavy sweep, SUBNET UP; then a light
sweep every ``-s`` seconds, a heavy one when it sees a change or a trap
arrives; a better SM found in STANDBY gets the subnet by HANDOVER) or
STANDBY (poll the master's SMInfo every ``sminfo_polling_timeout``; take
over after ``polling_retry_number`` misses or on HANDOVER).  Requests that
arrive meanwhile (SMInfo, traps, SA) are answered by ``agent.Agent`` even
in the middle of a sweep.  The decisions are the sans-IO modules'; this
module only owns time and the socket loop that runs each round of SMPs
through a ``mgmt.agent.MadAgent`` (``_drive``; the port is ``mgmt.umad``'s).
"""

from __future__ import annotations

import os
import time

from ..mgmt.agent import MadAgent
from ..mgmt.umad import IbsimPort
from ..wire.mad import Method
from ..wire.smp import (CAP_IS_SM, NODE_INFO, PORT_INFO, TRAP_144_OTHER_LOCAL_CHANGES, TRAP_144_SM_PRIORITY_CHANGE,
                        SmState, SmpAttr, build_dr_smp, build_smp, notice_144)
from . import lft_dump, light
from .agent import Agent
from .discovery import Discovery
from .guid2lid import Guid2Lid
from .log import ROUTING, Log
from .sminfo import HANDOVER, RemoteSm, SmInfoState
from .pkey_setup import PkeySetup
from .qos import QosSetup
from .virt import VirtSetup
from .prtn_config import PrtnOptions
from .sweep import HeavySweep
from .mcast import mft, mft_smps

SMP_TIMEOUT = 0.2              # opensm transaction_timeout: 200 ms
SMP_RETRIES = 3                # opensm transaction_retries
FIRST_TID = 0x1000             # the low 32 bits of a TID; ibsim/umad2sim own the upper ones

_STATE_NAME = {SmState.DISCOVERING: "DISCOVERING", SmState.STANDBY: "STANDBY",
               SmState.MASTER: "MASTER", SmState.NOT_ACTIVE: "NOT ACTIVE"}


class SmLoop:
    def __init__(self, s: dict, log: Log, out, port: IbsimPort, g2l: Guid2Lid, g2l_path: str,
                 roots: set[int], sa_factory=None) -> None:
        self.s, self.log, self.out, self.port = s, log, out, port
        self.g2l, self.g2l_path, self.roots = g2l, g2l_path, roots
        # opensm's default SM_Key is 1, and it ignores SMs whose key differs
        self.sminfo = SmInfoState(0, s["priority"], s.get("sm_key", 1))
        self.sa_factory = sa_factory
        self.agent = Agent(self.sminfo)
        self.events: list = []
        self.subnet = None
        self.first_master = False       # opensm's first_time_master_sweep: set on becoming master
        self.previous = None            # LFTs this SM programmed, by switch GUID
        self.failed = 0
        self.stop = False
        self.shown = None
        self.mcast_version = -1
        self.trap_tid = 0               # our own traps' TIDs (trap 144 as a standby)
        self.pkeys = PkeySetup(PrtnOptions(config_file=s.get("partition_config_file"),
                                           allow_both_pkeys=s.get("allow_both_pkeys", False),
                                           keep_pkey_indexes=s.get("keep_pkey_indexes", True),
                                           qos=s.get("qos", False)),
                               s.get("part_enforce", "both"))
        self.qos = QosSetup(s.get("qos", False), s.get("qos_options"), s.get("qos_policy_file"),
                            s.get("use_optimized_slvl", False))
        self.virt = VirtSetup(s.get("virt_enabled", 0), log)       # (sm.virt: vports' LIDs)

    # -- plumbing --------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        print(text + "\n", file=self.out, flush=True)
        self.log.sys(text)

    def _enter(self, state: int) -> None:
        if self.shown != state:
            self._say(f"Entering {_STATE_NAME[state]} state")
            self.shown = state

    def _unsolicited(self, req) -> None:
        replies, events = self.agent.handle(req, time.monotonic())
        for dlid, dqp, sqp, mad, length in replies:
            self.port.send(mad, dlid, dqp, sqp, length)
            if dqp == 0:                      # an SMP's answer: a QP0 MAD sent (ActCount)
                self.sminfo.act_count += 1
        self.events.extend(events)

    def _program_mfts(self, force: bool = False) -> None:
        """MulticastForwardingTable blocks for the SA's groups, where they changed
        (``force``: every block with a port again, and the emptied ones cleared)."""
        sa = self.agent.sa
        if sa is None or self.subnet is None or (not force and sa.groups.version == self.mcast_version):
            return
        self.mcast_version = sa.groups.version
        tables = mft(self.subnet, sa.groups, sa.port_by_gid)     # (alias GUIDs, vports: their port)
        items = mft_smps(self.subnet, tables, sa.mfts, resend=force)
        if items:
            q = self._mads()
            batch = light.Queries(q, items)
            self._drive(q, batch)
            failed = sum(1 for v in batch.results.values() if v is None)
            if failed:
                self.log.error(f"ERR 0A06: {failed} MFT blocks failed to be set")
        sa.mfts = {sw.guid: dict(t) for sw, t in tables.items()}
        self.log.info(f"mcast: {len(items)} MFT blocks set for {len(sa.groups.by_mgid)} groups")

    def _sa_timers(self) -> None:
        if self.agent.sa is not None and self.agent.sa.transfers:
            for dlid, dqp, mad in self.agent.sa.tick(time.monotonic()):
                self.port.send(mad, dlid, dqp, 1)

    def _mads(self) -> MadAgent:
        """The agent of one round of SMPs: up to ``-wire`` (opensm's max_wire_smps) in flight."""
        return MadAgent(window=self.s["wire"], timeout=SMP_TIMEOUT, retries=SMP_RETRIES, first_tid=FIRST_TID)

    def _drive(self, q: MadAgent, machine) -> None:
        """Run ``machine`` (``start``, ``poll``, ``done``) over the port until done: the
        agent's SMPs out, their answers in, requests to the SM answered meanwhile;
        ``poll`` whenever the agent runs idle (the end of a phase)."""
        port = self.port
        machine.start()
        machine.poll()
        while not machine.done:
            for _dest, mad in q.take(time.monotonic()):
                port.send(mad)
            now = time.monotonic()
            d = q.deadline
            if port.wait((now + SMP_TIMEOUT if d is None else d) - now):
                now = time.monotonic()
                for req in port.recv_all():
                    if req.status:
                        continue          # ibsim could not deliver it (ETIMEDOUT): the timer re-sends it
                    if req.mad[3] & 0x80:
                        q.deliver(req.mad, now)
                    else:
                        self._unsolicited(req)
            q.tick(time.monotonic())
            if q.idle:
                machine.poll()
        # SMInfo's ActCount (SmActivity) is opensm's count of QP0 MADs sent
        # (osm_sminfo_rcv: stats.qp0_mads_sent): it moves with every SMP
        self.sminfo.act_count += q.sent

    def _idle(self, seconds: float) -> None:
        """Answer requests for up to ``seconds``, or until an event or a stop."""
        end = time.monotonic() + seconds
        while not self.stop and not self.events:
            left = end - time.monotonic()
            if left <= 0:
                return
            if self.port.wait(min(left, 0.05 if self.agent.sa and self.agent.sa.transfers else 0.2)):
                for req in self.port.recv_all():
                    if not req.status and not req.mad[3] & 0x80:
                        self._unsolicited(req)
            self._sa_timers()
            self._program_mfts()

    # -- the steps -------------------------------------------------------------------------
    def _discover(self) -> Discovery:
        q = self._mads()
        disc = Discovery(q, self.log)
        t0 = time.monotonic()
        self._drive(q, disc)
        disc.stats = (q.sent, q.timeouts, time.monotonic() - t0)
        sub = disc.subnet
        if not self.sminfo.guid or self.sminfo.guid != sub.sm_port_guid:
            self.sminfo.guid = sub.sm_port_guid
        if self.s["guid"] and self.s["guid"] != sub.sm_port_guid:
            raise ValueError(f"port GUID 0x{self.s['guid']:016x} is not the attached port "
                             f"(0x{sub.sm_port_guid:016x}); set SIM_HOST to the node to attach to")
        return disc

    def _other_sms(self, sub) -> list[RemoteSm]:
        if 1 in self.s.get("debug", ()):
            return []                   # -d 1: ignore other SMs
        ports = [p for p in sub.end_ports() if p.guid != sub.sm_port_guid and p.port_info
                 and PORT_INFO.get(p.port_info, "CapMask") & CAP_IS_SM]
        if not ports:
            return []
        q = self._mads()
        qs = light.Queries(q, [(p.guid, build_dr_smp(Method.GET, SmpAttr.SM_INFO, p.node.dr_path))
                               for p in ports])
        self._drive(q, qs)
        out = []
        for p in ports:
            data = qs.results.get(p.guid)
            if data is None:
                continue
            r = SmInfoState.decode(data)
            r.dr_path, r.lid = p.node.dr_path, p.lid
            out.append(r)
            self.log.verbose(f"found SM 0x{r.guid:016x} priority {r.priority} state {r.state}")
        return out

    def _heavy(self, disc: Discovery | None = None) -> None:
        disc = disc or self._discover()
        q = self._mads()
        known = set(self.subnet.ports) if self.subnet is not None else None
        sweep = HeavySweep(q, self.log, self.s["engine"], self.roots, self.g2l, self.s["lmc"],
                           self.previous, disc=disc, lmc_esp0=self.s.get("lmc_esp0", False),
                           setups=(self.pkeys, self.qos, self.virt), first_master=self.first_master,
                           known_ports=known)
        t0 = time.monotonic()
        self._drive(q, sweep)
        self.subnet = sweep.subnet
        tm = sweep.times
        dsent, dtimeouts, dtime = disc.stats
        nsw = sum(1 for n in self.subnet.nodes.values() if n.is_switch)
        self.log.info(f"heavy sweep: {len(self.subnet.nodes)} nodes ({nsw} switches), {dsent + q.sent} SMPs, "
                      f"{dtimeouts + q.timeouts} timeouts, {dtime + time.monotonic() - t0:.3f} s "
                      f"(discovery {dtime:.3f}, LIDs {tm['lids'] - tm['discovering']:.3f}, "
                      f"routing {tm['routed'] - tm['lids']:.3f}, LFTs {tm['routing'] - tm['routed']:.3f}, "
                      f"port states {tm['up'] - tm['routing']:.3f})")
        self._dumps(sweep)
        bad = sweep.failed + disc.errors
        if bad:
            self.log.error(f"ERR 3A10: {bad} SMPs failed in the sweep")
            self.failed += bad
        else:
            self.first_master = False       # every port has had its PortInfo Set (and reregister)
        self.previous = sweep.programmed()
        if self.sa_factory:
            if self.agent.sa is None:
                self.agent.sa = self.sa_factory(self.subnet, self.sminfo, self.log)
            else:
                self.agent.sa.set_subnet(self.subnet)
                self.agent.sa.mcast_members_present()
            self._program_mfts(force=True)
        if not bad or self.shown != "up":
            self._say("SUBNET UP")
            self.shown = "up"
        # the tables only the SA shows, once the subnet is up (none left: no SMP goes out)
        q = self._mads()
        self._drive(q, light.Queries(q, self.pkeys.deferred(self.subnet), self.pkeys.store_deferred))

    def _dumps(self, sweep: HeavySweep) -> None:
        try:
            # osm_db_store: the file is rewritten only when a record changed
            if self.g2l.dirty or not os.path.exists(self.g2l_path):
                os.makedirs(os.path.dirname(self.g2l_path) or ".", exist_ok=True)
                with open(self.g2l_path, "w") as f:
                    f.write(self.g2l.dumps())
                self.g2l.dirty = False
        except OSError as e:
            self.log.error(f"ERR 6D04: cannot write {self.g2l_path}: {e.strerror}")
        if self.s["flags"] & ROUTING:
            path = os.path.join(self.s["dump_dir"], "opensm-lfts.dump")
            try:
                with open(path, "wb") as f:
                    lft_dump.write(f, sweep.subnet, sweep.lfts)
            except OSError as e:
                self.log.error(f"ERR 4A02: cannot write {path}: {e.strerror}")

    def _discovering(self) -> None:
        """DISCOVERING: discover, elect, and sweep as master or wait as standby."""
        self.sminfo.state = SmState.DISCOVERING
        self._enter(SmState.DISCOVERING)
        disc = self._discover()
        others = self._other_sms(disc.subnet)
        state = self.sminfo.decide(others)
        self._enter(state)
        if state == SmState.MASTER:
            self.first_master = True        # just became master: every port is told to reregister
            self._heavy(disc)
        else:
            self.agent.sa = None            # only the master SM answers SA queries
            self.subnet = disc.subnet
            m = self.sminfo.master
            self.log.info(f"standby: master SM 0x{m.guid:016x} priority {m.priority}" if m
                          else "standby: waiting for a better SM to become master")

    def _handover_if_outranked(self) -> None:
        others = self._other_sms(self.subnet)
        rival = [o for o in others if o.state == SmState.MASTER and not self.sminfo.outranks(o)]
        if rival:
            # two masters (a partition merged, or one came up unaware): the lesser yields
            self.log.info(f"SM 0x{rival[0].guid:016x} (priority {rival[0].priority}) is master: "
                          "going standby")
            self.sminfo.state, self.sminfo.master = SmState.STANDBY, rival[0]
            self.sminfo.missed_polls = 0
            self.agent.sa = None
            self._enter(SmState.STANDBY)
            return
        target = self.sminfo.handover_target(others)
        if target is None:
            return
        q = self._mads()
        qs = light.Queries(q, [("ho", build_dr_smp(Method.SET, SmpAttr.SM_INFO, target.dr_path,
                                                    HANDOVER, self.sminfo.attr()))])
        self._drive(q, qs)
        if qs.results.get("ho") is not None:
            self.log.info(f"handed the subnet over to SM 0x{target.guid:016x} (priority {target.priority})")
            self.sminfo.state = SmState.STANDBY
            self.sminfo.master = target
            self.sminfo.missed_polls = 0
            self.agent.sa = None
            self._enter(SmState.STANDBY)

    def _poll_master(self) -> None:
        """A polling tick as STANDBY (``SmInfoState.poll_due``): take over,
        or send the master one more SMInfo Get and take its answer."""
        m = self.sminfo.master
        if m is None:
            self.sminfo.missed_polls = 0
            self._discovering()
            return
        if self.sminfo.poll_due(self.s["poll_retries"]) == "takeover":
            self.log.info(f"master SM 0x{m.guid:016x} is gone: taking over")
            self._discovering()
            return
        q = self._mads()
        qs = light.Queries(q, [("m", build_dr_smp(Method.GET, SmpAttr.SM_INFO, m.dr_path))])
        self._drive(q, qs)
        data = qs.results.get("m")
        answer = SmInfoState.decode(data) if data is not None else None
        self.sminfo.poll_answered(answer)
        if answer is not None and answer.state == SmState.MASTER and self.sminfo.outranks(m):
            # opensm's standby does so at every poll (osm_sminfo_rcv): a master that
            # missed the trap 144 of our port's IsSM -- it asked our SMInfo while we were
            # still discovering, or not at all -- would never hand the subnet over
            self._trap144(m)

    def _trap144(self, master: RemoteSm) -> None:
        """Trap 144, SM priority changed, from our port to ``master``'s LID
        (osm_send_trap144 with TRAP_144_MASK_SM_PRIORITY_CHANGE): it sweeps,
        finds us and hands over."""
        me = self.subnet.ports.get(self.sminfo.guid) if self.subnet is not None else None
        if me is None or not me.lid or not master.lid or not me.port_info:
            return
        data = notice_144(me.lid, PORT_INFO.get(me.port_info, "CapMask"),
                          producer_type=2 if me.node.is_switch else 1,
                          local_changes=TRAP_144_OTHER_LOCAL_CHANGES, change_flags=TRAP_144_SM_PRIORITY_CHANGE)
        self.trap_tid = (self.trap_tid + 1) & 0xFFFFFFFF or 1
        self.port.send(build_smp(Method.TRAP, SmpAttr.NOTICE, 0, data, tid=self.trap_tid), master.lid,
                       slid=me.lid)

    # -- the loop --------------------------------------------------------------------------
    def _own_guid(self) -> None:
        """Our port GUID before anything else: another SM may ask our SMInfo any moment
        (ibsim's control channel only tells the node GUID)."""
        q = self._mads()
        qs = light.Queries(q, [("me", build_dr_smp(Method.GET, SmpAttr.NODE_INFO, ()))])
        self._drive(q, qs)
        data = qs.results.get("me")
        if data is not None:
            self.sminfo.guid = NODE_INFO.decode(data)["PortGuid"]

    def run(self, once: bool) -> int:
        self._own_guid()
        if isinstance(self.port, IbsimPort):
            # IsSM only now: a master asks our SMInfo as soon as it sees the bit, and an
            # SMInfo Get left unanswered (we could not say our GUID before) was seen to
            # stall the real opensm's sweep under umad2sim for good (its MAD never timed out)
            self.port.set_issm()
        self._discovering()
        if once:
            return 1 if self.failed else 0
        next_sweep = time.monotonic() + (self.s["sweep"] or 1e12)
        next_poll = time.monotonic() + self.s["poll_interval"]
        while not self.stop:
            if self.sminfo.state == SmState.MASTER:
                self._idle(next_sweep - time.monotonic())
            else:
                self._idle(next_poll - time.monotonic())
            if self.stop:
                break
            events, self.events = self.events, []
            if any(e[0] == "handover" for e in events):
                self.log.info("HANDOVER received: taking over")
                self._discovering()
                continue
            if self.sminfo.state == SmState.MASTER:
                traps = [e[1] for e in events if e[0] == "trap"]
                why = f"trap {traps[0]}" if traps else None
                light_swept = False
                if why is None and time.monotonic() >= next_sweep:
                    q = self._mads()
                    ls = light.light_sweep(q, self.subnet)
                    self._drive(q, ls)
                    why = light.changed(self.subnet, ls)
                    next_sweep = time.monotonic() + (self.s["sweep"] or 1e12)
                    light_swept = True
                if why:
                    self.log.info(f"heavy sweep: {why}")
                    self._heavy()
                    self._handover_if_outranked()
                elif light_swept:
                    # opensm's light sweep ends with the SMInfo of every SM it knows
                    # (state_mgr_light_sweep_start: query_sm_info): a better SM that
                    # was still discovering at the last heavy sweep, and has stood by
                    # since, gets the subnet now
                    self._handover_if_outranked()
            elif self.sminfo.state == SmState.STANDBY and time.monotonic() >= next_poll:
                self._poll_master()
                # the polling timer's cadence, as opensm's: the next tick one interval after
                # this one, however long this poll waited for its answer
                next_poll += self.s["poll_interval"]
                if next_poll <= time.monotonic():
                    next_poll = time.monotonic() + self.s["poll_interval"]
        self.log.sys("Exiting SM")
        return 0
