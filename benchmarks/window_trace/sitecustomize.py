"""Loaded by every Python process started with this directory first on
PYTHONPATH (``benchmarks/window_trace.py`` does that for the two daemons):
in a softrdmad, with SOFTRDMA_WINDOW_TRACE=DIR set, it wraps the transport's
window and ACK paths and the RoCE socket's receive and send with timing
probes and writes DIR/trace-PID.json when the daemon exits.  Nothing of it
is in the package: it is a measurement, and it costs a few microseconds per
wrapped call.

Experiments, also by environment: SOFTRDMA_TRACE_WND=N sets the go-back
window's ceiling (``transport.limits.MAX_UNACKED_PSNS``, 128) and
SOFTRDMA_TRACE_RX_BUDGET=N the datagrams per socket read
(``device.net.RX_BUDGET``, 64: one ACK per read, coalesced), in any process;
SOFTRDMA_TRACE_BURST=N lets one requester run send at most N packets (the
window's ceiling lowered for the run: its last packet asks for an ACK) and
runs the requester once per received batch instead of after every ACK in it.
"""

import os
import sys

if os.environ.get("SOFTRDMA_TRACE_WND"):
    from softrdma.transport import limits as _limits
    _limits.MAX_UNACKED_PSNS = int(os.environ["SOFTRDMA_TRACE_WND"])   # before qp/completer import it
if os.environ.get("SOFTRDMA_TRACE_RX_BUDGET"):
    from softrdma.device import net as _net
    _net.RoceSocket.recv.__defaults__ = (int(os.environ["SOFTRDMA_TRACE_RX_BUDGET"]),)

if os.environ.get("SOFTRDMA_TRACE_BURST") and "daemon" in sys.argv:
    from softrdma.transport import qp as _qpmod
    from softrdma.transport import requester as _req
    _BURST = int(os.environ["SOFTRDMA_TRACE_BURST"])
    _req_run = _req.run

    def _capped_run(qp, now):
        if getattr(qp, "_in_batch", False):
            qp._run_wanted = True                 # once, after the batch
            return
        saved = qp.cwnd
        cap = ((qp.req_psn - qp.comp_psn) & 0xFFFFFF) + _BURST
        if qp.rc and cap < saved:
            qp.cwnd = float(cap)
        try:
            _req_run(qp, now)
        finally:
            qp.cwnd = saved
    _req.run = _capped_run
    _qp_rb = _qpmod.QP.receive_batch

    def _batch_then_run(self, pkts, now, grhs=None):
        self._in_batch, self._run_wanted = True, False
        try:
            _qp_rb(self, pkts, now, grhs)
        finally:
            self._in_batch = False
        if self._run_wanted:
            self._run_wanted = False
            _capped_run(self, now)
    _qpmod.QP.receive_batch = _batch_then_run

if os.environ.get("SOFTRDMA_WINDOW_TRACE") and "daemon" in sys.argv:
    import atexit
    import collections
    import json
    import time

    from softrdma.device import net as netmod
    from softrdma.transport import completer, requester
    from softrdma.transport import qp as qpmod
    from softrdma.transport.counters import Counter

    _OUT = os.environ["SOFTRDMA_WINDOW_TRACE"]
    _SENT = int(Counter.sent_pkts)
    _MAX_EVENTS = 200_000
    mono = time.monotonic
    stalled: dict = {}          # id(qp) -> monotonic time the window closed with work waiting
    stalls: list = []           # (start, seconds until the ACK that reopened it, PSNs that ACK acknowledged)
    acks: list = []             # (time, PSNs acknowledged)
    batches: collections.Counter = collections.Counter()   # (packets, of them AckReq, packets the QP sent)
    reads: collections.Counter = collections.Counter()     # packets per socket read
    bursts: collections.Counter = collections.Counter()    # packets per send burst
    events: list = []           # (end time, kind, packets, microseconds): recv, batch (received + sent), burst

    def _ev(t, kind, a, b):
        if len(events) < _MAX_EVENTS:
            events.append((t, kind, a, b))

    _run = requester.run

    def run(qp, now):
        _run(qp, now)
        if (qp.rc and qp.req_idx < len(qp.sq) and stalled.get(id(qp)) is None
                and (qp.req_psn - qp.comp_psn) & 0xFFFFFF >= qp.cwnd):
            stalled[id(qp)] = mono()
    requester.run = run

    _ack_upto = completer.ack_upto

    def ack_upto(qp, psn, now):
        c0 = qp.comp_psn
        r = _ack_upto(qp, psn, now)
        acked = (qp.comp_psn - c0) & 0xFFFFFF
        if acked:
            t = mono()
            acks.append((t, acked))
            s = stalled.pop(id(qp), None)
            if s is not None:
                stalls.append((s, t - s, acked))
        return r
    completer.ack_upto = ack_upto

    _receive_batch = qpmod.QP.receive_batch

    def receive_batch(self, pkts, now, grhs=None):
        sent0 = self.cnt[_SENT]
        nreq = sum(1 for p in pkts if p[8] & 0x80)       # BTH AckReq
        t = mono()
        _receive_batch(self, pkts, now, grhs)
        t1 = mono()
        sent = self.cnt[_SENT] - sent0
        batches[(len(pkts), nreq, sent)] += 1
        _ev(t1, "batch", len(pkts) + sent, (t1 - t) * 1e6)      # packets handled: received + sent
    qpmod.QP.receive_batch = receive_batch

    _recv = netmod.RoceSocket.recv

    def recv(self, budget=netmod.RX_BUDGET):
        t = mono()
        out = _recv(self, budget)
        t1 = mono()
        reads[len(out)] += 1
        _ev(t1, "recv", len(out), (t1 - t) * 1e6)
        return out
    recv.__defaults__ = _recv.__defaults__
    netmod.RoceSocket.recv = recv

    _send_burst = netmod.RoceSocket.send_burst

    def send_burst(self, pkts, dst_ip, dport=netmod.ROCEV2_UDP_PORT, tos=None):
        t = mono()
        r = _send_burst(self, pkts, dst_ip, dport, tos)
        t1 = mono()
        bursts[len(pkts)] += 1
        _ev(t1, "burst", len(pkts), (t1 - t) * 1e6)
        return r
    netmod.RoceSocket.send_burst = send_burst

    def _dump():
        with open(os.path.join(_OUT, f"trace-{os.getpid()}.json"), "w") as f:
            json.dump({"stalls": stalls, "acks": acks, "batches": [[list(k), v] for k, v in batches.items()],
                       "reads": sorted(reads.items()), "bursts": sorted(bursts.items()), "events": events}, f)
    atexit.register(_dump)
