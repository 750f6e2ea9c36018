"""The SM's answers to MADs it did not ask for: SMInfo, traps and (via ``sa``) SA queries; sans-IO.

``handle(req)`` takes one ``wire.ibsim.SimRequest`` that ibsim delivered to
the SM port and returns ``(replies, events)``: replies are ``(dlid, dqp,
sqp, mad, length)`` to send back (length None: the whole MAD) (a LID-routed request is answered to its SLID and
source QP; a directed-route one with the D bit set, which ibsim walks back
along the return path), events are what the SM loop must act on:
``("trap", number)``, ``("handover", None)``.
"""

from __future__ import annotations

from ..wire.mad import MgmtClass, Method
from ..wire.smp import SmpAttr, SmpStatus
from .sminfo import SmInfoState


def _answer(req, mad: bytearray, method: int):
    mad[3] = method
    if mad[1] == MgmtClass.SUBN_DIRECTED_ROUTE:
        mad[4] |= 0x80                          # D: going back
        return (0xFFFF, req.sqp, req.dqp, bytes(mad), None)
    return (req.slid, req.sqp, req.dqp, bytes(mad), None)


class Agent:
    def __init__(self, sminfo: SmInfoState, sa=None) -> None:
        self.sminfo = sminfo
        self.sa = sa                        # sm.sa.SubnetAdmin, or None (no SA)
        self.counts = {"sminfo": 0, "trap": 0, "sa": 0, "unsupported": 0}

    def handle(self, req, now: float = 0.0):
        mad = bytearray(req.mad)
        if len(mad) < 64:
            return [], []
        cls, method = mad[1], mad[3]
        attr = int.from_bytes(mad[16:18], "big")
        mod = int.from_bytes(mad[20:24], "big")
        if cls in (MgmtClass.SUBN_LID_ROUTED, MgmtClass.SUBN_DIRECTED_ROUTE):
            if attr == SmpAttr.SM_INFO and method in (Method.GET, Method.SET):
                if not self.sminfo.guid:
                    # our port GUID is not known yet (the first SMP is out): an SMInfo with
                    # GUID 0 makes opensm give up on us (ERR 2F19); unanswered, it asks again
                    return [], []
                self.counts["sminfo"] += 1
                events = []
                if method == Method.SET and self.sminfo.on_set(mod) == "takeover":
                    events.append(("handover", None))
                mad[64:128] = self.sminfo.attr()
                return [_answer(req, mad, Method.GET_RESP)], events
            if method == Method.TRAP and attr == SmpAttr.NOTICE:
                self.counts["trap"] += 1
                trap = int.from_bytes(mad[68:70], "big")
                return [_answer(req, mad, Method.TRAP_REPRESS)], [("trap", trap)]
        elif cls == MgmtClass.SUBN_ADM and self.sa is not None:
            self.counts["sa"] += 1
            return [(req.slid, req.sqp, req.dqp, m, length)
                    for m, length in self.sa.handle(mad, req.slid, req.sqp, now)], []
        if method in (Method.GET, Method.SET):
            self.counts["unsupported"] += 1
            mad[4:6] = SmpStatus.ATTR_UNSUPPORTED.to_bytes(2, "big") if cls != MgmtClass.SUBN_DIRECTED_ROUTE \
                else (0x8000 | SmpStatus.ATTR_UNSUPPORTED).to_bytes(2, "big")
            return [_answer(req, mad, Method.GET_RESP)], []
        return [], []
