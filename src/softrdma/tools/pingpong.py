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

Options of the RC tool that have no meaning on softrdma fail, at the point
where the real tool checks the device for them and with the real tool's
message (the one rxe gets), followed by a line saying why:
``-o``/``-O`` (on-demand paging; ``-P`` needs ``-o``), ``-t`` (completion
timestamps) and ``-j`` (device memory).  ``-N`` (the ``ibv_wr_*`` send API)
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
"""

from __future__ import annotations

import math
import mmap
import os
import socket
import struct
import sys
import time
from dataclasses import dataclass

from ..enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096, IBV_ODP_SUPPORT,
    IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_SEND, IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN,
    IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER,
    IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY,
    IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE, IBV_QP_TIMEOUT, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC,
    IBV_QPT_UD, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_WC_SUCCESS, IBV_WR_SEND, WC_STATUS_STR,
)
from .libc import GetoptLong, c_int, strtol, strtoul

RECV_WRID = 1
SEND_WRID = 2
UD_QKEY = 0x11111111
GRH_BYTES = 40
IBV_LINK_LAYER_ETHERNET = 2

# Busy polling (no -e): the device is a process here, and it needs the CPU a
# pure spin would take from it; after POLL_SPINS empty polls the loop naps.
POLL_SPINS = 16
POLL_NAP_S = 50e-6

MSG_SIZE = len("0000:000000:000000:00000000000000000000000000000000") + 1     # 52: sizeof msg
DONE = b"done\0"                                                                # sizeof "done" == 5

RC_OPTSTRING = "p:d:i:s:m:r:n:l:eg:oOPtcjN"
RC_LONGOPTS = (("port", 1, "p"), ("ib-dev", 1, "d"), ("ib-port", 1, "i"), ("size", 1, "s"), ("mtu", 1, "m"),
               ("rx-depth", 1, "r"), ("iters", 1, "n"), ("sl", 1, "l"), ("events", 0, "e"), ("gid-idx", 1, "g"),
               ("odp", 0, "o"), ("iodp", 0, "O"), ("prefetch", 0, "P"), ("ts", 0, "t"), ("chk", 0, "c"),
               ("dm", 0, "j"), ("new_send", 0, "N"))
UD_OPTSTRING = "p:d:i:s:r:n:l:eg:c"
UD_LONGOPTS = (("port", 1, "p"), ("ib-dev", 1, "d"), ("ib-port", 1, "i"), ("size", 1, "s"), ("rx-depth", 1, "r"),
               ("iters", 1, "n"), ("sl", 1, "l"), ("events", 0, "e"), ("gid-idx", 1, "g"), ("chk", 0, "c"))

RC_USAGE = """\
Usage:
  {0}            start a server and wait for connection
  {0} <host>     connect to server at <host>

Options:
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)
  -i, --ib-port=<port>   use port <port> of IB device (default 1)
  -s, --size=<size>      size of message to exchange (default 4096)
  -m, --mtu=<size>       path MTU (default 1024)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<sl>          service level value
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index
  -o, --odp\t\t    use on demand paging
  -O, --iodp\t\t    use implicit on demand paging
  -P, --prefetch\t    prefetch an ODP MR
  -t, --ts\t            get CQE with timestamp
  -c, --chk\t            validate received buffer
  -j, --dm\t            use device memory
  -N, --new_send            use new post send WR API
"""

UD_USAGE = """\
Usage:
  {0}            start a server and wait for connection
  {0} <host>     connect to server at <host>

Options:
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)
  -i, --ib-port=<port>   use port <port> of IB device (default 1)
  -s, --size=<size>      size of message to exchange (default 2048)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<SL>          send messages with service level <SL> (default 0)
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index
  -c, --chk              validate received buffer
"""

# Why the RC tool's device-feature options cannot work here (printed after
# the real tool's own message).
WHY_ODP = ("softrdma has no on-demand paging: every MR is shared memory that stays mapped (and resident for the"
           " daemon) from reg_mr to dereg_mr, so there is nothing to fault in or prefetch")
WHY_TS = ("softrdma CQs carry no completion timestamps (ibv_create_cq_ex with"
          " IBV_WC_EX_WITH_COMPLETION_TIMESTAMP has no device clock to read)")
WHY_DM = "softrdma devices have no on-device memory (ibv_alloc_dm: max_dm_size is 0)"


# --------------------------------------------------------------------------- the out-of-band messages
@dataclass
class Dest:
    """struct pingpong_dest."""
    lid: int
    qpn: int
    psn: int
    gid: bytes = bytes(16)


def gid_to_wire(gid: bytes) -> str:
    """gid_to_wire_gid(): the 16 GID bytes, in order, as 32 lowercase hex digits."""
    return "".join("%08x" % int.from_bytes(gid[i:i + 4], "big") for i in range(0, 16, 4))


def _scan_hex(s: str, pos: int) -> tuple[int | None, int]:
    """sscanf's %x at ``pos``: optional spaces, sign, 0x; None if no digit."""
    n = len(s)
    while pos < n and s[pos] in " \t\n\v\f\r":
        pos += 1
    neg = False
    if pos < n and s[pos] in "+-":
        neg = s[pos] == "-"
        pos += 1
    if s[pos:pos + 2].lower() == "0x" and pos + 2 < n and s[pos + 2] in "0123456789abcdefABCDEF":
        pos += 2
    start = pos
    while pos < n and s[pos] in "0123456789abcdefABCDEF":
        pos += 1
    if pos == start:
        return None, pos
    v = int(s[start:pos], 16) & 0xFFFFFFFF
    return ((-v) & 0xFFFFFFFF if neg else v), pos


def wire_to_gid(wgid: str) -> bytes:
    """wire_gid_to_gid(): four groups of 8 hex digits (sscanf %x each), in order."""
    out = b""
    for i in range(4):
        v, _ = _scan_hex(wgid[i * 8:i * 8 + 8], 0)
        out += (v or 0).to_bytes(4, "big")
    return out


def encode_dest(d: Dest) -> bytes:
    """The 52-byte message: sprintf("%04x:%06x:%06x:%s") and its NUL."""
    msg = ("%04x:%06x:%06x:%s" % (d.lid, d.qpn, d.psn, gid_to_wire(d.gid))).encode() + b"\0"
    if len(msg) != MSG_SIZE:
        raise ValueError(f"pingpong address message must be {MSG_SIZE} bytes, not {len(msg)}")
    return msg


def decode_dest(msg: bytes) -> Dest:
    """sscanf(msg, "%x:%x:%x:%s") + wire_gid_to_gid(); fields sscanf could
    not fill are 0 (the C tool leaves them uninitialised)."""
    s = bytes(msg).split(b"\0", 1)[0].decode("latin-1")
    vals = []
    pos = 0
    for i in range(3):
        v, pos = _scan_hex(s, pos)
        if v is None:
            break
        vals.append(c_int(v))
        if i < 2:
            if pos >= len(s) or s[pos] != ":":
                break
            pos += 1
    rest = s[pos + 1:] if len(vals) == 3 and pos < len(s) and s[pos] == ":" else ""
    vals += [0] * (3 - len(vals))
    word = rest.lstrip(" \t\n\v\f\r").split(None, 1)
    gid = wire_to_gid(word[0]) if word else bytes(16)
    return Dest(vals[0], vals[1], vals[2], gid)


# --------------------------------------------------------------------------- libc behaviour
class Drand48:
    """glibc's srand48()/lrand48()."""

    A, C, MASK = 0x5DEECE66D, 0xB, (1 << 48) - 1

    def __init__(self, seed: int):
        seed &= 0xFFFFFFFF                          # glibc keeps 32 bits of a 64-bit long
        self.x = (seed << 16) | 0x330E

    def lrand48(self) -> int:
        self.x = (self.A * self.x + self.C) & self.MASK
        return self.x >> 17


def strtoul_uint(s: str) -> int:
    """``unsigned int x = strtoul(optarg, NULL, 0)``."""
    return strtoul(s) & 0xFFFFFFFF


def strtol_int(s: str) -> int:
    """``int x = strtol(optarg, NULL, 0)``."""
    return c_int(strtol(s))


def mtu_to_enum(mtu: int) -> int:
    """pp_mtu_to_enum(); 0 for a size that is not an IB MTU (the v44 tool
    rejects those with the usage text)."""
    return {256: IBV_MTU_256, 512: IBV_MTU_512, 1024: IBV_MTU_1024, 2048: IBV_MTU_2048,
            4096: IBV_MTU_4096}.get(mtu, 0)


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


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _out(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------- options
@dataclass
class Options:
    ud: bool
    port: int = 18515
    ib_devname: str | None = None
    ib_port: int = 1
    size: int = 4096
    mtu: int = IBV_MTU_1024
    rx_depth: int = 500
    iters: int = 1000
    sl: int = 0
    use_event: bool = False
    gidx: int = -1
    use_odp: bool = False
    implicit_odp: bool = False
    prefetch_mr: bool = False
    use_ts: bool = False
    validate_buf: bool = False
    use_dm: bool = False
    use_new_send: bool = False
    servername: str | None = None


def parse_args(argv: list[str], prog: str, ud: bool) -> Options | int:
    """The real main()'s option loop: Options, or the exit code after the
    usage text."""
    usage = (UD_USAGE if ud else RC_USAGE).format(prog)
    o = Options(ud=ud, size=1024 if ud else 4096)
    getopt = GetoptLong(argv, prog, UD_OPTSTRING if ud else RC_OPTSTRING, UD_LONGOPTS if ud else RC_LONGOPTS)
    for c, arg in getopt:
        if c in ("?", ":"):                      # getopt already printed glibc's message
            sys.stdout.write(usage)
            return 1
        if c == "p":
            # RC: strtoul; UD: strtol into the same unsigned int -- identical after truncation
            o.port = strtoul_uint(arg) if not ud else strtol(arg) & 0xFFFFFFFF
            if o.port > 65535:
                sys.stdout.write(usage)
                return 1
        elif c == "d":
            o.ib_devname = arg
        elif c == "i":
            o.ib_port = strtol_int(arg)
            if o.ib_port < 1:
                sys.stdout.write(usage)
                return 1
        elif c == "s":
            o.size = strtoul_uint(arg)
        elif c == "m":
            o.mtu = mtu_to_enum(strtol_int(arg))
            if o.mtu == 0:
                sys.stdout.write(usage)
                return 1
        elif c == "r":
            o.rx_depth = strtoul_uint(arg)
        elif c == "n":
            o.iters = strtoul_uint(arg)
        elif c == "l":
            o.sl = strtol_int(arg)
        elif c == "e":
            o.use_event = True
        elif c == "g":
            o.gidx = strtol_int(arg)
        elif c == "o":
            o.use_odp = True
        elif c == "P":
            o.prefetch_mr = True
        elif c == "O":
            o.use_odp = o.implicit_odp = True
        elif c == "t":
            o.use_ts = True
        elif c == "c":
            o.validate_buf = True
        elif c == "j":
            o.use_dm = True
        elif c == "N":
            o.use_new_send = True
    operands = getopt.operands
    if len(operands) == 1:
        o.servername = operands[0]
    elif operands:
        sys.stdout.write(usage)
        return 1
    return o


# --------------------------------------------------------------------------- out-of-band exchange
def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """One read of an n-byte message (MSG_WAITALL: a peer's single write
    always arrives whole; a short result means the peer closed or failed)."""
    return sock.recv(n, socket.MSG_WAITALL)


def client_exch_dest(servername: str, port: int, my: Dest) -> Dest | None:
    """pp_client_exch_dest()."""
    try:
        res = socket.getaddrinfo(servername, str(port), socket.AF_UNSPEC, socket.SOCK_STREAM)
    except socket.gaierror as e:
        _err(f"{e.strerror} for {servername}:{port}")
        return None
    sock = None
    for family, stype, proto, _, addr in res:
        try:
            s = socket.socket(family, stype, proto)
        except OSError:
            continue
        try:
            s.connect(addr)
        except OSError:
            s.close()
            continue
        sock = s
        break
    if sock is None:
        _err(f"Couldn't connect to {servername}:{port}")
        return None
    try:
        msg = encode_dest(my)
        try:
            if sock.send(msg) != len(msg):
                raise OSError(0, "short write")
        except OSError:
            _err("Couldn't send local address")
            return None
        why = os.strerror(0)
        try:
            reply = _recv_exact(sock, MSG_SIZE)
            ok = len(reply) == MSG_SIZE and sock.send(DONE) == len(DONE)
        except OSError as e:
            ok, why = False, os.strerror(e.errno) if e.errno else str(e)
        if not ok:
            _err(f"client read/write: {why}")
            _err("Couldn't read/write remote address")
            return None
        return decode_dest(reply)
    finally:
        sock.close()


def server_exch_dest(port: int, my: Dest, connect) -> Dest | None:
    """pp_server_exch_dest(): ``connect(rem)`` is pp_connect_ctx (True on
    success); it runs before the reply is written."""
    try:
        res = socket.getaddrinfo(None, str(port), socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as e:
        _err(f"{e.strerror} for port {port}")
        return None
    lsock = None
    for family, stype, proto, _, addr in res:
        try:
            s = socket.socket(family, stype, proto)
        except OSError:
            continue
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError:
            s.close()
            continue
        lsock = s
        break
    if lsock is None:
        _err(f"Couldn't listen to port {port}")
        return None
    try:
        lsock.listen(1)
        conn, _ = lsock.accept()
    except OSError:
        _err("accept() failed")
        return None
    finally:
        lsock.close()
    try:
        try:
            msg = _recv_exact(conn, MSG_SIZE)
            n, why = len(msg), os.strerror(0)
        except OSError as e:
            n, why = -1, os.strerror(e.errno) if e.errno else str(e)
        if n != MSG_SIZE:
            _err(f"server read: {why}")
            _err(f"{n}/{MSG_SIZE}: Couldn't read remote address")
            return None
        rem = decode_dest(msg)
        if not connect(rem):
            _err("Couldn't connect to remote QP")
            return None
        out = encode_dest(my)
        try:
            ok = conn.send(out) == len(out) and len(conn.recv(MSG_SIZE)) == len(DONE)
        except OSError:
            ok = False
        if not ok:
            _err("Couldn't send/recv local address")
            return None
        return rem
    finally:
        conn.close()


# --------------------------------------------------------------------------- the tool
class PingPong:
    """struct pingpong_context and the functions working on it."""

    def __init__(self, o: Options):
        self.o = o
        self.ctx = self.channel = self.pd = self.mr = self.cq = self.qp = self.ah = None
        self.size = c_int(o.size)                  # ctx->size is an int
        self.rx_depth = c_int(o.rx_depth)
        self.send_flags = IBV_SEND_SIGNALED
        self.pending = 0
        self.page_size = mmap.PAGESIZE
        self.port = o.ib_port & 0xFF                # ibv_* take the port as uint8_t
        self.recv_wr = self.send_wr = None
        self.portinfo = None

    # ---- pp_init_ctx
    def init(self, dev_name: str) -> bool:
        from ..verbs import cq as cq_m, device as dev_m, mr as mr_m, pd as pd_m, qp as qp_m
        from ..verbs.errors import PyverbsError
        o = self.o
        buf_len = c_int(self.size + GRH_BYTES) if o.ud else self.size
        if buf_len < 0:                             # memalign(page_size, (size_t) negative int)
            _err("Couldn't allocate work buf.")
            return False
        try:
            self.ctx = dev_m.Context(name=dev_name)
        except PyverbsError:
            _err(f"Couldn't get context for {dev_name}")
            return False
        if o.ud:
            try:
                port_info = self.ctx.query_port(self.port)
            except PyverbsError:
                _err(f"Unable to query port info for port {o.ib_port}")
                return False
            mtu = 1 << (port_info.active_mtu + 7)
            if self.size > mtu:
                _err(f"Requested size larger than port MTU ({mtu})")
                return False
        if o.use_event:
            try:
                self.channel = cq_m.CompChannel(self.ctx)
            except PyverbsError:
                _err("Couldn't create completion channel")
                return False
        try:
            self.pd = pd_m.PD(self.ctx)
        except PyverbsError:
            _err("Couldn't allocate PD")
            return False
        if not o.ud and (o.use_odp or o.use_ts or o.use_dm):
            try:
                attrx = self.ctx.query_device_ex()
            except PyverbsError:
                _err("Couldn't query device for its features")
                return False
            prog = "ibv_rc_pingpong"
            if o.use_odp:
                # the real tool's check; softrdma reports no ODP capability, so it fails
                rc_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV
                odp = attrx.odp_caps
                if not odp.general_caps & IBV_ODP_SUPPORT or odp.rc_odp_caps & rc_caps != rc_caps:
                    _err("The device isn't ODP capable or does not support RC send and receive with ODP")
                    _err(f"{prog}: -{'O' if o.implicit_odp else 'o'}: {WHY_ODP}")
                    return False
            if o.use_ts and not attrx.completion_timestamp_mask:
                _err("The device isn't completion timestamp capable")
                _err(f"{prog}: -t: {WHY_TS}")
                return False
            if o.use_dm and not attrx.max_dm_size:
                _err("Device doesn't support dm allocation")
                _err(f"{prog}: -j: {WHY_DM}")
                return False
            _err(f"{prog}: the device reports a feature this tool does not implement")
            return False
        try:
            self.mr = mr_m.MR(self.pd, buf_len, IBV_ACCESS_LOCAL_WRITE)
        except (PyverbsError, OSError, ValueError, OverflowError):          # incl. no memory for the buffer
            _err("Couldn't register MR")
            return False
        chunk = b"\x7b" * min(buf_len, 1 << 20)         # memset(ctx->buf, 0x7b, size)
        for off in range(0, buf_len, len(chunk) or 1):
            n = min(len(chunk), buf_len - off)
            self.mr.write(chunk[:n], n, off)
        try:
            self.cq = cq_m.CQ(self.ctx, self.rx_depth + 1, None, self.channel, 0)
        except (PyverbsError, OSError, ValueError, OverflowError):
            _err("Couldn't create CQ")
            return False
        cap = qp_m.QPCap(max_send_wr=1, max_recv_wr=self.rx_depth & 0xFFFFFFFF, max_send_sge=1, max_recv_sge=1)
        try:
            self.qp = qp_m.QP(self.pd, qp_m.QPInitAttr(IBV_QPT_UD if o.ud else IBV_QPT_RC, scq=self.cq,
                                                       rcq=self.cq, cap=cap, sq_sig_all=0))
        except (PyverbsError, OSError, ValueError, OverflowError):
            _err("Couldn't create QP")
            return False
        try:
            attr, _ = self.qp.query(0)
            if attr.cap.max_inline_data >= self.size:
                self.send_flags |= IBV_SEND_INLINE
        except PyverbsError:
            pass                                    # ibv_query_qp's result is not checked either
        a = qp_m.QPAttr(qp_state=IBV_QPS_INIT)
        a.pkey_index = 0
        a.port_num = self.port
        if o.ud:
            a.qkey = UD_QKEY
            mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
        else:
            a.qp_access_flags = 0
            mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        try:
            self.qp.modify(a, mask)
        except PyverbsError:
            _err("Failed to modify QP to INIT")
            return False
        self._build_wrs()
        return True

    def _build_wrs(self) -> None:
        from ..verbs import wr as wr_m
        mr = self.mr
        length = self.size & 0xFFFFFFFF             # ibv_sge.length is a uint32_t
        if self.o.ud:
            rsge = wr_m.SGE(mr.buf, (self.size + GRH_BYTES) & 0xFFFFFFFF, mr.lkey)
            ssge = wr_m.SGE(mr.buf + GRH_BYTES, length, mr.lkey)
        else:
            rsge = ssge = wr_m.SGE(mr.buf, length, mr.lkey)
        self.recv_wr = wr_m.RecvWR(RECV_WRID, 1, [rsge])
        self.send_wr = wr_m.SendWR(SEND_WRID, IBV_WR_SEND, 1, sg=[ssge], send_flags=self.send_flags)

    # ---- pp_connect_ctx
    def _ah_attr(self, dest: Dest):
        from ..verbs import addr as addr_m
        ah = addr_m.AHAttr(is_global=0, port_num=self.port, dlid=dest.lid & 0xFFFF, sl=self.o.sl & 0xFF,
                           src_path_bits=0)
        if dest.gid[8:16] != bytes(8):               # dest->gid.global.interface_id
            ah.is_global = 1
            ah.gr = addr_m.GlobalRoute(dgid=addr_m.GID(dest.gid), sgid_index=self.o.gidx & 0xFF, hop_limit=1)
        return ah

    def connect(self, my_psn: int, dest: Dest) -> bool:
        from ..verbs import addr as addr_m, qp as qp_m
        from ..verbs.errors import PyverbsError
        o = self.o
        if o.ud:
            a = qp_m.QPAttr(qp_state=IBV_QPS_RTR)
            try:
                self.qp.modify(a, IBV_QP_STATE)
            except PyverbsError:
                _err("Failed to modify QP to RTR")
                return False
            a.qp_state = IBV_QPS_RTS
            a.sq_psn = my_psn & 0xFFFFFF
            try:
                self.qp.modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN)
            except PyverbsError:
                _err("Failed to modify QP to RTS")
                return False
            try:
                self.ah = addr_m.AH(self.pd, self._ah_attr(dest))
            except PyverbsError:
                _err("Failed to create AH")
                return False
            self.send_wr.set_wr_ud(self.ah, dest.qpn & 0xFFFFFF, UD_QKEY)
            return True
        a = qp_m.QPAttr(qp_state=IBV_QPS_RTR)
        a.path_mtu = o.mtu
        a.dest_qp_num = dest.qpn & 0xFFFFFF
        a.rq_psn = dest.psn & 0xFFFFFF
        a.max_dest_rd_atomic = 1
        a.min_rnr_timer = 12
        a.ah_attr = self._ah_attr(dest)
        try:
            self.qp.modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
                           | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
        except PyverbsError:
            _err("Failed to modify QP to RTR")
            return False
        a.qp_state = IBV_QPS_RTS
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        a.sq_psn = my_psn & 0xFFFFFF
        a.max_rd_atomic = 1
        try:
            self.qp.modify(a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN
                           | IBV_QP_MAX_QP_RD_ATOMIC)
        except PyverbsError:
            _err("Failed to modify QP to RTS")
            return False
        return True

    # ---- posting
    def post_recv(self, n: int) -> int:
        from ..verbs.errors import PyverbsError
        qp, wr = self.qp, self.recv_wr
        for i in range(max(n, 0)):
            try:
                qp.post_recv(wr)
            except PyverbsError:
                return i
        return max(n, 0)

    def post_send(self) -> bool:
        from ..verbs.errors import PyverbsError
        try:
            self.qp.post_send(self.send_wr)
        except PyverbsError:
            return False
        return True

    # ---- pp_close_ctx
    def close(self) -> bool:
        from ..verbs.errors import PyverbsError
        steps = [(self.qp, "Couldn't destroy QP"), (self.cq, "Couldn't destroy CQ"),
                 (self.mr, "Couldn't deregister MR")]
        if self.o.ud:
            steps.append((self.ah, "Couldn't destroy AH"))
        steps += [(self.pd, "Couldn't deallocate PD"), (self.channel, "Couldn't destroy completion channel"),
                  (self.ctx, "Couldn't release context")]
        for obj, msg in steps:
            if obj is None:
                continue
            try:
                obj.close()
            except (PyverbsError, OSError):
                _err(msg)
                return False
        return True

    def abandon(self) -> None:
        """An error exit: the C tool just returns (the kernel cleans up);
        closing the context tells the daemon to do the same."""
        if self.ctx is not None:
            try:
                self.ctx.close()
            except Exception:
                pass


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
    from ..verbs import device as dev_m
    try:
        dev_list = dev_m.get_device_list()
    except Exception as e:                              # the daemon answered badly
        _err(f"Failed to get IB devices list: {e}")
        return 1
    names = [d.name.decode() if isinstance(d.name, bytes) else d.name for d in dev_list]
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
    from ..verbs.errors import PyverbsError
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
                mr.write(b"\0", 1, data_off + i)       # buf[i] = i / page_size % sizeof(char), always 0
        if not pp.post_send():
            _err("Couldn't post send")
            return 1
        pp.pending |= SEND_WRID

    start = _now_us()
    rcnt = scnt = 0
    num_cq_events = 0
    rx_depth = pp.rx_depth
    use_event = o.use_event
    poll = cq.poll
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
    if o.servername is None and o.validate_buf:
        for i in range(0, size, page):
            if mr.read(1, data_off + i) != b"\0":
                _out(f"invalid data in page {i // page}")

    if num_cq_events:
        cq.ack_events(num_cq_events)
    if not pp.close():
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.path.basename(sys.argv[0])))
