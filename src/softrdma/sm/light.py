"""Small SMP rounds of the resident SM, sans-IO: a batch of queries, the light sweep.

``Queries`` sends SMPs ``FEED`` at a time (the next ones when the agent
runs idle) and keeps each answer (or None) by key, or hands it on as it
comes; it has the ``start``/``poll``/``done`` shape ``SmLoop`` drives.
``light_sweep`` builds opensm's light sweep on it: SwitchInfo of every
switch and PortInfo of every linked end port; ``changed`` says whether a
heavy sweep is due (a switch's PortStateChange bit, a port whose state or
IsSM capability moved, a node that stopped answering).
"""

from __future__ import annotations

from ..mgmt.agent import MadAgent
from ..wire.mad import Method
from ..wire.smp import CAP_IS_SM, PORT_INFO, SWITCH_INFO, SmpAttr, build_dr_smp, parse_dr, smp_data
from .subnet import Subnet


# SMPs queued at a time in a big round: at 10,000s of nodes a phase is 100,000s of
# SMPs, and all of them queued at once would be hundreds of MB of requests waiting
FEED = 8192


class Queries:
    def __init__(self, q: MadAgent, items, on_answer=None) -> None:
        self.q = q
        self._items = iter(items)           # (key, mad); may be a generator
        self.results: dict = {}             # key -> the answer's data or None (without on_answer)
        self.on_answer = on_answer          # or each (key, data or None) to it as it comes
        self.done = False

    def start(self) -> None:
        self._post()

    def _post(self) -> bool:
        """Queue up to FEED more; whether there were any."""
        n = 0
        for key, mad in self._items:
            self.q.post_send(bytearray(mad), lambda r, key=key: self._got(key, r))
            n += 1
            if n == FEED:
                break
        return n > 0

    def _got(self, key, r) -> None:
        if r is not None and r[1] == 0x81 and parse_dr(r).status:
            r = None
        data = None if r is None else bytes(smp_data(r))
        if self.on_answer is None:
            self.results[key] = data
        else:
            self.on_answer(key, data)

    def poll(self) -> None:
        if self.q.idle and not self._post():
            self.done = True


def light_sweep(q: MadAgent, subnet: Subnet) -> Queries:
    items = []
    for sw in subnet.switches():
        items.append((("si", sw.guid), build_dr_smp(Method.GET, SmpAttr.SWITCH_INFO, sw.dr_path)))
    for p in subnet.end_ports():
        if not p.node.is_switch and p.remote is not None:
            items.append((("pi", p.guid), build_dr_smp(Method.GET, SmpAttr.PORT_INFO, p.node.dr_path, p.num)))
    return Queries(q, items)


def changed(subnet: Subnet, light: Queries) -> str | None:
    """Why a heavy sweep is due after this light sweep, or None."""
    for (kind, guid), data in light.results.items():
        if data is None:
            return f"no answer from 0x{guid:016x}"
        if kind == "si":
            if SWITCH_INFO.get(data, "StateChange"):
                return f"port state change on switch 0x{guid:016x}"
        else:
            p = subnet.ports[guid]
            new = PORT_INFO.decode(data)
            old = PORT_INFO.decode(p.port_info)
            if new["LinkState"] != p.state or new["Lid"] != p.lid or new["LMC"] != p.lmc or \
                    (new["CapMask"] ^ old["CapMask"]) & CAP_IS_SM:
                return f"port 0x{guid:016x} changed"
    return None
