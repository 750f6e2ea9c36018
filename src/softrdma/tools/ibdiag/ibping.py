"""``ibping [options] <dest lid|guid>`` and ``ibping -S`` (infiniband-diags 44
ibping.c) as an ibsim client, or through a softrdma IB device's QP1
(``-C DEV [-P PORT]``, or no ``-C`` and no ibsim environment: the first IB
device whose port is Active; ``devport``).

The ping is a vendor-class MAD: class 0x32 (IB_VENDOR_OPENIB_PING_CLASS,
vendor range 2), class version 1, method Get, attribute 0, modifier 0,
the OUI (default 0x001405, IB_OPENIB_OUI; ``-o``) in bytes 37..39, 216
data bytes from offset 40, LID-routed to QP1.  The server answers a
GetResp with the same header and its ``<hostname>.<domainname>`` (no dot
and no domain when the domain name is empty) in the data.

Client (libibmad's ``ib_vendor_call_via`` -> ``mad_rpc_rmpp`` ->
``_do_madrpc``): up to 3 sends while the fabric hands the MAD back with
status ETIMEDOUT (nobody listens there); no answer within the timeout is
"recv failed: Connection timed out".  A lost ping prints
``ibwarn: [pid] mad_rpc_rmpp: _do_madrpc failed; dport (Lid N)``, a
pong ``Pong from <host> (Lid N): time X.XXX ms`` (not with ``-f``); one
second between pings unless ``-f``; SIGINT/SIGTERM or the end of ``-c``
prints the statistics and exits 0.  Times are ibping.c's ``time_stamp()``
units (seconds * 10^6 + nanoseconds / 10^4: not quite microseconds), shown
as ``units / 1000 . units % 1000``.

Server (``-S``): ibsim hands unsolicited QP0/QP1 requests only to a client
that connected with issm set, so the server attaches that way (the real
one needs SIM_SET_ISSM=1 for it); the node's CapabilityMask gets IsSM
only when SIM_SET_ISSM is set, as with umad2sim.  Like the real one under
umad2sim, it answers every class 0x32 request whatever its OUI; other
MADs (an SM's SMInfo polls) are ignored, where the real one crashes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import time

from ..libc import strtoul
from . import common
from .common import Exit, ibexit
from .devport import device_for
from .rpc import MadPort, ibwarn

PING_CLASS = 0x32                 # IB_VENDOR_OPENIB_PING_CLASS
OPENIB_OUI = 0x001405             # IB_OPENIB_OUI
VENDOR2_DATA_OFFS = 40            # IB_VENDOR_RANGE2_DATA_OFFS
VENDOR2_DATA_SIZE = 216           # IB_VENDOR_RANGE2_DATA_SIZE
METHOD_GET, METHOD_SET, METHOD_SEND, METHOD_GET_RESP = 0x01, 0x02, 0x03, 0x81
GSI_QP = 1
MAX_TRIES = 3                     # libibmad MAD_DEF_RETRIES: sends per call
U64 = (1 << 64) - 1
CA_NAME = "ibsim0"

OPTS = [
    ("count", "c", 1, "<num>", "stop after count packets"),
    ("flood", "f", 0, None, "flood destination"),
    ("oui", "o", 1, "", "use specified OUI number"),
    ("Server", "S", 0, None, "start in server mode"),
]


class _Stop(Exception):
    """SIGINT/SIGTERM in client mode: report and exit 0."""


def time_stamp() -> int:
    """ibping.c time_stamp(): tv_sec * 1000000 + tv_nsec / 10000 (sic)."""
    ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return (ns // 1_000_000_000) * 1_000_000 + (ns % 1_000_000_000) // 10_000


def _domainname() -> str:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(256)
        if libc.getdomainname(buf, 256) == 0:
            return buf.value.decode(errors="replace")
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/sys/kernel/domainname") as f:
            return f.read().strip()
    except OSError:
        return "?domainname?"


def host_and_domain(size: int = VENDOR2_DATA_SIZE) -> bytes:
    """ibping.c get_host_and_domain(): "<host>.<domain>", "<host>" when the
    domain name is empty; NUL-terminated within ``size`` bytes."""
    try:
        host = socket.gethostname().encode()
    except OSError:
        host = b"?hostname?"
    host = host[:size - 1]
    room = size - len(host) - 1
    if room <= 0:
        return host.ljust(size, b"\0")[:size]
    dom = _domainname().encode()[:max(0, room - 1)]
    text = host + b"." + dom if dom else host
    return text.ljust(size, b"\0")[:size]


def ping_mad(tid: int, oui: int) -> bytes:
    mad = bytearray(256)
    mad[0:4] = bytes([1, PING_CLASS, 1, METHOD_GET])
    mad[8:16] = tid.to_bytes(8, "big")
    mad[37:40] = (oui & 0xFFFFFF).to_bytes(3, "big")
    return bytes(mad)


def pong_mad(req: bytes, data: bytes) -> bytes | None:
    """mad_respond_via(): the request's header as a response (status 0, M_Key
    0, the OUI kept), ``data`` at offset 40; None for what is not a request."""
    method = req[3]
    if method & 0x80:
        return None
    if method == METHOD_SET:
        method = METHOD_GET
    if method != METHOD_SEND:
        method |= 0x80
    mad = bytearray(req[:256].ljust(256, b"\0"))
    mad[0], mad[2], mad[3] = 1, 1, method
    mad[4:6] = b"\0\0"
    mad[24:32] = bytes(8)
    mad[VENDOR2_DATA_OFFS:VENDOR2_DATA_OFFS + VENDOR2_DATA_SIZE] = data[:VENDOR2_DATA_SIZE]
    return bytes(mad)


def check_ca_port(prog: str, cfg, mad: MadPort) -> None:
    """mad_rpc_open_port2() with -C/-P against umad2sim's one device
    ``ibsim0`` and its one port (libibumad's resolve_ca_name/resolve_ca_port
    and dev_to_umad_id); the real messages when it cannot be opened."""
    ca, want = cfg.ca, cfg.ca_port
    pi = mad.port_info
    num = pi["LocalPort"]
    switch = mad.node_info["NodeType"] == 2
    usable = pi["LinkState"] == 4 or pi["PhysLinkState"] != 3
    if ca is not None and ca != CA_NAME:
        ok = False
    elif ca is not None and want:
        ok = want == num                    # no port resolution: the umad device must match
    elif switch:
        ok = True                           # switch: always port 0
    elif want > 0:
        ok = want == num and usable
    else:
        ok = usable
    if not ok:
        ca_s = ca if ca is not None else "(null)"
        ibwarn("mad_rpc_open_port", f"can't open UMAD port ({ca_s}:{want})")
        raise ibexit(prog, f"Failed to open '{ca_s}' port '{want}'")


class Pinger:
    def __init__(self, mad: MadPort, timeout_s: float):
        self.mad = mad
        self.timeout = timeout_s

    def call(self, lid: int, oui: int) -> bytes | None:
        """ib_vendor_call_via(): the answer's data, or None (with the warnings).
        A timeout ends the call; a request ibsim hands back undelivered (an
        error status) is sent again, up to MAX_TRIES times in all."""
        mad = ping_mad(self.mad.agent.alloc_tid(), oui)
        for _try in range(MAX_TRIES):
            s = self.mad.post((lid, GSI_QP, GSI_QP), mad, timeout=self.timeout, retries=0)
            self.mad.run()
            if s.status:
                continue
            if s.response is None:
                ibwarn("_do_madrpc", "recv failed: Connection timed out")
                ibwarn("mad_rpc_rmpp", f"_do_madrpc failed; dport (Lid {lid})")
                return None
            m = s.response
            if int.from_bytes(m[4:6], "big"):
                return None                 # "MAD completed with error status" (only with -e)
            return bytes(m[VENDOR2_DATA_OFFS:VENDOR2_DATA_OFFS + VENDOR2_DATA_SIZE])
        ibwarn("mad_rpc_rmpp", f"_do_madrpc failed; dport (Lid {lid})")
        return None


def serve(mad: MadPort) -> None:
    """ibping_serv(): answer every ping with the host name, until killed."""
    data = host_and_domain()
    port = mad.port
    while True:
        port.wait(None)
        for req in port.recv_all():
            if req.status or req.mad[1] != PING_CLASS:
                continue
            resp = pong_mad(req.mad, data)
            if resp is None:
                continue
            port.send(resp, req.slid, req.sqp, GSI_QP, slid=0, block=mad.timeout)


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("latin-1")


def main(argv, prog="ibping") -> int:
    st = {"count": 0xFFFFFFFF, "flood": 0, "oui": OPENIB_OUI, "server": 0}

    def opt(c, arg):
        if c == "c":
            st["count"] = strtoul(arg) & 0xFFFFFFFF
        elif c == "f":
            st["flood"] += 1
        elif c == "o":
            st["oui"] = strtoul(arg) & 0xFFFFFFFF
        elif c == "S":
            st["server"] += 1

    def body():
        cfg, args = common.parse(argv, prog, OPTS, "DKy", "<dest lid|guid>", None, opt)
        if not args and not st["server"]:
            raise Exit(2, cfg.usage)
        server = bool(st["server"])
        device = device_for(cfg.ca, cfg.ca_port)
        mad = MadPort(cfg.timeout or None, issm=server,
                      set_issm=server and os.environ.get("SIM_SET_ISSM") is not None, device=device,
                      ca_port=cfg.ca_port, classes=(PING_CLASS,) if server else ())
        try:
            if device is None:
                check_ca_port(prog, cfg, mad)
            if server:
                return _serve(mad)
            portid = common.resolve_portid(mad, args[0], cfg.dest_type)
            if portid is None:
                raise ibexit(prog, f"can't resolve destination port {args[0]}")
            return _client(mad, portid, st, (cfg.timeout or 1000) / 1000.0)
        finally:
            mad.close()
    return common.run(prog, body)


def _serve(mad: MadPort) -> int:
    # killed as the real one is (by the signal), but detached first
    def die(sig, _frame):
        mad.close()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    signal.signal(signal.SIGTERM, die)
    signal.signal(signal.SIGINT, die)
    serve(mad)
    return 0


def _client(mad: MadPort, portid, st, timeout_s: float) -> int:
    w = sys.stdout.write
    pinger = Pinger(mad, timeout_s)
    stats = {"min": U64, "max": 0, "total": 0, "replied": 0, "lost": 0, "ntrans": 0, "last": b""}

    def stop(_sig, _frame):
        raise _Stop()

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    start = time_stamp()
    count = st["count"]
    try:
        while count > 0:
            count -= 1
            stats["ntrans"] += 1
            t0 = time_stamp()
            data = pinger.call(portid.lid, st["oui"])
            if data is None:
                stats["lost"] += 1
            else:
                rtt = (time_stamp() - t0) & U64
                if not stats["last"]:
                    stats["last"] = data
                if not st["flood"]:
                    w(f"Pong from {_cstr(data)} ({portid}): time {rtt // 1000}.{rtt % 1000:03d} ms\n")
                    sys.stdout.flush()
                stats["min"] = min(stats["min"], rtt)
                stats["max"] = max(stats["max"], rtt)
                stats["total"] += rtt
                stats["replied"] += 1
            if not st["flood"]:
                time.sleep(1)
    except _Stop:
        pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    total_time = (time_stamp() - start) & U64
    n, rep, lost = stats["ntrans"], stats["replied"], stats["lost"]
    mn = 0 if stats["min"] == U64 else stats["min"]
    avg = stats["total"] // rep if rep else 0
    mx = stats["max"]
    w(f"\n--- {_cstr(stats['last'])} ({portid}) ibping statistics ---\n")
    w(f"{n} packets transmitted, {rep} received, {lost * 100 // n if lost else 0}% packet loss, "
      f"time {total_time // 1000} ms\n")
    w(f"rtt min/avg/max = {mn // 1000}.{mn % 1000:03d}/{avg // 1000}.{avg % 1000:03d}/"
      f"{mx // 1000}.{mx % 1000:03d} ms\n")
    return 0
