"""ibv_rc_pingpong and ibv_ud_pingpong, as rdma-core 44 has them.

One module, two tools: ``main(argv, prog)`` runs the UD tool when ``prog``
names ``ibv_ud_pingpong`` and the RC tool otherwise.  Everything a user or a
peer can see is the real tool's (docs/formats/pingpong.md, from
libibverbs/examples/rc_pingpong.c, ud_pingpong.c and pingpong.c):

* the options (GNU ``getopt_long`` with the same short and long names, the
  same argument parsing -- ``strtoul``/``strtol`` with base 0 and C's
  truncation -- and the same checks), the usage text and exit codes;
* every printed line, including the numbers: the elapsed time is a C
  ``float`` of whole microseconds, ``usec / iters`` a float division;
* the out-of-band TCP exchange: the client sends
  ``"%04x:%06x:%06x:%s\\0"`` (LID, QPN, PSN, the 16 GID bytes as 32 hex
  digits; 52 bytes, one write), the server moves its QP to RTR/RTS, answers
  the same way, and reads the client's ``"done\\0"`` (exactly 5 bytes);
  then the client connects its QP and sends first;
* the QP attributes (RC: path MTU -m, max_dest_rd_atomic 1, min_rnr_timer
  12, timeout 14, retry_cnt 7, rnr_retry 7, max_rd_atomic 1; UD: Q_Key
  0x11111111, an AH per peer, 40 bytes for the GRH before every receive),
  the wr_ids (receive 1, send 2), the ``rx_depth`` receives re-posted when
  one or none is left, and the ping-pong rule: the next send is posted once
  both the previous send and a receive have completed;
* the PSN: ``srand48(getpid() * time(NULL))`` then ``lrand48() & 0xffffff``,
  computed with glibc's drand48 arithmetic.

Without ``-g`` the local GID is all zero, and so is the GID on the wire; a
peer that receives it sets no GRH (``is_global 0``).  On RoCE every packet
carries an IP header, which is built from the GRH, so a RoCE address vector
without one cannot work: softrdma refuses it the way the kernel does for
rxe -- ``modify_qp`` to RTR fails with EINVAL (RC: "Failed to modify QP to
RTR", and on the server "Couldn't connect to remote QP"), ``create_ah``
fails (UD: "Failed to create AH").  On RoCE always pass ``-g <index of the
IPv4 GID>``, with either tool.

The RC tool's device features work as on a device that has them: ``-o``/
``-O``/``-P`` (an ODP MR, implicit, prefetched), ``-t`` (an extended CQ
whose completions carry the device clock; the receive-completion clock
statistics follow the summary) and ``-j`` (device memory).  Where the
device lacks one (ODP for a process the daemon may not reach) the tool
fails where the real one checks, with its message, then a line saying why.
``-N`` (the ``ibv_wr_*`` send API)
is accepted: it only changes how the same SEND work request is posted, and
softrdma's verbs library has one posting path (``QP.post_send``), which is
what the tool uses either way.

Polling (no ``-e``) reads the CQ ring as the real tool spins on
``ibv_poll_cq``, except that after POLL_SPINS empty polls it naps 50 us
between polls: the "hardware" here is softrdmad, a process that needs the
CPU a pure spin takes from it (two spinning tools and the daemon on two
loaded cores: ~9 ms/iter spinning, ~0.5 ms/iter with the nap).  ``-e``
sleeps on the completion channel exactly as the real tool does.

Where the real tool reads a message with one ``read()``, this one asks for
the whole message (``MSG_WAITALL``): a peer's single 52-byte write arrives
whole either way; a short message or a closed connection fails the same.

The package: this module is main() and the ping-pong loop; :mod:`.options`
the command line, :mod:`.exchange` the address messages and their
exchange (over :mod:`softrdma.tools.oob`), :mod:`.context` struct
pingpong_context (its verbs steps shared with perftest through
:mod:`softrdma.tools.verbs_setup`).
"""

from __future__ import annotations

import errno
import math
import os
import socket
import struct
import sys
import time

from ...enums import IBV_WC_SUCCESS, WC_STATUS_STR
from ...verbs.errors import PyverbsError, PyverbsRDMAError
from .. import verbs_setup as vs
from ..libc import Drand48, c_int
from ..oob import err as _err
from .context import GRH_BYTES, IBV_LINK_LAYER_ETHERNET, RECV_WRID, SEND_WRID, PingPong
from .exchange import Dest, client_exch_dest, server_exch_dest
from .options import Options, parse_args


# Busy polling (no -e): the device is a process here, and it needs the CPU a
# pure spin would take from it; after POLL_SPINS empty polls the loop naps.
POLL_SPINS = 16
POLL_NAP_S = 50e-6


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _div(a: float, b: float) -> float:
    """IEEE division as C does it (x86: 0/0 is the negative default NaN)."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return -math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _fmt2(x: float) -> str:
    """printf("%.2f") as glibc prints it, NaN sign included."""
    if math.isnan(x):
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    return "%.2f" % x


class _TsWC:
    """What rc_pingpong reads of an extended CQ's completion with -t."""

    __slots__ = ("wr_id", "status", "ts")

    def __init__(self, wr_id: int, status: int, ts: int):
        self.wr_id, self.status, self.ts = wr_id, status, ts


def _ts_poll(cq):
    """-t's poll: ibv_start_poll, then one ibv_next_poll (at most two
    completions a pass, as rc_pingpong), each with its completion
    timestamp; (0, []) when the CQ is empty (ENOENT)."""
    def poll(_n: int):
        ret = cq.start_poll()
        if ret == errno.ENOENT:
            return 0, []
        if ret:
            raise PyverbsRDMAError("poll CQ failed", ret)
        wcs = [_TsWC(cq.wr_id, cq.status, cq.read_timestamp())]
        if cq.poll_next() == 0:
            wcs.append(_TsWC(cq.wr_id, cq.status, cq.read_timestamp()))
        cq.end_poll()
        return len(wcs), wcs
    return poll


class _TsParams:
    """rc_pingpong's ts_params: the device clock between receive completions
    (a wrap of the clock counted through completion_timestamp_mask)."""

    def __init__(self, mask: int):
        self.mask = mask
        self.max_delta, self.min_delta, self.total, self.iters = 0, 0xFFFFFFFF, 0, 0
        self.prev = None

    def add(self, stamp: int) -> None:
        if self.prev is not None:
            delta = stamp - self.prev if stamp >= self.prev else self.mask - self.prev + stamp + 1
            self.max_delta = max(self.max_delta, delta)
            self.min_delta = min(self.min_delta, delta)
            self.total += delta
            self.iters += 1
        self.prev = stamp


def result_lines(size: int, iters: int, elapsed_us: int) -> tuple[str, str]:
    """The two summary lines, computed as the C code does: ``float usec``
    (whole microseconds), seconds and Mbit/s in double, usec/iter as a float
    division."""
    usec = _f32(float(elapsed_us))
    nbytes = size * iters * 2
    secs = _fmt2(usec / 1000000.0)
    line1 = f"{nbytes} bytes in {secs} seconds = {_fmt2(_div(nbytes * 8.0, usec))} Mbit/sec"
    per_iter = _div(usec, _f32(float(iters)))
    if not math.isnan(per_iter) and not math.isinf(per_iter):
        per_iter = _f32(per_iter)
    line2 = f"{c_int(iters)} iters in {secs} seconds = {_fmt2(per_iter)} usec/iter"
    return line1, line2


def _now_us() -> int:
    """gettimeofday() in whole microseconds."""
    return time.time_ns() // 1000


def _ntop(gid: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6, gid)


def _out(msg: str) -> None:
    print(msg, flush=True)


def main(argv: list[str] | None = None, prog: str = "ibv_rc_pingpong") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ud = "ud_pingpong" in os.path.basename(prog)
    o = parse_args(argv, prog, ud)
    if isinstance(o, int):
        return o
    if not ud:
        if o.use_odp and o.use_dm:
            _err("DM memory region can't be on demand")
            return 1
        if not o.use_odp and o.prefetch_mr:
            _err("prefetch is valid only with on-demand memory region")
            return 1
    rng = Drand48(os.getpid() * int(time.time()))
    try:
        names = vs.device_names()
    except Exception as e:                              # the daemon answered badly
        _err(f"Failed to get IB devices list: {e}")
        return 1
    if o.ib_devname is None:
        if not names:
            _err("No IB devices found")
            return 1
        dev_name = names[0]
    elif o.ib_devname in names:
        dev_name = o.ib_devname
    else:
        _err(f"IB device {o.ib_devname} not found")
        return 1
    pp = PingPong(o)
    try:
        rc = _run(pp, o, dev_name, rng)
    except BaseException:
        pp.abandon()
        raise
    if rc:
        pp.abandon()
    return rc


def _run(pp: PingPong, o: Options, dev_name: str, rng: Drand48) -> int:
    if not pp.init(dev_name):
        return 1
    routs = pp.post_recv(pp.rx_depth)
    if routs < pp.rx_depth:
        _err(f"Couldn't post receive ({routs})")
        return 1
    cq, channel = pp.cq, pp.channel
    if o.use_event:
        try:
            cq.req_notify(False)
        except PyverbsError:
            _err("Couldn't request CQ notification")
            return 1
    try:
        pp.portinfo = pp.ctx.query_port(pp.port)
    except PyverbsError:
        _err("Couldn't get port info")
        return 1
    my = Dest(pp.portinfo.lid, 0, 0)
    if not o.ud and pp.portinfo.link_layer != IBV_LINK_LAYER_ETHERNET and not my.lid:
        _err("Couldn't get local LID")
        return 1
    if o.gidx >= 0:
        try:
            my.gid = pp.ctx.query_gid(pp.port, o.gidx).raw
        except PyverbsError:
            _err(f"Could not get local gid for gid index {o.gidx}" if o.ud else f"can't read sgid of index {o.gidx}")
            return 1
    my.qpn = pp.qp.qp_num
    my.psn = rng.lrand48() & 0xFFFFFF
    colon = ":" if o.ud else ","
    _out(f"  local address:  LID 0x{my.lid:04x}, QPN 0x{my.qpn:06x}, PSN 0x{my.psn:06x}{colon} GID {_ntop(my.gid)}")

    if o.servername is not None:
        rem = client_exch_dest(o.servername, o.port, my)
    else:
        rem = server_exch_dest(o.port, my, lambda r: pp.connect(my.psn, r))
    if rem is None:
        return 1
    _out(f"  remote address: LID 0x{rem.lid & 0xFFFFFFFF:04x}, QPN 0x{rem.qpn & 0xFFFFFFFF:06x}, "
         f"PSN 0x{rem.psn & 0xFFFFFFFF:06x}, GID {_ntop(rem.gid)}")
    if o.servername is not None and not pp.connect(my.psn, rem):
        return 1

    size, iters, page = o.size, o.iters, pp.page_size
    mr = pp.mr
    data_off = GRH_BYTES if o.ud else 0
    pp.pending = RECV_WRID
    if o.servername is not None:
        if o.validate_buf:
            for i in range(0, size, page):
                if pp.host_buf is not None:
                    pp.host_buf[i] = 0
                else:
                    mr.write(b"\0", 1, data_off + i)   # buf[i] = i / page_size % sizeof(char), always 0
        if pp.dm is not None:
            try:
                pp.dm.copy_to_dm(0, pp.host_buf, size)
            except PyverbsError:
                _err("Copy to dm buffer failed")
                return 1
        if not pp.post_send():
            _err("Couldn't post send")
            return 1
        pp.pending |= SEND_WRID

    start = _now_us()
    rcnt = scnt = 0
    num_cq_events = 0
    rx_depth = pp.rx_depth
    use_event = o.use_event
    use_ts = o.use_ts and not o.ud
    poll = _ts_poll(cq) if use_ts else cq.poll
    ts = _TsParams(pp.completion_timestamp_mask)
    sleep = time.sleep
    while rcnt < iters or scnt < iters:
        if use_event:
            try:
                ev_cq = channel.get_cq_event()
            except Exception:                            # PyverbsError, or the channel closing under us
                _err("Failed to get cq_event")
                return 1
            num_cq_events += 1
            if ev_cq is not cq:
                _err("CQ event for unknown CQ " + ("(nil)" if ev_cq is None else hex(id(ev_cq))))
                return 1
            try:
                cq.req_notify(False)
            except PyverbsError:
                _err("Couldn't request CQ notification")
                return 1
        empty = 0
        while True:
            try:
                ne, wcs = poll(2)
            except PyverbsError as e:
                _err(f"poll CQ failed {e.error_code}")
                return 1
            if use_event or ne >= 1:
                break
            empty += 1
            if empty > POLL_SPINS:
                sleep(POLL_NAP_S)
        for wc in wcs:
            err = None
            wr_id = c_int(wc.wr_id)
            if wc.status != IBV_WC_SUCCESS:
                _err(f"Failed status {WC_STATUS_STR.get(int(wc.status), 'unknown')} ({int(wc.status)}) "
                     f"for wr_id {wr_id}")
                err = "status"
            elif wr_id == SEND_WRID:
                scnt += 1
            elif wr_id == RECV_WRID:
                routs -= 1
                if routs <= 1:
                    routs += pp.post_recv(rx_depth - routs)
                    if routs < rx_depth:
                        _err(f"Couldn't post receive ({routs})")
                        err = "recv"
                if err is None:
                    rcnt += 1
                    if use_ts:
                        ts.add(wc.ts)
            else:
                _err(f"Completion for unknown wr_id {wr_id}")
                err = "wrid"
            if err is None:
                pp.pending &= ~wr_id
                if scnt < iters and not pp.pending:
                    if not pp.post_send():
                        _err("Couldn't post send")
                        err = "send"
                    else:
                        pp.pending = RECV_WRID | SEND_WRID
            if err is not None:
                if not o.ud:
                    _err(f"parse WC failed {ne}")     # RC's parse_single_wc() failed
                return 1
    end = _now_us()

    line1, line2 = result_lines(size, iters, end - start)
    _out(line1)
    _out(line2)
    if use_ts and ts.iters:
        _out(f"Max receive completion clock cycles = {ts.max_delta}")
        _out(f"Min receive completion clock cycles = {ts.min_delta}")
        _out(f"Average receive completion clock cycles = {ts.total / ts.iters:f}")
    if o.servername is None and o.validate_buf:
        for i in range(0, size, page):
            # the C tool checks ctx->buf, which with -j stays host memory
            got = bytes(pp.host_buf[i:i + 1]) if pp.host_buf is not None else mr.read(1, data_off + i)
            if got != b"\0":
                _out(f"invalid data in page {i // page}")

    if num_cq_events:
        cq.ack_events(num_cq_events)
    if not pp.close():
        return 1
    return 0
