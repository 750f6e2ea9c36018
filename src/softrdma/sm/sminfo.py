"""The SM's own SMInfo and the master election (IBA 14.4), sans-IO.

States NOT_ACTIVE, DISCOVERING, STANDBY, MASTER (``wire.smp.SmState``).
After discovery an SM that sees another SM in MASTER state goes STANDBY
(a newcomer never preempts a master, whatever its priority); one that sees
a better SM still DISCOVERING or STANDBY goes STANDBY too and waits for it;
otherwise it becomes MASTER.  "Better" is the higher priority, then the
lower port GUID.  A MASTER that finds a better SM in STANDBY hands the
subnet over (SMInfo Set, modifier HANDOVER) and goes STANDBY.  A STANDBY
polls its master's SMInfo; after ``retries`` unanswered polls, or on a
HANDOVER from the master, it takes over (DISCOVERING, heavy sweep, MASTER).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.smp import SM_INFO, SmState

# SMInfo Set attribute modifiers (IBA 14.4.1, table 189)
HANDOVER, ACKNOWLEDGE, DISABLE, STANDBY, DISCOVER = 1, 2, 3, 4, 5


@dataclass
class RemoteSm:
    guid: int
    priority: int
    state: int
    dr_path: tuple[int, ...] = ()
    lid: int = 0


def better(a_prio: int, a_guid: int, b_prio: int, b_guid: int) -> bool:
    """True if SM a outranks SM b."""
    return a_prio > b_prio or (a_prio == b_prio and a_guid < b_guid)


class SmInfoState:
    def __init__(self, guid: int = 0, priority: int = 0, sm_key: int = 0) -> None:
        self.guid = guid
        self.priority = priority
        self.sm_key = sm_key
        self.state = SmState.DISCOVERING
        self.act_count = 0
        self.master: RemoteSm | None = None
        self.missed_polls = 0

    def attr(self) -> bytes:
        data = SM_INFO.encode(SmInfoGuid=self.guid, SmInfoKey=self.sm_key,
                              SmActivity=self.act_count & 0xFFFFFFFF, SmPriority=self.priority,
                              SmState=self.state)
        return bytes(data).ljust(64, b"\0")

    @staticmethod
    def decode(data) -> RemoteSm:
        f = SM_INFO.decode(data)
        return RemoteSm(f["SmInfoGuid"], f["SmPriority"], f["SmState"])

    def outranks(self, other: RemoteSm) -> bool:
        return better(self.priority, self.guid, other.priority, other.guid)

    def decide(self, others: list[RemoteSm]) -> int:
        """The state after discovery, given the other SMs found (and their SMInfo)."""
        masters = [o for o in others if o.state == SmState.MASTER]
        if masters:
            self.state, self.master = SmState.STANDBY, masters[0]
        elif any(not self.outranks(o) for o in others
                  if o.state in (SmState.DISCOVERING, SmState.STANDBY)):
            self.state, self.master = SmState.STANDBY, None
        else:
            self.state, self.master = SmState.MASTER, None
        self.missed_polls = 0
        return self.state

    def handover_target(self, others: list[RemoteSm]) -> RemoteSm | None:
        """As MASTER: a better SM in STANDBY to hand the subnet to, if any."""
        cands = [o for o in others if o.state == SmState.STANDBY and not self.outranks(o)]
        if not cands:
            return None
        best = cands[0]
        for o in cands[1:]:
            if better(o.priority, o.guid, best.priority, best.guid):
                best = o
        return best

    def on_set(self, modifier: int) -> str | None:
        """An SMInfo Set from another SM; returns what the SM must do, if anything."""
        if modifier == HANDOVER and self.state == SmState.STANDBY:
            self.state = SmState.DISCOVERING
            return "takeover"
        if modifier == DISABLE and self.state == SmState.STANDBY:
            self.state = SmState.NOT_ACTIVE
            return None
        if modifier == DISCOVER and self.state == SmState.NOT_ACTIVE:
            self.state = SmState.DISCOVERING
            return "takeover"
        if modifier == STANDBY and self.state == SmState.MASTER:
            self.state = SmState.STANDBY
            return None
        return None

    def poll_due(self, retries: int) -> str:
        """As STANDBY, at a polling tick (every sminfo_polling_timeout, as
        opensm's polling timer fires): "takeover" once more than ``retries``
        polls went unanswered since the master's last answer
        (osm_sm_state_mgr_polling_callback's ``retry_number >
        polling_retry_number``), else "poll" (one more is sent, counted)."""
        if self.missed_polls > retries:
            self.state = SmState.DISCOVERING
            return "takeover"
        self.missed_polls += 1
        return "poll"

    def poll_answered(self, answer: RemoteSm | None) -> None:
        """The master's answer to a poll (None: none came): alive resets the
        count, as osm_sm_state_mgr_signal_master_is_alive."""
        # a master-elect still sweeping answers DISCOVERING: alive, not missed
        if answer is not None and answer.state in (SmState.MASTER, SmState.DISCOVERING):
            self.missed_polls = 0
            self.master.priority, self.master.state = answer.priority, answer.state
