"""Congestion control for RoCEv2: ECN marking, the notification point and
DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale
RDMA Deployments", SIGCOMM 2015), with the knobs mlx5 exposes.

Sans-IO: every input carries ``now`` (seconds); nothing here reads a clock.

``CongestionControl``: one device's settings -- the knobs of mlx5's
``/sys/class/net/<netdev>/ecn/roce_np`` and ``roce_rp`` directories, by
their names, units (µs, Mb/s, bytes, 1/1024 fixed point) and firmware
defaults, with per-priority enables (all on: DCQCN is on by default as on
mlx5), and the IP TOS a QP's packets leave with (``tos``: DSCP from the
address vector's traffic class, ECT(0) where the reaction point is on for
its priority; CNPs leave with ``cnp_dscp`` and no ECT).

Notification point (``ce_marked``): CE-marked packets of an RC/UC QP are
counted (``np_ecn_marked_roce_packets``) and answered with a CNP to the
peer QP (opcode 0x81, BECN, 16 reserved bytes: ``wire.packet.build_cnp``)
at most once per ``min_time_between_cnps`` per QP (``np_cnp_sent``).

Reaction point (``receive_cnp``, ``ReactionPoint``): the first CNP of a QP
whose priority has the RP enabled gives it a rate limiter; every CNP then
(at most once per ``rate_reduce_monitor_period``) does, as the paper's
equations say::

    Rt = Rc;  Rc = Rc * (1 - alpha / 2);  alpha = (1 - g) * alpha + g

with alpha / 2 = alpha * 1024 / 2**rpg_gd (rpg_gd 11), g = (1024 -
dce_tcp_g) / 1024, the cut bounded by ``rpg_min_dec_fac`` % and
``rpg_min_rate``, and Rt clamped as ``clamp_tgt_rate`` /
``clamp_tgt_rate_after_time_inc`` say.  Without CNPs alpha decays by (1 -
g) every ``dce_tcp_rtt``; the rate rises on increase events -- one per
``rpg_time_reset`` (timer, T) and one per ``rpg_byte_reset`` bytes sent
(byte counter, BC): fast recovery (max(T, BC) < F, F = ``rpg_threshold``):
Rc = (Rt + Rc) / 2; additive increase: Rt += ``rpg_ai_rate`` first;
hyper increase (min(T, BC) > F): Rt += (min(T, BC) - F) * ``rpg_hai_rate``
first.  A CNP resets T and BC.  Once Rc is back at line rate the limiter
goes (``qp.rp = None``).  The limiter is a token bucket at Rc, refilled
lazily: the requester emits while ``tokens`` is positive, reports what it
sent with ``consume``, and sleeps until ``ready_at`` (the QP's ``rl_at``).

Timers are evaluated lazily at each input (``advance``): what happened in
the interval is replayed in closed form, timer events one by one (a daemon
that sleeps 1 ms replays three 300 µs timer events at the next packet).

The line rate (``rpg_max_rate`` 0) is the port's, 2.5 Gb/s (what
ibv_query_port reports: 1X SDR).  A software sender may send slower than
that; ``rate_to_set_on_first_cnp`` 0 means "the current rate", which
here is what the QP was measured sending (``sent_bytes``) between its first
CNP and a later one at least ``MEASURE_S`` after it: that CNP's cut
starts from the measured rate, so the cuts bite.
"""

from __future__ import annotations

import copy

from ..enums import ibv_qp_state, ibv_qp_type, ints
from ..errors import einval
from ..wire.opcodes import Opcode
from ..wire.packet import build_cnp
from .counters import Counter

C_ECN_MARKED = int(Counter.np_ecn_marked_roce_packets)
C_CNP_SENT = int(Counter.np_cnp_sent)
C_CNP_HANDLED = int(Counter.rp_cnp_handled)
C_CNP_IGNORED = int(Counter.rp_cnp_ignored)
C_SENT_BYTES = int(Counter.sent_bytes)
CNP_OPCODE = int(Opcode.CNP)

_S, _T = ints(ibv_qp_state), ints(ibv_qp_type)
_NP_TYPES = (_T.IBV_QPT_RC, _T.IBV_QPT_UC)                 # one peer QP to send the CNP to
_NP_STATES = (_S.IBV_QPS_RTR, _S.IBV_QPS_RTS, _S.IBV_QPS_SQD, _S.IBV_QPS_SQE)
_RP_TYPES = (_T.IBV_QPT_RC, _T.IBV_QPT_UC, _T.IBV_QPT_XRC_SEND)

ECT0 = 0b10                       # the IP ECN field: ECN-capable transport (0)
CE = 0b11                         # congestion experienced
ECN_MASK = 0b11
PRIORITIES = 8
LINE_RATE_MBPS = 100_000          # the largest rate a knob takes (a 100 Gb/s port)
PORT_RATE_MBPS = 2_500            # rpg_max_rate 0: the port's rate, as ibv_query_port says (1X SDR)
BURST_S = 0.0005                  # the token bucket holds 500 µs of the current rate ...
MAX_REPLAY = 10_000                # timer events one input replays at most (an idle QP's long gap)
MEASURE_S = 0.0002                # the first-CNP rate measurement's shortest span
MIN_BURST = 16384                 # ... and at least this many bytes (a 4 KiB-MTU packet and more)

#: roce_np's knobs: name -> (default, minimum, maximum)
NP_PARAMS = {
    "min_time_between_cnps": (4, 0, 4095),          # µs
    "cnp_dscp": (48, 0, 63),
    "cnp_802p_prio": (6, 0, 7),
}
#: roce_rp's knobs: name -> (default, minimum, maximum)
RP_PARAMS = {
    "clamp_tgt_rate": (0, 0, 1),
    "clamp_tgt_rate_after_time_inc": (1, 0, 1),
    "dce_tcp_g": (1019, 0, 1023),                   # alpha's weight, 1/1024
    # µs between alpha updates: mlx5's default is 1, for CNPs that come every
    # few µs; a software device's come once per receive pass (~1 ms apart) and
    # the paper wants this period longer than the CNP interval, or alpha decays
    # to nothing between two CNPs and the cuts do not bite
    "dce_tcp_rtt": (1000, 1, 131071),
    "initial_alpha_value": (1023, 0, 1023),         # 1/1024
    "rate_reduce_monitor_period": (4, 1, 0xFFFFFFFF),   # µs between two cuts
    "rate_to_set_on_first_cnp": (0, 0, LINE_RATE_MBPS),  # Mb/s, 0: the current rate
    "rpg_ai_rate": (5, 1, LINE_RATE_MBPS),          # Mb/s
    "rpg_byte_reset": (32767, 0, 32767),            # bytes per byte-counter event, 0: off
    "rpg_gd": (11, 1, 15),                          # log2 of the alpha -> cut divisor (x1024)
    "rpg_hai_rate": (50, 1, LINE_RATE_MBPS),        # Mb/s
    "rpg_max_rate": (0, 0, LINE_RATE_MBPS),         # Mb/s, 0: line rate
    "rpg_min_dec_fac": (50, 1, 100),                # %: a cut keeps at least this share
    "rpg_min_rate": (1, 1, LINE_RATE_MBPS),         # Mb/s
    "rpg_threshold": (1, 1, 31),                    # F: events before the next stage
    "rpg_time_reset": (300, 1, 131071),             # µs per timer event
}


class CongestionControl:
    """One device's ECN/DCQCN settings (see the module docstring).
    ``np`` and ``rp``: {knob: value}; ``np_enable``/``rp_enable``: one flag
    per priority; ``default_tclass``: the traffic class of an address
    vector that names none (mlx5's ``tc/1/traffic_class``).  A change
    reaches the routes' cached TOS through the device (``cc_changed``)."""

    def __init__(self):
        self.np = {k: v[0] for k, v in NP_PARAMS.items()}
        self.rp = {k: v[0] for k, v in RP_PARAMS.items()}
        self.np_enable = [1] * PRIORITIES
        self.rp_enable = [1] * PRIORITIES
        self.default_tclass = 0

    # -- the knobs
    def set(self, point: str, name: str, value: int, prio: int | None = None) -> None:
        """Set knob ``name`` of ``point`` ("np"/"rp"), or its ``enable`` for
        priority ``prio``; EINVAL for an unknown knob or a value out of range."""
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise einval(f"{point} {name}: not a number: {value!r}") from None
        if point not in ("np", "rp"):
            raise einval(f"no congestion point {point!r} (np or rp)")
        if name == "enable":
            if prio is None or not 0 <= int(prio) < PRIORITIES:
                raise einval(f"{point} enable: priority {prio} is not 0-{PRIORITIES - 1}")
            if value not in (0, 1):
                raise einval(f"{point} enable: {value} is not 0 or 1")
            (self.np_enable if point == "np" else self.rp_enable)[int(prio)] = value
        else:
            table = NP_PARAMS if point == "np" else RP_PARAMS
            if name not in table:
                raise einval(f"roce_{point} has no parameter {name!r}")
            lo, hi = table[name][1:]
            if not lo <= value <= hi:
                raise einval(f"roce_{point} {name}: {value} is not in {lo}-{hi}")
            (self.np if point == "np" else self.rp)[name] = value

    def set_tclass(self, value: int) -> None:
        if not 0 <= int(value) <= 255:
            raise einval(f"traffic_class {value} is not 0-255")
        self.default_tclass = int(value)

    def as_dict(self) -> dict:
        return {"roce_np": dict(self.np, enable=list(self.np_enable)),
                "roce_rp": dict(self.rp, enable=list(self.rp_enable)),
                "traffic_class": self.default_tclass}

    # -- what the wire carries
    def tclass(self, av_tclass: int) -> int:
        return av_tclass or self.default_tclass

    def priority(self, av_tclass: int) -> int:
        """The priority of a traffic class (DSCP >> 3: trust DSCP, as RoCE
        deployments configure mlx5)."""
        return (self.tclass(av_tclass) >> 5) & 7

    def tos(self, av_tclass: int) -> int:
        """The IP TOS byte of a QP's packets: the DSCP of the traffic class,
        ECT(0) where the reaction point is on for its priority."""
        tc = self.tclass(av_tclass)
        return (tc & ~ECN_MASK) | (ECT0 if self.rp_enable[(tc >> 5) & 7] else 0)

    def cnp_tos(self) -> int:
        return self.np["cnp_dscp"] << 2

    def line_rate(self) -> float:
        return float(self.rp["rpg_max_rate"] or PORT_RATE_MBPS)


#: the settings of a QP created without a device (tests, the simulator)
DEFAULT = CongestionControl()

#: the traffic-class value a CNP's address vector carries: a flag the
#: routes see (``cnp_av``), outside the 8 bits a GRH's traffic class has
CNP_TCLASS = 0x100


class ReactionPoint:
    """One QP's DCQCN rate limiter (see the module docstring).  Rates in
    Mb/s; ``tokens`` in bytes."""

    __slots__ = ("cc", "rc", "rt", "alpha", "t", "alpha_t", "timer_t", "reduced_t", "T", "BC", "bytes",
                 "time_inc", "tokens", "bps", "burst", "sent_mark", "mark_t", "measured")

    def __init__(self, cc: CongestionControl, now: float, sent_bytes: int = 0):
        self.cc = cc
        self.rc = self.rt = cc.line_rate()
        self.alpha = cc.rp["initial_alpha_value"] / 1024
        self.t = self.alpha_t = self.timer_t = now
        self.reduced_t = None
        self.T = self.BC = 0
        self.bytes = 0
        self.time_inc = False
        self.tokens = float(MIN_BURST)
        self.sent_mark, self.mark_t = sent_bytes, now      # the rate measurement's start
        self.measured = bool(cc.rp["rate_to_set_on_first_cnp"])
        self._rate_changed()

    def _rate_changed(self) -> None:
        self.bps = self.rc * 125_000.0                       # Mb/s -> bytes/s
        self.burst = max(MIN_BURST, self.bps * BURST_S)
        if self.tokens > self.burst:
            self.tokens = self.burst

    # -- events
    def cnp(self, now: float, sent_bytes: int, first: bool) -> None:
        """A CNP for this QP: cut the rate (at most once per monitor period)."""
        p = self.cc.rp
        self.advance(now)
        if first and p["rate_to_set_on_first_cnp"]:
            self.rc = self.rt = min(float(p["rate_to_set_on_first_cnp"]), self.cc.line_rate())
        elif not self.measured and now - self.mark_t >= MEASURE_S:
            # "the current rate": what the QP sent since the first CNP
            self.measured = True
            if sent_bytes > self.sent_mark:
                self.rc = self.rt = min(self.rc, (sent_bytes - self.sent_mark) / (now - self.mark_t) / 125_000.0)
        if self.reduced_t is not None and now - self.reduced_t < p["rate_reduce_monitor_period"] * 1e-6:
            self.alpha = (1 - _g(p)) * self.alpha + _g(p)
            self.alpha_t = now
            return
        if first or p["clamp_tgt_rate"] or (p["clamp_tgt_rate_after_time_inc"] and self.time_inc):
            self.rt = self.rc
        cut = self.rc * (1 - self.alpha * 1024 / (1 << p["rpg_gd"]))
        floor = max(self.rc * p["rpg_min_dec_fac"] / 100, float(p["rpg_min_rate"]))
        self.rc = max(cut, floor) if p["rpg_min_dec_fac"] < 100 else self.rc
        self.alpha = (1 - _g(p)) * self.alpha + _g(p)
        self.alpha_t = self.timer_t = self.reduced_t = now
        self.T = self.BC = 0
        self.bytes = 0
        self.time_inc = False
        self._rate_changed()

    def advance(self, now: float) -> None:
        """Replay the interval since the last input: tokens at the current
        rate, alpha's decay periods, the rate-increase timer's events."""
        dt = now - self.t
        if dt <= 0:
            return
        self.t = now
        tokens = self.tokens + dt * self.bps
        self.tokens = tokens if tokens < self.burst else self.burst
        p = self.cc.rp
        k = p["dce_tcp_rtt"] * 1e-6
        n = int((now - self.alpha_t) / k)
        if n > 0:
            self.alpha *= (1 - _g(p)) ** n
            self.alpha_t += n * k
        period = p["rpg_time_reset"] * 1e-6
        n = int((now - self.timer_t) / period)
        if n > 0:
            self.timer_t += n * period
            changed = False
            for _ in range(min(n, MAX_REPLAY)):
                if self.rc >= self.cc.line_rate():
                    break
                self.T += 1
                self._increase()
                self.time_inc = changed = True
            if changed:
                self._rate_changed()

    def _increase(self) -> None:
        p = self.cc.rp
        f = p["rpg_threshold"]
        T, BC = self.T, self.BC
        if max(T, BC) < f:                                # fast recovery
            pass
        elif min(T, BC) > f:                              # hyper increase
            self.rt += (min(T, BC) - f) * p["rpg_hai_rate"]
        else:                                             # additive increase
            self.rt += p["rpg_ai_rate"]
        line = self.cc.line_rate()
        if self.rt > line:
            self.rt = line
        self.rc = (self.rt + self.rc) / 2

    # -- the requester's side
    def consume(self, nbytes: int) -> None:
        """``nbytes`` went out: tokens spent, the byte counter moved."""
        self.tokens -= nbytes
        reset = self.cc.rp["rpg_byte_reset"]
        if reset:
            self.bytes += nbytes
            if self.bytes >= reset:
                n, self.bytes = divmod(self.bytes, reset)
                for _ in range(n):
                    if self.rc >= self.cc.line_rate():
                        break
                    self.BC += 1
                    self._increase()
                self._rate_changed()

    def ready_at(self) -> float:
        """When the bucket has a token again (after ``advance``)."""
        return self.t + (-self.tokens) / self.bps + 1e-6 if self.tokens <= 0 else self.t

    def as_driver(self) -> dict:
        """What ``rdma -dd resource show qp`` prints of it (Mb/s; alpha in 1/1024)."""
        return {"rp_current_rate": int(self.rc), "rp_target_rate": int(self.rt), "rp_alpha": int(self.alpha * 1024)}

    @property
    def recovered(self) -> bool:
        return self.rc >= self.cc.line_rate()


def _g(p: dict) -> float:
    return (1024 - p["dce_tcp_g"]) / 1024


# -- the QP's side (called by transport.qp and the port)
def ce_marked(qp, count: int, now: float) -> None:
    """``count`` packets for ``qp`` arrived with CE: count them, and answer
    with a CNP to the peer QP unless one went less than
    ``min_time_between_cnps`` ago (RC and UC: the QPs with one peer)."""
    qp.cnt[C_ECN_MARKED] += count
    cc = qp.cc
    av = qp.av
    if av is None or qp.qp_type not in _NP_TYPES or qp.state not in _NP_STATES:
        return
    if not cc.np_enable[cc.priority(av.traffic_class)]:
        return
    last = qp.np_cnp_at
    if last is not None and now - last < cc.np["min_time_between_cnps"] * 1e-6:
        return
    qp.np_cnp_at = now
    qp.tx.append((qp, build_cnp(qp.dest_qpn, pkey=qp.pkey), cnp_av(qp)))
    qp.cnt[C_CNP_SENT] += 1


def cnp_av(qp):
    """The QP's address vector with the CNP flag as its traffic class (the
    route gives it ``cnp_tos``), kept on the QP while its AV stays."""
    av = qp.av
    c = qp.np_cnp_av
    if c is None or c[0] is not av:
        cav = copy.copy(av)
        cav.traffic_class = CNP_TCLASS
        c = qp.np_cnp_av = (av, cav)
    return c[1]


def receive_cnp(qp, pkt, info, now: float, grh=None) -> None:
    """A CNP for ``qp`` (the QP's receive table's entry for opcode 0x81)."""
    cc = qp.cc
    av = qp.av
    if av is None or not cc.rp_enable[cc.priority(av.traffic_class)] or qp.qp_type not in _RP_TYPES:
        qp.cnt[C_CNP_IGNORED] += 1
        return
    qp.cnt[C_CNP_HANDLED] += 1
    rp = qp.rp
    first = rp is None
    if first:
        rp = qp.rp = ReactionPoint(cc, now, qp.cnt[C_SENT_BYTES])
    rp.cnp(now, qp.cnt[C_SENT_BYTES], first)


__all__ = ["CongestionControl", "ReactionPoint", "DEFAULT", "NP_PARAMS", "RP_PARAMS", "ECT0", "CE", "ECN_MASK",
           "CNP_TCLASS", "ce_marked", "receive_cnp", "cnp_av"]
