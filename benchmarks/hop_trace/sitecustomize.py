"""Loaded by every Python process started with this directory first on
PYTHONPATH (``benchmarks/hop_trace.py`` does that for both daemons and both
perftest applications): with SOFTRDMA_HOP_TRACE=DIR set it stamps, with
CLOCK_MONOTONIC (one clock for every process and network namespace of the
machine), the moments one message passes through the process, and writes
DIR/<role>-PID.txt when the process exits.  A measurement only, not in the
package; each probe costs well under a microsecond.

In a softrdmad:
  ring    <t>          a pass over the rings that found posted work (its start)
  tx      <t> <op>     a RoCE packet handed to the kernel (after sendmsg), BTH opcode
  rx      <t> <op>     a socket read that returned packets (its start: the daemon noticed), per packet
  rxdone  <t>          the processing of a read is over (data placed, CQEs written)
In an application (perftest):
  post    <t>          ibv_post_send called (in ib_write_lat: right after the
                       poll of the buffer saw the peer's byte)
  cqe     <t>          ibv_poll_cq returned a completion
"""

import os
import sys

_DIR = os.environ.get("SOFTRDMA_HOP_TRACE")

if _DIR:
    import atexit
    from time import monotonic_ns as _now

    _ev: list = []
    _add = _ev.append

    def _dump():
        role = os.environ.get("SOFTRDMA_HOP_ROLE") or ("daemon" if "daemon" in sys.argv else "app")
        run = os.path.basename(os.environ.get("SOFTRDMA_RUN", "").rstrip("/"))
        if "--run-dir" in sys.argv:
            run = os.path.basename(sys.argv[sys.argv.index("--run-dir") + 1].rstrip("/"))
        with open(os.path.join(_DIR, f"{role}-{run}-{os.getpid()}.txt"), "w") as f:
            f.write("".join(f"{e[0]} {e[1]}{'' if len(e) < 3 else f' {e[2]}'}\n" for e in _ev))
    atexit.register(_dump)

    if "daemon" in sys.argv:
        from softrdma.device import core as _core, net as _net, roce as _roce

        _poll = _core.Device.poll_rings

        def poll_rings(self, now):
            t = _now()
            busy = _poll(self, now)
            if busy:
                _add(("ring", t))
                _add(("ringdone", _now()))
            return busy
        _core.Device.poll_rings = poll_rings

        if os.environ.get("SOFTRDMA_HOP_FINE"):         # entry and exit of the loop's other steps
            def _stamped(cls, name):
                f = getattr(cls, name)

                def w(self, *a, **kw):
                    _add((name + ">", _now()))
                    r = f(self, *a, **kw)
                    _add((name + "<", _now()))
                    return r
                setattr(cls, name, w)
            for _n in ("tick", "route"):
                _stamped(_core.Device, _n)
            from softrdma.device import daemon as _daemon
            _stamped(_daemon.Daemon, "step")

        def _op(p) -> int:
            """The BTH opcode of a packet (-1: a batch object, e.g. a run of
            segments, whose packets are not the latency path's)."""
            try:
                return p[0] if isinstance(p, (bytes, bytearray, memoryview)) else -1
            except IndexError:
                return -1

        _in_burst = [False]
        _send = _net.RoceSocket.send

        def send(self, pkt, *a, **kw):
            ok = _send(self, pkt, *a, **kw)
            if not _in_burst[0]:
                _add(("tx", _now(), _op(pkt)))
            return ok
        _net.RoceSocket.send = send

        _burst = _net.RoceSocket.send_burst

        def send_burst(self, pkts, *a, **kw):
            _in_burst[0] = True                 # (it may send through send: stamped once, here)
            try:
                n = _burst(self, pkts, *a, **kw)
            finally:
                _in_burst[0] = False
            t = _now()
            for p in pkts:
                _add(("tx", t, _op(p)))
            return n
        _net.RoceSocket.send_burst = send_burst

        _recv = _net.RoceSocket.recv

        def recv(self, *a, **kw):
            t = _now()
            out = _recv(self, *a, **kw)
            for p in out:
                _add(("rx", t, _op(p[0])))
            return out
        _net.RoceSocket.recv = recv

        _receive = _roce.RocePort.receive

        def receive(self, sock, now):
            r = _receive(self, sock, now)
            _add(("rxdone", _now()))
            return r
        _roce.RocePort.receive = receive
    else:
        from softrdma.verbs import cq as _cq, qp as _qp

        _post = _qp.QP.post_send

        def post_send(self, wr, bad_wr=None):
            _add(("post", _now()))
            return _post(self, wr, bad_wr)
        _qp.QP.post_send = post_send

        _cqpoll = _cq.CQ.poll

        def poll(self, num_entries=1):
            r = _cqpoll(self, num_entries)
            if r[0]:
                _add(("cqe", _now()))
            return r
        _cq.CQ.poll = poll
