"""``ibdump``: Mellanox's HCA sniffer (github.com/Mellanox/ibdump, ibdump.c)
over a softrdma device (docs/formats/ibdump.md).

On a RoCE device it captures every RoCEv2 packet the device sends and
receives -- over its UDP sockets and over the daemon's loopback path alike
-- and writes a classic pcap of Ethernet + IP + UDP 4791 frames, ICRC
included, that Wireshark/tshark decode as RoCE with nothing configured.
On an InfiniBand device it captures every frame the port sends to and
receives from the fabric, LRH to VCRC as on the link, and writes them as
the real tool does for an IB port: pcap link type ERF (197), each frame
after a 16-byte ERF header of type INFINIBAND (21), which tshark decodes
as InfiniBand (LRH, GRH, BTH, ..., IPoIB and the IP inside).  ``-w -`` writes
the pcap to stdout (progress output is then off, as in the real tool):
``softrdma ibdump -w - | tshark -r -``.

The capture itself is the daemon's (``device.capture``, through
``verbs.capture.PacketCapture``): timestamps are taken when the device
handles the packet (nanoseconds), not when the tool reads it.  The
capture buffer is the tool's shared-memory ring of ``2^max-burst``
entries, each holding one whole packet -- what ibdump's sniffer receive
queue of ``2^max-burst`` MTU-sized entries is on a ConnectX.  When the
tool falls behind and the ring is full the daemon drops records, never
traffic; the drops are reported at exit (the real tool cannot see its
losses).  While a capture is open, RC traffic between QPs of the same
daemon goes as packets instead of the packet-less short cut, so that the
capture has packets to see.

Frames carry the ICRC computed over the frame as written (IPv4: ID 0 and
DF, as softrdma's sender emits them); a packet the fault injector damaged
carries the bad ICRC it had on the wire.  The Ethernet addresses are zero:
the device sends UDP datagrams and never sees link-layer addresses.  The
loopback path has no socket: its frames carry UDP port 4791 both ways.

Options are the real tool's (getopt_long with its optstring, its usage
text, messages and exit codes).  Those that work: -d, -i (port 1 is the
only port), -w/-o, -b/--max-burst, -s, -M/--mem-mode, -p/--writer-thread,
-I/--direction, -q/--src_qp (a filter on the local QP of each packet),
--erf 0 (Ethernet) / --erf 1 (InfiniBand), -h, -v.  Those that have no meaning for a software device are
refused with the reason: -m/--mst-dev, -T/--conti, -j/--jumbo-mtu,
--decap, --erf 1 on a RoCE device, --a0-mode (with the real tool's "does not support A0
mode").  -C and -L are in the real optstring without a case: usage, 1.
"""

from __future__ import annotations

import errno
import os
import queue
import signal
import sys
import threading
import time

from .. import __version__
from ..uapi.capture import BOTH, IB_FRAME, MAX_LOG2_ENTRIES, RX, TX, slot_size
from ..verbs.capture import PacketCapture
from ..verbs.device import Context, get_device_list
from ..verbs.errors import PyverbsError
from ..wire.pcap import LINKTYPE_ERF, PcapWriter, erf_infiniband, roce_frame
from .libc import GetoptLong, c_int, strtol, strtoul

DEFAULT_FILE = "sniffer.pcap"
DEFAULT_LOG2_ENTRIES = 12
MAX_SRC_QPS = 16
OPTSTRING = "p:w:d:i:o:b:hM:vC:EI:Lq:sm:jT"
LONGOPTS = (("ib-dev", 1, "d"), ("mst-dev", 1, "m"), ("ib-port", 1, "i"), ("output", 1, "o"), ("write", 1, "w"),
            ("max-burst", 1, "b"), ("mem-mode", 1, "M"), ("writer-thread", 1, "p"), ("direction", 1, "I"),
            ("decap", 0, "E"), ("src_qp", 1, "q"), ("silent", 0, "s"), ("conti", 0, "T"), ("jumbo-mtu", 0, "j"),
            ("help", 0, "h"), ("version", 0, "v"), ("erf", 1, "erf"), ("a0-mode", 0, "a0-mode"))
PCAP_RECORD_BYTES = 16
ZERO_MAC = bytes(6)
WAIT_S = 0.05                    # longest sleep between looks at the ring (see PacketCapture.wait)
READ_BUDGET = 256                # records per read: the stop flag and progress are looked at in between

# Why an option of the real tool has no meaning on a softrdma device.
REFUSED = {
    "m": "--mst-dev: softrdma devices have no MST (firmware access) device to open; none is needed",
    "T": "--conti: the capture buffer is memory shared with softrdmad, not pages registered with an HCA; "
         "contiguous pages have no meaning here",
    "j": "--jumbo-mtu: every capture entry already holds the largest packet a softrdma device carries "
         "(4096-byte MTU); there is no larger entry size to choose",
    "E": "--decap: softrdma captures at the device, where there is no port-mirroring (RSPAN) "
         "encapsulation to remove",
    "erf": "--erf 1: this device is RoCE (Ethernet link layer); its packets are written as Ethernet "
           "frames (DLT_EN10MB), and ERF records of type InfiniBand are for InfiniBand ports",
}
A0_WHY = "    A0 mode programs the hardware sniffer of a ConnectX-2 through its MST device; softrdma has neither"


def _usage(argv0: str) -> str:
    return (
        "   ibdump - Dump Infiniband traffic from Mellanox Technologies ConnectX HCA\n"
        "            The dump file can be loaded by Wireshark for graphical traffic analysis\n\n"
        "Usage:\n"
        f"  {argv0} [options]\n"
        "\n"
        "Options:\n"
        "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
        "  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n"
        f"  -w, --write=<file>     dump file name (default \"{DEFAULT_FILE}\")\n"
        "                         '-' stands for stdout - enables piping to tcpdump or tshark.\n"
        "  -o, --output=<file>    alias for the '-w' option. Do not use - for backward compatibility\n"
        "  -b, --max-burst=<log2 burst> log2 of the maximal burst size that can be\n"
        "                               captured with no packets loss.\n"
        "                               Each entry takes ~ MTU bytes of memory "
        f"(default {DEFAULT_LOG2_ENTRIES} - {1 << DEFAULT_LOG2_ENTRIES} entries)\n"
        "  -s, --silent           do not print progress indication.\n"
        "  -T, --conti            Use contiguous pages.\n"
        "  -M, --mem-mode <size>  when specified, packets are written to file only after the capture\n"
        "                         is stopped. It is faster than default mode (less chance for\n"
        "                         packet loss), but takes more memory. In this mode, ibdump\n"
        "                         stops after <size> bytes are captured\n"
        "  -p, --writer-thread <size>   Use a specific thread for writing data to disk.\n"
        "                               In order to use this functionality you have to specify the\n"
        "                               size of two temporary buffers used to save data while the\n"
        "                               thread writes to disk\n"
        "\n"
        "  --decap                Decapsulate port mirroring headers. Should be used\n"
        "                         when capturing RSPAN traffic.\n"
        "  -h, --help             Display this help screen.\n"
        "  -v, --version          Print version information.\n")


class Config:
    def __init__(self):
        self.dev_name: str | None = None
        self.out_file_name = DEFAULT_FILE
        self.ib_port = 1
        self.log2entries = DEFAULT_LOG2_ENTRIES
        self.mem_mode = False
        self.writer_thread = False
        self.mem_size = 0
        self.directions = BOTH
        self.src_qp_str: str | None = None
        self.src_qps: frozenset[int] | None = None
        self.silent = False
        self.to_stdout = False
        self.a0_mode = False
        self.refused: list[str] = []
        self.with_erf = -1                      # --erf: -1 = by the port's link layer


def _err(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _csv_to_num_array(line: str) -> list[int] | None:
    """ibdump's csv_to_num_array: strtok on ',' (empty fields vanish),
    strtoul base 0 with the end pointer checked, at most MAX_SRC_QPS."""
    out = []
    for p in (f for f in line.split(",") if f):
        if len(out) >= MAX_SRC_QPS:
            _err("-E- Too many csv elements")
            return None
        if not _whole_number(p):
            _err(f"-E- \"{p}\" is not a numerical value")
            return None
        out.append(strtoul(p) & 0xFFFFFFFF)
    return out


def _whole_number(s: str) -> bool:
    """strtoul(s, &end, 0) with *end == '\\0': the whole string is one number
    (leading white space and a sign allowed, as in C)."""
    if s == "":
        return True                         # no digits: the end pointer is the (empty) string's end
    t = s.lstrip(" \t\n\v\f\r")
    if t[:1] in ("+", "-"):
        t = t[1:]
    if t[:2].lower() == "0x" and len(t) > 2:
        return all(ch in "0123456789abcdefABCDEF" for ch in t[2:])
    if t[:1] == "0":
        return all(ch in "01234567" for ch in t)
    return t != "" and t.isascii() and t.isdigit()


def parse_args(argv: list[str], prog: str) -> Config | int:
    cfg = Config()
    usage = _usage(prog)
    g = GetoptLong(argv, prog, OPTSTRING, LONGOPTS)
    for opt, arg in g:
        if opt == "d":
            cfg.dev_name = arg
        elif opt in ("o", "w"):
            cfg.out_file_name = arg
        elif opt == "i":
            cfg.ib_port = c_int(strtoul(arg))
            if cfg.ib_port < 0:
                sys.stdout.write(usage)
                return 1
        elif opt == "b":
            if not _whole_number(arg):
                sys.stdout.write(usage)
                return 1
            cfg.log2entries = strtoul(arg) & 0xFFFFFFFF
        elif opt == "M":
            if not _whole_number(arg):
                sys.stdout.write(usage)
                return 1
            cfg.mem_mode = True
            cfg.mem_size = strtoul(arg)
        elif opt == "p":
            if not _whole_number(arg):
                sys.stdout.write(usage)
                return 1
            cfg.writer_thread = True
            cfg.mem_size = strtoul(arg)
        elif opt == "I":
            if arg == "tx":
                cfg.directions &= ~RX
            elif arg == "rx":
                cfg.directions &= ~TX
            else:
                _err("-E- Bad parameter for direction flag")
                sys.stdout.write(usage)
                return 1
        elif opt == "q":
            cfg.src_qp_str = arg
        elif opt == "s":
            cfg.silent = True
        elif opt == "erf":
            if not _whole_number(arg) or strtol(arg) not in (0, 1):
                _err("-E- Bad parameter for --erf flag. Expected 0 or 1")
                sys.stdout.write(usage)
                return 1
            cfg.with_erf = strtol(arg)
        elif opt == "a0-mode":
            cfg.a0_mode = True
        elif opt in REFUSED:
            cfg.refused.append(opt)
        elif opt == "h":
            sys.stdout.write(usage)
            return 0
        elif opt == "v":
            sys.stdout.write(f"{prog}, softrdma {__version__}\n")
            return 0
        else:                                   # '?', and -C / -L: in the optstring, no case in ibdump
            sys.stdout.write(usage)
            return 1
    if g.operands:
        sys.stdout.write(usage)
        return 1
    if cfg.writer_thread and cfg.mem_mode:
        _err("-E- You can not use mem-mode and writer-thread simultaneously.")
        return 1
    if cfg.src_qp_str is not None:
        qps = _csv_to_num_array(cfg.src_qp_str)
        if qps is None:
            _err("-E- Failed to parse source QPs list")
            return 255                          # ibdump returns -1
        cfg.src_qps = frozenset(qps)
    if cfg.out_file_name == "-":
        cfg.to_stdout = True
        cfg.silent = True
    for opt in dict.fromkeys(cfg.refused):
        _err(f"-E- {REFUSED[opt]}")
    if cfg.refused:
        return 1
    if cfg.log2entries > MAX_LOG2_ENTRIES:
        _err(f"-E- --max-burst {cfg.log2entries}: at most {MAX_LOG2_ENTRIES} (2^{MAX_LOG2_ENTRIES} capture "
             "entries of one packet each)")
        return 1
    return cfg


class _MemSink:
    """-M: everything stays in memory until the capture stops."""

    def __init__(self):
        self.buf = bytearray()

    def write(self, b) -> None:
        self.buf += b

    def flush(self) -> None:
        pass


class _ThreadSink:
    """-p: records fill one of two buffers of ``size`` bytes while a thread
    writes the other to the file (ibdump's writer thread)."""

    def __init__(self, f, size: int):
        self.f, self.size = f, max(1, size)
        self.buf = bytearray()
        self.q: queue.Queue = queue.Queue(maxsize=1)      # one buffer being written, one filling
        self.error: OSError | None = None
        self.t = threading.Thread(target=self._run, name="ibdump-writer", daemon=True)
        self.t.start()

    def _run(self) -> None:
        while (b := self.q.get()) is not None:
            try:
                self.f.write(b)
            except OSError as e:
                self.error = e

    def write(self, b) -> None:
        if self.error is not None:
            raise self.error
        if len(self.buf) + len(b) >= self.size and self.buf:
            self.q.put(self.buf)
            self.buf = bytearray()
        self.buf += b

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self.buf:
            self.q.put(self.buf)
            self.buf = bytearray()
        self.q.put(None)
        self.t.join()
        self.f.flush()
        if self.error is not None:
            raise self.error


class Sniffer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.stop = False
        self.pkts = 0
        self.bytes = 0
        self.dumped = 0                         # pcap record bytes (ibdump's dumped_bytes)
        self.is_eth = True

    def full(self) -> bool:
        """-M: the memory buffer holds its <size> bytes; capture ends."""
        return self.cfg.mem_mode and self.dumped >= self.cfg.mem_size

    def say(self, text: str) -> None:
        """ibdump's my_printf: stdout unless silent."""
        if not self.cfg.silent:
            sys.stdout.write(text)
            sys.stdout.flush()

    def on_signal(self, signum, _frame) -> None:
        self.say(f"\n\nInterrupted (signal {signum}) - exiting ...\n")
        self.stop = True

    def run(self) -> int:
        cfg = self.cfg
        for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, self.on_signal)
        self.say("Initiating resources ...\n")
        ctx = cap = f = None
        try:
            ctx, cap, f = self.create()
            if ctx is None:
                _err("-E- failed to create resources")
                return 1
            return self.capture(ctx, cap, f)
        finally:
            if cap is not None:
                cap.close()
            if ctx is not None:
                ctx.close()
            if f is not None and not cfg.to_stdout:
                try:
                    f.close()
                except OSError:
                    pass                        # what failed to reach the file was reported already

    def create(self):
        """ibdump's resources_create, in its order; (None, None, file) and
        the real message on a failure."""
        cfg = self.cfg
        self.say("searching for IB devices in host\n")
        if cfg.to_stdout:
            f = sys.stdout.buffer
        else:
            try:
                f = open(cfg.out_file_name, "wb")
            except OSError as e:
                _err(f"-E- Failed to open file {cfg.out_file_name}: {e.strerror}")
                return None, None, None
        try:
            names = [d.name.decode() for d in get_device_list()]
        except (PyverbsError, OSError):
            _err("-E- failed to get IB devices list")
            return None, None, f
        if not names:
            _err("-E- found 0 device(s)")
            return None, None, f
        if cfg.dev_name is None:
            cfg.dev_name = names[0]
        elif cfg.dev_name not in names:
            _err(f"-E- IB device {cfg.dev_name} wasn't found")
            return None, None, f
        try:
            ctx = Context(name=cfg.dev_name)
        except PyverbsError:
            _err(f"-E- failed to open device {cfg.dev_name}")
            return None, None, f
        try:
            port = ctx.query_port(cfg.ib_port)
        except PyverbsError:
            _err(f"-E- ibv_query_port on port {cfg.ib_port & 0xFFFFFFFF} failed")
            ctx.close()
            return None, None, f
        self.is_eth = port.link_layer == 2                  # IBV_LINK_LAYER_ETHERNET
        if cfg.with_erf == 1 and self.is_eth:
            _err(f"-E- {REFUSED['erf']}")
            ctx.close()
            return None, None, f
        try:
            cap = PacketCapture(ctx, cfg.log2entries, cfg.directions)
        except PyverbsError as e:
            if e.error_code == errno.ENOMEM:
                _err(f"-E- failed to allocate {(1 << cfg.log2entries) * slot_size(port.max_mtu)} bytes to memory "
                     "buffer data")
            else:
                _err(f"-E- Failed to set sniffer mode: {e}")
            ctx.close()
            return None, None, f
        self.say(f"Port active_mtu={128 << port.active_mtu}\n")
        self.say(f"Capture ring shared with softrdmad: {cap.entries} entries of {cap.entry_size} bytes\n")
        return ctx, cap, f

    def print_config(self, entries: int) -> None:
        cfg = self.cfg
        out = [" ------------------------------------------------\n",
               f" Device                         : \"{cfg.dev_name}\"\n",
               f" Physical port                  : {cfg.ib_port & 0xFFFFFFFF}\n",
               f" Link layer                     : {'Ethernet' if self.is_eth else 'Infiniband'}\n",
               f" Dump file                      : {cfg.out_file_name}\n",
               f" Sniffer WQEs (max burst size)  : {entries}\n"]
        if cfg.src_qp_str:
            out.append(f" Monitored QPs:                 : {cfg.src_qp_str}\n")
        out.append(" ------------------------------------------------\n\n")
        sys.stdout.write("".join(out))
        sys.stdout.flush()

    def capture(self, ctx, cap, f) -> int:
        cfg = self.cfg
        if not cfg.silent:
            self.print_config(cap.entries)
        if cfg.a0_mode:
            _err("-E- This tool does not support A0 mode")
            _err(A0_WHY)
            return 1
        if not self.is_eth and cfg.with_erf == 0:
            _err("-E- Can not dump Infiniband traffic without an ERF header (--erf 0)")
            return 255                          # ibdump returns -1
        if cfg.mem_mode:
            sink = _MemSink()
        elif cfg.writer_thread:
            sink = _ThreadSink(f, cfg.mem_size)
        else:
            sink = f
        try:
            writer = PcapWriter(sink) if self.is_eth else PcapWriter(sink, linktype=LINKTYPE_ERF)
            if sink is f:
                f.flush()
        except OSError:
            _err("-E- Failed writing to output file.")
            return 1
        self.say("\nReady to capture (Press ^c to stop):\n")
        t_print = printed = 0
        gone = broken = False
        full = self.full
        try:
            while not self.stop and not full():
                recs = cap.read(READ_BUDGET)
                if recs:
                    self.write(writer, recs)
                    if cfg.to_stdout:
                        f.flush()
                elif not cap.wait(WAIT_S):
                    gone = True
                    break
                now = time.monotonic()
                if not cfg.silent and now - t_print >= 1.0 and printed != self.pkts:
                    t_print, printed = now, self.pkts
                    total = f"/{cfg.mem_size}" if cfg.mem_size else ""
                    sys.stdout.write(f"\rCaptured:  {self.pkts:8d} packets, {self.bytes:8d}{total} bytes     ")
                    sys.stdout.flush()
            stats = None
            if not gone:
                stats = cap.stop()
                if not full():                  # what the daemon recorded before the stop
                    while recs := cap.read(READ_BUDGET):
                        self.write(writer, recs)
                        if full():
                            break
                if sink is f:
                    f.flush()
        except BrokenPipeError:                 # the reader of -w - went away
            broken = True
            stats = None
            try:
                stats = cap.stop()
            except PyverbsError:                # the daemon went too: the summary without its counters
                pass
        except OSError as e:                    # the disk is full, ...
            _err(f"-E- Failed writing to file: {e.strerror}")
            return 1
        if gone:
            _err("-E- poll CQ failed: softrdmad closed the connection")
            _err("-E- poll completion failed")
            return 1
        self.say("\n")
        if full():
            self.say("Buffer full ...\n")
        _err(f"\nCaptured:  {self.pkts:8d} packets, {self.bytes:8d} bytes")
        if stats and stats["dropped"]:
            _err(f"-W- {stats['dropped']} packets were not captured: the capture ring ({cap.entries} entries, "
                 f"--max-burst {cfg.log2entries}) was full")
        try:
            if isinstance(sink, _ThreadSink):
                sink.close()
            elif isinstance(sink, _MemSink):
                f.write(sink.buf)
                f.flush()
                self.say(f"-I- Wrote file {cfg.out_file_name}\n")
        except BrokenPipeError:
            broken = True
        except OSError as e:
            _err(f"-E- Failed writing to file: {e.strerror}")
            return 1
        if broken and cfg.to_stdout:
            # nothing more can go to the closed pipe; keep the interpreter's
            # final flush of stdout from failing too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

    def write(self, writer: PcapWriter, recs) -> None:
        qps = self.cfg.src_qps
        for p in recs:
            if qps is not None and p.qpn not in qps:
                continue
            if len(p.src) == IB_FRAME:
                # an IB port's frame as on the link, after its ERF record header
                rec = erf_infiniband(p.packet, p.ts_ns, p.wire_len)
                writer.write(rec, ts_ns=p.ts_ns, orig_len=len(rec) + p.wire_len - len(p.packet))
                self.count(len(rec))
                if self.full():
                    return
                continue
            missing = p.wire_len - len(p.packet)
            frame = roce_frame(p.packet + bytes(missing), p.src, p.dst, sport=p.sport, dport=p.dport,
                               src_mac=ZERO_MAC, dst_mac=ZERO_MAC)
            wire_len = len(frame)
            if missing:
                # a foreign packet longer than any entry: written cut, as a
                # snaplen cuts (the zeros and the ICRC over them are cut off)
                frame = frame[:wire_len - 4 - missing]
            elif p.flipped_bit is not None:
                frame = bytearray(frame)
                frame[wire_len - 4 - len(p.packet) + (p.flipped_bit >> 3)] ^= 1 << (p.flipped_bit & 7)
            writer.write(frame, ts_ns=p.ts_ns, orig_len=wire_len)
            self.count(len(frame))
            if self.full():
                return

    def count(self, n: int) -> None:
        self.pkts += 1
        self.bytes += n
        self.dumped += PCAP_RECORD_BYTES + n


def main(argv: list[str] | None = None, prog: str = "ibdump") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg = parse_args(argv, prog)
    if isinstance(cfg, int):
        return cfg
    return Sniffer(cfg).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog=os.path.basename(sys.argv[0])))
