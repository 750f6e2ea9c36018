"""perftest's parameters: defaults, the option parser and its checks.

The model is linux-rdma/perftest's ``perftest_parameters.c`` (``usage()``,
``init_perftest_params()``, ``parser()``, ``force_dependecies()``), built the
way a perftest package would be built for softrdma: no mlx5dv (no DC, DCS,
AES-XTS), no XRC domain, no GPU memory back ends, no hnsdv, no
thread-domain or out-of-order attributes.  Those ``#ifdef`` options are
therefore unknown to getopt here, exactly as in such a build; the options
the real table always carries but softrdma cannot honour are parsed (so
getopt's diagnostics stay perftest's) and then refused with a clear message
and exit code 1 (``UNSUPPORTED``), never ignored.

``parse(argv, prog, verb, tst)`` returns a ``Params`` or an exit code;
everything it prints goes where perftest prints it.  Integer options go
through C's ``strtol``/``strtoul`` and the C cast of the field they land in
(``uint8_t`` for the IB port, the GID index, the SL and the QP timeout), so
``-i 257`` is port 1 and ``-x 300`` is GID index 44, as with perftest.

Over 1,000 lines on purpose: a faithful port of perftest_parameters.c, one
option table and one parser as there, kept whole so that it can be read
against the C file line for line.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from ..libc import GetoptLong, c_int, strtol, strtoul

# --------------------------------------------------------------------------- constants (perftest_parameters.h)
VERSION = "6.24"                # AC_INIT([perftest],[6.24],...) of the source followed

RC, UC, UD, RAWETH, XRC, DC, SRD = range(7)
CONN_STR = ("RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD")
SEND, WRITE, WRITE_IMM, READ, ATOMIC = range(5)
TESTS_STR = ("Send", "RDMA_Write", "RDMA_Write_imm", "RDMA_Read", "Atomic")
LAT, BW = 0, 1
SERVER, CLIENT = 0, 1
CMP_AND_SWAP, FETCH_AND_ADD = 0, 1
ATOMIC_TYPES = ("CMP_AND_SWAP", "FETCH_AND_ADD")
ITERATIONS, DURATION = 0, 1
RUN_REGULAR, RUN_ALL, RUN_INFINITELY = 0, 1, 2
MBS, GBS = 0, 1
FULL_VERBOSITY, OUTPUT_BW, OUTPUT_MR, OUTPUT_LAT = -1, 0, 1, 2
START_STATE, SAMPLE_STATE, STOP_SAMPLE_STATE, END_STATE = range(4)
DISABLE_RATE_LIMIT, SW_RATE_LIMIT, HW_RATE_LIMIT, PP_RATE_LIMIT = range(4)
MEGA_BYTE_PS, GIGA_BIT_PS, PACKET_PS = range(3)

DEF_PORT = 18515
DEF_IB_PORT, DEF_IB_PORT2 = 1, 2
DEF_SIZE_BW, DEF_SIZE_LAT, DEF_SIZE_ATOMIC = 65536, 2, 8
DEF_ITERS, DEF_ITERS_WB = 1000, 5000
DEF_TX_BW, DEF_TX_LAT = 128, 1
DEF_QP_TIME = 14
DEF_RX_RDMA, DEF_RX_SEND = 1, 512
DEF_CQ_MOD = 100
DEF_DURATION = 5
DEF_INIT_MARGIN = -1
DEF_INLINE = -1
DEF_TOS = -1
DEF_HOP_LIMIT = 64              # not in the stored source; perftest's default hop limit
DEF_RETRY_COUNT = 7
DEF_CACHE_LINE_SIZE = 64
DEF_PAGE_SIZE = 4096
DEF_QKEY = 0x11111111
MAX_SIZE = 8388608
MIN_ITER, MAX_ITER = 5, 100000000
MIN_TX, MAX_TX = 1, 15000
MAX_SL = 15
MIN_GID_IX, MAX_GID_IX = 0, 64
MIN_QP_NUM, MAX_QP_NUM = 1, 16384
MIN_RX, MAX_RX = 1, 16384
UC_MAX_RX = 16000
# Not in the stored source (perftest_parameters.h): an SRQ of this many
# receives holds every message of a short UC/UD run, so the lossy transports
# drop nothing while the receiver re-posts.
MIN_SRQ_UD_RX_DEPTH = 1024           # above DEF_RX_SEND, or the next rule would undo it
MIN_CQ_MOD, MAX_CQ_MOD = 1, 1024
MAX_INLINE, MAX_INLINE_UD = 912, 884
MIN_EQ_NUM, MAX_EQ_NUM = 0, 2048
MIN_TOS, MAX_TOS = 0, 255
MIN_HOP_LIMIT, MAX_HOP_LIMIT = 0, 255
MIN_IB_PORT = 1
MSG_SIZE_CQ_MOD_LIMIT = 8192
DISABLED_CQ_MOD_VALUE = 1
UINT_MAX = 0xFFFFFFFF
MTU_FIX = 7
UD_ADDITION = 40
DEFAULT_JSON_FILE_NAME = "perftest_out.json"

RESULT_LINE = "-" * 87 + "\n"

OPTSTRING = "w:y:p:d:i:m:s:n:t:u:S:x:c:q:I:o:M:r:Q:A:l:D:f:B:T:L:E:J:j:K:k:X:W:aFegzRvhbNVCHUOZP"

# long options: (name, has_arg, value); a value starting with "--" is a
# ``.flag`` option (getopt_long returns 0 for those in C).
LONG_OPTIONS = (
    ("port", 1, "p"), ("ib-dev", 1, "d"), ("ib-port", 1, "i"), ("mtu", 1, "m"), ("size", 1, "s"),
    ("iters", 1, "n"), ("tx-depth", 1, "t"), ("qp-timeout", 1, "u"), ("sl", 1, "S"), ("gid-index", 1, "x"),
    ("all", 0, "a"), ("CPU-freq", 0, "F"), ("connection", 1, "c"), ("qp", 1, "q"), ("events", 0, "e"),
    ("vector", 1, "X"), ("inline_size", 1, "I"), ("outs", 1, "o"), ("mcg", 0, "g"), ("comm_rdma_cm", 0, "z"),
    ("rdma_cm", 0, "R"), ("tos", 1, "T"), ("hop_limit", 1, "L"), ("help", 0, "h"), ("MGID", 1, "M"),
    ("rx-depth", 1, "r"), ("bidirectional", 0, "b"), ("cq-mod", 1, "Q"), ("noPeak", 0, "N"),
    ("version", 0, "V"), ("report-cycles", 0, "C"), ("report-histogrm", 0, "H"), ("report-unsorted", 0, "U"),
    ("atomic_type", 1, "A"), ("dualport", 0, "O"), ("post_list", 1, "l"), ("duration", 1, "D"),
    ("margin", 1, "f"), ("source_mac", 1, "B"), ("dest_mac", 1, "E"), ("dest_ip", 1, "J"),
    ("source_ip", 1, "j"), ("dest_port", 1, "K"), ("source_port", 1, "k"), ("ethertype", 1, "Y"),
    ("limit_bw", 1, "w"), ("limit_msgrate", 1, "y"), ("server", 0, "Z"), ("client", 0, "P"),
    ("mac_fwd", 0, "v"), ("use_rss", 0, "G"), ("report-counters", 1, "W"),
) + tuple((n, a, "--" + n) for n, a in (
    ("force-link", 1), ("remote_mac", 1), ("local_mac", 1), ("remote_ip", 1), ("local_ip", 1),
    ("remote_port", 1), ("local_port", 1), ("run_infinitely", 0), ("report_gbits", 0), ("use-srq", 0),
    ("use-null-mr", 0), ("report-both", 0), ("reversed", 0), ("pkey_index", 1), ("tcp", 0),
    ("burst_size", 1), ("typical_pkt_size", 1), ("rate_limit", 1), ("rate_limit_type", 1), ("rate_units", 1),
    ("output", 1), ("cpu_util", 0), ("out_json", 0), ("out_json_file", 1), ("latency_gap", 1),
    ("flow_label", 1), ("retry_count", 1), ("dont_xchg_versions", 0), ("payload_file_path", 1),
    ("use_cuda", 1), ("use_cuda_bus_id", 1), ("use_cuda_dmabuf", 0), ("use_rocm", 1), ("use_neuron", 1),
    ("use_neuron_dmabuf", 0), ("use_hl", 1), ("use_mlu", 1), ("mmap", 1), ("mmap-offset", 1), ("ipv6", 0),
    ("ipv6-addr", 0), ("report-per-port", 0), ("odp", 0), ("use_hugepages", 0), ("use_old_post_send", 0),
    ("promiscuous", 0), ("raw_mcast", 0), ("mr_per_qp", 0), ("dlid", 1), ("tclass", 1), ("wait_destroy", 1),
    ("flows", 1), ("flows_burst", 1), ("reply_every", 1), ("perform_warm_up", 0), ("vlan_en", 0),
    ("vlan_pcp", 1), ("recv_post_list", 1), ("bind_source_ip", 1), ("write_with_imm", 0),
    ("connectionless", 0),
))
_LONG_INDEX = {o[0]: i for i, o in enumerate(LONG_OPTIONS)}

# Options of perftest's table that have nothing to act on here.  Each is
# parsed like perftest parses it (so its errors are perftest's), then
# refused: the tool prints why and exits 1.
WHY_RAW_ETH = ("belongs to the raw_ethernet_* tests, which softrdma does not provide (softrdma devices have no raw"
               " packet QPs)")
UNSUPPORTED = {
    "W": ("-W/--report-counters: perftest's counter reader is not built into softrdma's perftest; read"
          " RUN/sys/class/infiniband/DEV/ports/1/hw_counters instead"),
    "--use-null-mr": "--use-null-mr: softrdma has no null MR (ibv_alloc_null_mr is EOPNOTSUPP)",
    "--write_with_imm": "--write_with_imm: RDMA WRITE with immediate is not in softrdma's perftest yet",
    "--recv_post_list": "--recv_post_list: receive post lists are not in softrdma's perftest yet",
}
for _o in ("B", "E", "J", "j", "K", "k", "Y", "Z", "P", "v"):
    UNSUPPORTED[_o] = f"-{_o}: {WHY_RAW_ETH}"
for _o in ("--remote_mac", "--local_mac", "--remote_ip", "--local_ip", "--remote_port", "--local_port", "--tcp",
           "--promiscuous", "--raw_mcast", "--flows", "--flows_burst", "--reply_every", "--vlan_en", "--vlan_pcp"):
    UNSUPPORTED[_o] = f"{_o}: {WHY_RAW_ETH}"


# --------------------------------------------------------------------------- the parameters
@dataclass
class ReportFlags:
    unsorted: bool = False
    histogram: bool = False
    cycles: bool = False


@dataclass
class Params:
    """struct perftest_parameters (the fields softrdma's tools use)."""
    verb: int
    tst: int
    prog: str = "ib_write_bw"
    version: str = VERSION
    rem_version: str = ""
    port: int = DEF_PORT
    ib_devname: str | None = None
    servername: str | None = None
    ib_port: int = DEF_IB_PORT
    mtu: int = 0
    curr_mtu: int = 0
    size: int = DEF_SIZE_BW
    req_size: bool = False
    iters: int = DEF_ITERS
    tx_depth: int = DEF_TX_BW
    qp_timeout: int = DEF_QP_TIME
    sl: int = 0
    gid_index: int = -1
    use_gid_user: bool = False
    connection_type: int = RC
    num_of_qps: int = 1
    use_event: bool = False
    eq_num: int = 0
    use_eq_num: bool = False
    inline_size: int = DEF_INLINE
    out_reads: int = 0
    rx_depth: int = DEF_RX_SEND
    duplex: bool = False
    noPeak: bool = False
    cq_mod: int = DEF_CQ_MOD
    req_cq_mod: bool = False
    post_list: int = 1
    recv_post_list: int = 1
    use_srq: bool = False
    srq_exists: bool = False
    duration: int = DEF_DURATION
    margin: int = DEF_INIT_MARGIN
    test_type: int = ITERATIONS
    test_method: int = RUN_REGULAR
    atomicType: int = FETCH_AND_ADD
    report_fmt: int = MBS
    r_flag: ReportFlags = field(default_factory=ReportFlags)
    output: int = FULL_VERBOSITY
    cpu_util: bool = False
    out_json: bool = False
    out_json_file_name: str = DEFAULT_JSON_FILE_NAME
    cpu_freq_f: bool = False
    machine: int = SERVER
    link_type: int = -2                 # LINK_UNSPEC
    transport_type: int = 0             # IBV_TRANSPORT_IB
    dont_xchg_versions: bool = False
    ipv6: bool = False
    ai_family_v6: bool = False
    source_ip: str | None = None
    use_rdma_cm: bool = False
    work_rdma_cm: bool = False
    tos: int = DEF_TOS
    hop_limit: int = DEF_HOP_LIMIT
    traffic_class: int = 0
    flow_label: int = 0
    pkey_index: int = 0
    latency_gap: int = 0
    retry_count: int = DEF_RETRY_COUNT
    is_reversed: bool = False
    report_both: bool = False
    is_limit_bw: bool = False
    limit_bw: float = 0.0
    is_limit_msgrate: bool = False
    limit_msgrate: float = 0.0
    is_bw_limit_passed: bool = False
    is_msgrate_limit_passed: bool = False
    dualport: bool = False
    report_per_port: bool = False
    mr_per_qp: bool = False
    wait_destroy: int = 0
    perform_warm_up: bool = False
    use_old_post_send: bool = True      # see the module docstring of perftest/__init__
    dlid: int = 0
    rate_limit: float = 0.0
    rate_limit_str: str | None = None
    rate_limit_type: int = DISABLE_RATE_LIMIT
    rate_units: int = GIGA_BIT_PS
    burst_size: int = 0
    typical_pkt_size: int = 0
    payload_file: str | None = None
    use_odp: bool = False                   # --odp: MRs with IBV_ACCESS_ON_DEMAND
    use_hugepages: bool = False             # --use_hugepages: the buffer in a SHM_HUGETLB segment
    mmap_file: str | None = None            # --mmap: the buffer is this file, mapped shared
    mmap_offset: int = 0
    cycle_buffer: int = DEF_PAGE_SIZE
    cache_line_size: int = DEF_CACHE_LINE_SIZE
    connectionless: bool = False
    use_mcg: bool = False
    user_mgid: str | None = None            # -M: the multicast group's GID (set_multicast_gid)
    cpu_util_enable: bool = False
    cpu_stats: list = field(default_factory=lambda: [(0, 0), (0, 0)])
    buff_size: int = 0
    check_alive_exited: bool = False
    fill_count: int = 0
    unsupported: list = field(default_factory=list)


def _cache_line_size() -> int:
    """get_cache_line_size(): sysconf, then sysfs, then 64."""
    try:
        size = os.sysconf("SC_LEVEL1_DCACHE_LINESIZE")
    except (ValueError, OSError):
        size = 0
    if size == 0:
        try:
            with open("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size") as f:
                size = int(f.read(10).strip() or 0)
        except (OSError, ValueError):
            return DEF_CACHE_LINE_SIZE
    return size if size > 0 else DEF_CACHE_LINE_SIZE


def init_params(verb: int, tst: int, prog: str) -> Params:
    """init_perftest_params()."""
    p = Params(verb=verb, tst=tst, prog=prog)
    p.size = DEF_SIZE_BW if tst == BW else DEF_SIZE_LAT
    p.tx_depth = DEF_TX_BW if tst == BW else DEF_TX_LAT
    p.rx_depth = DEF_RX_SEND if verb in (SEND, WRITE, WRITE_IMM) else DEF_RX_RDMA
    p.iters = DEF_ITERS_WB if (tst == BW and verb in (WRITE, WRITE_IMM)) else DEF_ITERS
    if verb == ATOMIC:
        p.atomicType = FETCH_AND_ADD
        p.size = DEF_SIZE_ATOMIC
    p.cache_line_size = _cache_line_size()
    p.cycle_buffer = os.sysconf("SC_PAGESIZE") or DEF_PAGE_SIZE
    return p


# --------------------------------------------------------------------------- usage()
def usage(argv0: str, verb: int, tst: int) -> str:
    """usage() for connection_type != RawEth, as the build described above prints it."""
    o = ["Usage:\n", f"  {argv0}            start a server and wait for connection\n",
         f"  {argv0} <host>     connect to server at <host>\n", "\n", "Options:\n"]
    if verb != ATOMIC:
        o.append("  -a, --all  Run sizes from 2 till 2^23\n")
    if verb == ATOMIC:
        o.append("  -A, --atomic_type=<type>  type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD}"
                 " (default FETCH_AND_ADD)\n")
    if tst == BW:
        o.append("  -b, --bidirectional  Measure bidirectional bandwidth (default unidirectional)\n")
    if verb == SEND:
        o.append("  -c, --connection=<RC/XRC/UC/UD/DC/SRD>  Connection type RC/XRC/UC/UD/DC/SRD (default RC)\n")
    elif verb in (WRITE, WRITE_IMM):
        o.append("  -c, --connection=<RC/XRC/UC/DC>  Connection type RC/XRC/UC/DC (default RC)\n")
    else:
        o.append("  -c, --connection=<RC/XRC/DC>  Connection type RC/XRC/DC (default RC)\n")
    if tst == LAT:
        o.append("  -C, --report-cycles  report times in cpu cycle units (default microseconds)\n")
    o.append("  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)\n")
    o.append("  -D, --duration  Run test for a customized period of seconds.\n")
    if verb not in (WRITE, WRITE_IMM):
        o.append("  -e, --events  Sleep on CQ events (default poll)\n")
        o.append("  -X, --vector=<completion vector>  Set <completion vector> used for events\n")
    o.append("  -f, --margin  measure results within margins. (default=2sec)\n")
    o.append("  -F, --CPU-freq  Do not show a warning even if cpufreq_ondemand module is loaded, and cpu-freq is"
             " not on max.\n")
    if verb == SEND:
        o.append("  -g, --mcg  Send messages to multicast group with 1 QP attached to it.\n")
        o.append("         When there is no multicast gid specified, a default IPv6 typed gid will be used.\n")
    o.append("  -h, --help  Show this help screen.\n")
    if tst == LAT:
        o.append("  -H, --report-histogram  Print out all results (default print summary only)\n")
    o.append(f"  -i, --ib-port=<port>  Use port <port> of IB device (default {DEF_IB_PORT})\n")
    if verb not in (READ, ATOMIC):
        o.append("  -I, --inline_size=<size>  Max size of message to be sent in inline\n")
    if tst == BW:
        o.append("  -l, --post_list=<list size>\n")
        o.append(" Post list of send WQEs of <list size> size (instead of single post)\n")
        o.append("      --recv_post_list=<list size> Post list of receive WQEs of <list size> size (instead of"
                 " single post)\n")
    o.append(f"  -L, --hop_limit=<hop_limit>  Set hop limit value (ttl for IPv4 RawEth QP). Values 0-255"
             f" (default {DEF_HOP_LIMIT})\n")
    o.append("  -m, --mtu=<mtu>  MTU size : 256 - 4096 (default port mtu)\n")
    if verb == SEND:
        o.append("  -M, --MGID=<multicast_gid>  In multicast, uses <multicast_gid> as the group MGID.\n")
        if tst == BW:
            o.append("      --connectionless  Open a connectionless server instance for multicast traffic.\n")
    o.append(f"  -n, --iters=<iters>  Number of exchanges (at least {MIN_ITER}, default "
             f"{DEF_ITERS_WB if (verb in (WRITE, WRITE_IMM) and tst == BW) else DEF_ITERS})\n")
    if tst == BW:
        o.append("  -N, --noPeak Cancel peak-bw calculation (default with peak up to iters=20000)\n")
    if verb in (READ, ATOMIC):
        o.append("  -o, --outs=<num>  num of outstanding read/atom(default max of device)\n")
    if tst == BW:
        o.append("  -O, --dualport  Run test in dual-port mode.\n")
    o.append(f"  -p, --port=<port>  Listen on/connect to port <port> (default {DEF_PORT})\n")
    if tst == BW:
        o.append("  -q, --qp=<num of qp's>  Num of qp's(default 1)\n")
        o.append("  -Q, --cq-mod  Generate Cqe only after <--cq-mod> completion\n")
    if verb in (SEND, WRITE_IMM):
        o.append(f"  -r, --rx-depth=<dep>  Rx queue size (default {DEF_RX_SEND}). If using srq, rx-depth controls"
                 " max-wr size of the srq\n")
    o.append("  -R, --rdma_cm  Connect QPs with rdma_cm and run test on those QPs\n")
    if verb != ATOMIC:
        o.append(f"  -s, --size=<size>  Size of message to exchange (default "
                 f"{DEF_SIZE_LAT if tst == LAT else DEF_SIZE_BW})\n")
    o.append("  -S, --sl=<sl>  SL (default 0)\n")
    if tst == BW:
        o.append(f"  -t, --tx-depth=<dep>  Size of tx queue (default {DEF_TX_BW})\n")
    o.append("  -T, --tos=<tos value>  Set <tos_value> to RDMA-CM QPs. available only with -R flag. values 0-256"
             " (default off)\n")
    o.append(f"  -u, --qp-timeout=<timeout>  QP timeout, timeout value is 4 usec * 2 ^(timeout), default"
             f" {DEF_QP_TIME}\n")
    if tst == LAT:
        o.append("  -U, --report-unsorted  (implies -H) print out unsorted results (default sorted)\n")
    o.append("  -V, --version  Display version number\n")
    if tst == BW:
        o.append("  -w, --limit_bw=<value>  Set verifier limit for bandwidth\n")
    o.append("  -W, --report-counters=<list of counter names>  Report performance counter change (example:"
             " \"counters/port_xmit_data,hw_counters/out_of_buffer\")\n")
    o.append("  -x, --gid-index=<index>  Test uses GID with GID index\n")
    if tst == BW:
        o.append("  -y, --limit_msgrate=<value>  Set verifier limit for Msg Rate\n")
    o.append("  -z, --comm_rdma_cm  Communicate with rdma_cm module to exchange data - use regular QPs\n")
    o.append("\n")
    o.append("      --out_json  Save the report in a json file\n")
    o.append(f"      --out_json_file=<file>  Name of the report json file. (Default: {DEFAULT_JSON_FILE_NAME} in the"
             " working directory) \n")
    o.append("      --cpu_util  Show CPU Utilization in report, valid only in Duration mode \n")
    o.append("      --dlid  Set a Destination LID instead of getting it from the other side.\n")
    o.append("      --dont_xchg_versions  Do not exchange versions and MTU with other side \n")
    o.append("      --force-link=<value>  Force the link(s) to a specific type: IB or Ethernet.\n")
    if verb == SEND:
        o.append("      --use-srq  Use a Shared Receive Queue. --rx-depth controls max-wr size of the SRQ \n")
    o.append("      --ipv6  Use IPv6 GID. Default is IPv4\n")
    o.append("      --ipv6-addr=<IPv6>  Use IPv6 address for parameters negotiation. Default is IPv4\n")
    o.append("      --bind_source_ip  Source IP of the interface used for connection establishment. By default"
             " taken from routing table.\n")
    if tst == LAT:
        o.append("      --latency_gap=<delay_time>  delay time between each post send\n")
    o.append("      --mmap=file  Use an mmap'd file as the buffer for testing P2P transfers.\n")
    o.append("      --mmap-offset=<offset>  Use an mmap'd file as the buffer for testing P2P transfers.\n")
    if tst == BW:
        o.append("      --mr_per_qp  Create memory region for each qp.\n")
    o.append("      --odp  Use On Demand Paging instead of Memory Registration.\n")     # (HAVE_EX_ODP)
    o.append("      --output=<units> Set verbosity output level: bandwidth , message_rate, latency \n")
    if not (verb in (WRITE, WRITE_IMM) and tst == LAT):
        o.append("      --payload_file_path=<payload_txt_file_path> Set the payload by passing a txt file"
                 " containing a pattern in the next form(little endian): '0xaaaaaaaa, 0xbbbbbbbb, ...' .\n")
    o.append(" Latency measurement is Average calculation \n")
    o.append("      --use_old_post_send Use old post send flow (ibv_post_send).\n")
    o.append("      --perform_warm_up Perform some iterations before start measuring in order to warming-up"
             " memory cache, valid in Atomic, Read and Write BW tests\n")
    o.append("      --pkey_index=<pkey index> PKey index to use for QP\n")
    if tst == BW:
        o.append("      --report-both  Report RX & TX results separately on Bidirectional BW tests\n")
        o.append("      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)\n")
        o.append("        Note: MiB=2^20 byte, while Gb=10^9 bits. Use these formulas for conversion:\n")
        o.append("        Factor=10^9/(2^20*8)=119.2; MiB=Gb_result * factor; Gb=MiB_result / factor\n")
        o.append("      --report-per-port  Report BW data on both ports when running Dualport and Duration mode\n")
        o.append("      --reversed  Reverse traffic direction - Server send to client\n")
        o.append("      --run_infinitely  Run test forever, print results every <duration> seconds\n")
    o.append("      --retry_count=<value>  Set retry count value in rdma_cm mode\n")
    o.append("      --tclass=<value>  Set the Traffic Class in GRH (if GRH is in use)\n")
    o.append("      --flow_label=<value>  Set the flow_label in GRH (if GRH is in use)\n")
    o.append("      --use_hugepages  Use Hugepages instead of contig, memalign allocations.\n")
    if verb in (WRITE, WRITE_IMM, READ):
        o.append("      --use-null-mr  Allocate a null memory region for the client with ibv_alloc_null_mr.\n")
    if tst == BW:
        o.append("      --wait_destroy=<seconds>  Wait <seconds> before destroying allocated resources"
                 " (QP/CQ/PD/MR..)\n")
        o.append("\n Rate Limiter:\n")
        o.append("      --burst_size=<size> Set the amount of messages to send in a burst when using rate limiter\n")
        o.append("      --typical_pkt_size=<bytes> Set the size of packet to send in a burst. Only supports PP rate"
                 " limiter\n")
        o.append("      --rate_limit=<rate> Set the maximum rate of sent packages. default unit is [Gbps]. use"
                 " --rate_units to change that.\n")
        o.append("      --rate_units=<units> [Mgp] Set the units for rate limit to MiBps (M), Gbps (g) or pps (p)."
                 " default is Gbps (g).\n")
        o.append("        Note (1): pps not supported with HW limit.\n")
        o.append("        Note (2): When using PP rate_units is forced to Kbps.\n")
        o.append("      --rate_limit_type=<type> [HW/SW/PP] Limit the QP's by HW, PP or by SW. Disabled by default."
                 " When rate_limit is not specified HW limit is Default.\n")
        o.append("        Note: in Latency under load test SW rate limit is forced\n")
    if tst in (LAT, BW) and verb == WRITE:
        o.append("      --write_with_imm  Use write-with-immediate verb instead of write\n")
    o.append("\n")
    return "".join(o)


# --------------------------------------------------------------------------- C value parsing
class _Fail(Exception):
    """parser() returned FAILURE (the message is already printed)."""


class _Exit(Exception):
    """exit(code) from inside the parser (perftest calls exit(1) there)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _err(msg: str) -> None:
    sys.stderr.write(msg)


def _out(msg: str) -> None:
    sys.stdout.write(msg)


_CASTS = {
    "int": c_int,
    "uint8_t": lambda v: v & 0xFF,
    "uint16_t": lambda v: v & 0xFFFF,
    "uint32_t": lambda v: v & 0xFFFFFFFF,
    "uint64_t": lambda v: v & 0xFFFFFFFFFFFFFFFF,
    "unsigned long": lambda v: v & 0xFFFFFFFFFFFFFFFF,
}


def _is_c_integer(s: str) -> bool:
    """strtol(optarg, &end, 0) consumed the whole string (*end == '\\0'): at
    least one digit and nothing after the digits."""
    t = s.lstrip(" \t\n\v\f\r")
    if t[:1] in "+-":
        t = t[1:]
    if t[:2].lower() == "0x" and len(t) > 2:
        return all(c in "0123456789abcdefABCDEF" for c in t[2:])
    if t[:1] == "0":
        return all(c in "01234567" for c in t)
    return t != "" and t.isdigit() and t.isascii()


def check_value(optarg: str, ctype: str, name: str, unsigned: bool = False) -> int:
    """CHECK_VALUE: the C conversion into the field, FAILURE if the argument
    is not entirely an integer."""
    if not _is_c_integer(optarg):
        _err(f" {name} argument {optarg} should be {ctype}\n")
        raise _Fail
    v = strtoul(optarg) if unsigned else strtol(optarg)
    return _CASTS[ctype](v)


def check_value_in_range(optarg: str, ctype: str, minv: int, maxv: int, name: str, unsigned: bool = False) -> int:
    v = check_value(optarg, ctype, name, unsigned)
    if v < minv or v > maxv:
        _err(f" {name} should be between {minv} and {maxv}\n")
        raise _Fail
    return v


def check_value_positive(optarg: str, ctype: str, name: str) -> int:
    v = check_value(optarg, ctype, name)
    if v <= 0:
        _err(f" {name} must be positive\n")
        raise _Fail
    return v


def check_value_non_negative(optarg: str, ctype: str, name: str) -> int:
    v = check_value(optarg, ctype, name)
    if v < 0:
        _err(f" {name} must be non-negative {ctype}\n")
        raise _Fail
    return v


def _strtof(s: str) -> float:
    """strtof(optarg, NULL): the longest leading float, 0 if none."""
    t = s.lstrip(" \t\n\v\f\r")
    best = 0.0
    for end in range(len(t), 0, -1):
        try:
            best = float(t[:end])
            break
        except ValueError:
            continue
    return best


def _atof(s: str) -> float:
    return _strtof(s)


# --------------------------------------------------------------------------- parser()
def _change_conn_type(p: Params, optarg: str) -> None:
    """change_conn_type()."""
    if optarg == "RC":
        p.connection_type = RC
    elif optarg == "UC":
        p.connection_type = UC
        if p.verb in (READ, ATOMIC):
            _err(" UC connection not possible in READ/ATOMIC verbs\n")
            raise _Exit(1)
    elif optarg == "UD":
        p.connection_type = UD
        if p.verb != SEND:
            _err(" UD connection only possible in SEND verb\n")
            raise _Exit(1)
    elif optarg == "RawEth":
        p.connection_type = RAWETH
        p.unsupported.append(f"-c RawEth: {WHY_RAW_ETH}")
    elif optarg == "XRC":
        _err(" XRC not detected in libibverbs\n")
        raise _Exit(1)
    elif optarg == "DC":
        _err(" DC not supported, mlx5dv.h is needed\n")
        raise _Exit(1)
    elif optarg == "SRD":
        _err(" SRD not detected in libibverbs\n")
        raise _Exit(1)
    else:
        _err(" Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}\n")
        raise _Exit(1)


def _short_index(c: str) -> int:
    return ord(c) - ord("A") if "A" <= c <= "Z" else ord(c) - (ord("A") + 6)


def parse(argv: list[str], prog: str, verb: int, tst: int) -> Params | int:
    """parser() + the tool main's reaction to its result: a Params, or the
    exit code (1 for errors, -V and -h, as perftest's mains return)."""
    p = init_params(verb, tst, prog)
    try:
        _parse(p, argv, prog)
    except _Fail:
        _err(" Parser function exited with Error\n")
        return 1
    except _Exit as e:
        return e.code
    except _Help:
        return 1
    return p


class _Help(Exception):
    pass


def _parse(p: Params, argv: list[str], prog: str) -> None:
    seen: set = set()
    getopt = GetoptLong(argv, prog, OPTSTRING, LONG_OPTIONS)
    for c, optarg in getopt:
        if c.startswith("--"):
            name = c[2:]
            if name in seen:
                _err(f" Duplicated argument: {name} \n")
                raise _Fail
            seen.add(name)
            _long_flag(p, name, optarg)
            continue
        if c not in ("?", ":"):
            key = _short_index(c)
            if key in seen:
                _err(f" Duplicated argument: -{c} \n")
                raise _Fail
            seen.add(key)
        _short(p, c, optarg, prog)
    operands = getopt.operands
    if len(operands) == 1:
        p.servername = operands[0]
    elif len(operands) > 1:
        _err(" Invalid Command line. Please check command rerun \n")
        raise _Exit(1)
    p.machine = CLIENT if p.servername is not None else SERVER
    if p.is_reversed:
        p.machine = SERVER if p.machine == CLIENT else CLIENT
    force_dependencies(p)


def _short(p: Params, c: str, optarg: str | None, prog: str) -> None:
    v, t = p.verb, p.tst
    if c == "p":
        p.port = check_value(optarg, "int", "Port")
    elif c == "d":
        p.ib_devname = optarg
    elif c == "i":
        p.ib_port = check_value(optarg, "uint8_t", "IB Port")
        if p.ib_port < MIN_IB_PORT:
            _err(f"IB Port can't be less than {MIN_IB_PORT}\n")
            raise _Fail
    elif c == "m":
        p.mtu = check_value(optarg, "int", "MTU")
    elif c == "n":
        p.iters = check_value_in_range(optarg, "uint64_t", MIN_ITER, MAX_ITER, "Iteration num", unsigned=True)
    elif c == "t":
        p.tx_depth = check_value_in_range(optarg, "int", MIN_TX, MAX_TX, "Tx depth")
    elif c == "T":
        p.tos = check_value_in_range(optarg, "int", MIN_TOS, MAX_TOS, "TOS")
    elif c == "L":
        p.hop_limit = check_value_in_range(optarg, "int", MIN_HOP_LIMIT, MAX_HOP_LIMIT, "Hop Limit")
    elif c == "u":
        p.qp_timeout = check_value(optarg, "uint8_t", "QP Timeout")
    elif c == "S":
        p.sl = check_value(optarg, "uint8_t", "Service Level")
        if p.sl > MAX_SL:
            _err(f" Only {MAX_SL} Service levels\n")
            raise _Fail
    elif c == "x":
        p.gid_index = check_value_in_range(optarg, "uint8_t", MIN_GID_IX, MAX_GID_IX, "Gid index", unsigned=True)
        p.use_gid_user = True
    elif c == "c":
        _change_conn_type(p, optarg)
    elif c == "q":
        if t != BW:
            _err(" Multiple QPs only available on bw tests\n")
            raise _Fail
        p.num_of_qps = check_value_in_range(optarg, "int", MIN_QP_NUM, MAX_QP_NUM, "num of Qps")
    elif c == "I":
        p.inline_size = check_value_in_range(optarg, "int", 0, MAX_INLINE, "Max inline")
        if v in (READ, ATOMIC):
            _err(" Inline feature not available on READ/Atomic verbs\n")
            raise _Fail
    elif c == "o":
        p.out_reads = check_value(optarg, "int", "Outstanding Reads")
        if v not in (READ, ATOMIC):
            _err(" Setting Outstanding reads only available on READ verb\n")
            raise _Fail
    elif c == "M":
        p.user_mgid = optarg
    elif c == "r":
        p.rx_depth = check_value_in_range(optarg, "int", MIN_RX, MAX_RX, " Rx depth")
        if v not in (SEND, WRITE, WRITE_IMM) and p.rx_depth > DEF_RX_RDMA:
            _err(" On RDMA verbs rx depth can be only 1\n")
            raise _Fail
    elif c == "Q":
        p.cq_mod = check_value_in_range(optarg, "int", MIN_CQ_MOD, MAX_CQ_MOD, "CQ moderation")
        p.req_cq_mod = True
    elif c == "A":
        if v != ATOMIC:
            _err(" You are not running the atomic_lat/bw test!\n")
            _err(" To change the atomic action type, you must run one of the atomic tests\n")
            raise _Fail
        if optarg == ATOMIC_TYPES[0]:
            p.atomicType = CMP_AND_SWAP
        elif optarg == ATOMIC_TYPES[1]:
            p.atomicType = FETCH_AND_ADD
        else:
            _err(" Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}\n")
            raise _Exit(1)
    elif c == "l":
        p.post_list = check_value(optarg, "int", "Send Post List size")
    elif c == "D":
        p.duration = check_value_positive(optarg, "int", "Duration period")
        p.test_type = DURATION
    elif c == "f":
        p.margin = check_value_non_negative(optarg, "int", "Margin")
    elif c == "O":
        p.ib_port, p.dualport = DEF_IB_PORT, True
    elif c == "a":
        p.test_method = RUN_ALL
    elif c == "F":
        p.cpu_freq_f = True
    elif c == "V":
        _out(f"Version: {p.version}\n")
        raise _Exit(1)
    elif c == "h":
        _out(usage(prog, v, t))
        raise _Help
    elif c in ("z", "R", "g", "W"):
        if c == "W":
            pass                                    # counters_alloc() would parse the list; refused below
        if c == "g" and v != SEND:
            _err(" MultiCast feature only available on SEND verb\n")
            raise _Fail
        if c == "R":
            p.work_rdma_cm = True
        if c == "z":
            p.use_rdma_cm = True
        if c == "g":
            p.use_mcg = True
        if c == "W":
            p.unsupported.append(UNSUPPORTED[c])
    elif c == "s":
        arg = optarg
        factor = 1
        if arg[-1:] == "K":
            arg, factor = arg[:-1], 1024
        elif arg[-1:] == "M":
            arg, factor = arg[:-1], 1024 * 1024
        p.size = (strtol(arg) * factor) & 0xFFFFFFFFFFFFFFFF
        p.req_size = True
        if p.size < 1 or p.size > UINT_MAX // 2:
            _err(f" Message Size should be between 1 and {UINT_MAX // 2}\n")
            raise _Fail
    elif c == "e":
        p.use_event = True
        if v in (WRITE, WRITE_IMM):
            _err(" Events feature not available on WRITE verb\n")
            raise _Fail
    elif c == "X":
        if v in (WRITE, WRITE_IMM):
            _err(" Events feature not available on WRITE verb\n")
            raise _Fail
        p.use_eq_num = True
        p.eq_num = check_value_in_range(optarg, "int", MIN_EQ_NUM, MAX_EQ_NUM, "EQN")
    elif c == "b":
        p.duplex = True
        if t == LAT:
            _err(" Bidirectional is only available in BW test\n")
            raise _Fail
    elif c == "N":
        p.noPeak = True
        if t == LAT:
            _err(" NoPeak only valid for BW tests\n")
            raise _Fail
    elif c == "C":
        if t != LAT:
            _err(" Available only on Latency tests\n")
            raise _Fail
        p.r_flag.cycles = True
    elif c == "H":
        if t == BW:
            _err(" Available only on Latency tests\n")
            raise _Fail
        p.r_flag.histogram = True
    elif c == "U":
        if t == BW:
            _err(" is Available only on Latency tests\n")
            raise _Fail
        p.r_flag.unsorted = True
    elif c in ("B", "E", "J", "j", "Y", "P", "Z", "v"):
        p.unsupported.append(UNSUPPORTED[c])
    elif c in ("K", "k"):
        check_value(optarg, "int", "Server Port" if c == "K" else "Client Port")
        p.unsupported.append(UNSUPPORTED[c])
    elif c == "w":
        p.is_limit_bw = True
        p.limit_bw = _strtof(optarg)
        if p.limit_bw < 0:
            _err(" Invalid Minimum BW Limit\n")
            raise _Fail
    elif c == "y":
        p.is_limit_msgrate = True
        p.limit_msgrate = _strtof(optarg)
        if p.limit_msgrate < 0:
            _err(" Invalid Minimum msgRate Limit\n")
            raise _Fail
    elif c == "G":
        _err("RSS isn't supported\n")
        raise _Fail
    else:                                           # '?' / ':' after getopt's own message
        _err(" Invalid Command or flag.\n")
        _err(" Please check command line and run again.\n\n")
        _out(usage(prog, v, t))
        raise _Fail


_MEMORY_TYPES = ("use_cuda", "use_cuda_bus_id", "use_cuda_dmabuf", "use_rocm", "use_neuron", "use_neuron_dmabuf",
                 "use_hl", "use_mlu")


def _long_flag(p: Params, name: str, optarg: str | None) -> None:
    """The ``case 0:`` branch of parser(), one flag option at a time."""
    key = "--" + name
    if name == "pkey_index":
        p.pkey_index = check_value(optarg, "int", "Pkey index")
    elif name == "rate_limit":
        p.rate_limit_str = optarg
        p.rate_limit = _atof(optarg)
        if p.rate_limit <= 0:
            _err(" Rate limit must be non-negative floating point number\n")
            raise _Fail
        if p.rate_limit_type == DISABLE_RATE_LIMIT:
            p.rate_limit_type = HW_RATE_LIMIT
    elif name == "burst_size":
        p.burst_size = check_value_non_negative(optarg, "int", "Burst size")
    elif name == "typical_pkt_size":
        p.typical_pkt_size = check_value_in_range(optarg, "int", 0, 0xFFFF, "Typical pkt size")
    elif name == "rate_units":
        units = {"M": MEGA_BYTE_PS, "g": GIGA_BIT_PS, "p": PACKET_PS}
        if optarg not in units:
            _err(" Invalid rate limit units. Please use M,g or p\n")
            raise _Fail
        p.rate_units = units[optarg]
    elif name == "rate_limit_type":
        types = {"SW": SW_RATE_LIMIT, "HW": HW_RATE_LIMIT, "PP": PP_RATE_LIMIT}
        if optarg not in types:
            _err(" Invalid rate limit type flag. Please use HW, SW or PP.\n")
            raise _Fail
        p.rate_limit_type = types[optarg]
    elif name == "output":
        levels = {"bandwidth": OUTPUT_BW, "message_rate": OUTPUT_MR, "latency": OUTPUT_LAT}
        if optarg not in levels:
            _err(" Invalid verbosity level output flag. Please use bandwidth, latency, message_rate\n")
            raise _Fail
        p.output = levels[optarg]
    elif name == "latency_gap":
        p.latency_gap = check_value_non_negative(optarg, "int", "Latency gap time")
    elif name in _MEMORY_TYPES:
        # no GPU/accelerator memory back end is built in: perftest's own answer
        _out(" Unsupported memory type\n")
        raise _Fail
    elif name == "flow_label":
        p.flow_label = check_value(optarg, "int", "flow label")
    elif name == "retry_count":
        p.retry_count = check_value_non_negative(optarg, "int", "Retry Count")
    elif name == "out_json_file":
        p.out_json_file_name = optarg
    elif name == "mmap":
        p.mmap_file = optarg                 # (MEMORY_MMAP: tools.perftest.memory)
    elif name == "mmap-offset":
        p.mmap_offset = check_value(optarg, "unsigned long", "mmap offset")
    elif name == "odp":
        p.use_odp = True
    elif name == "use_hugepages":
        p.use_hugepages = True
    elif name == "dlid":
        p.dlid = check_value(optarg, "uint16_t", "dlid")
    elif name == "tclass":
        p.traffic_class = check_value(optarg, "uint16_t", "traffic class") & 0xFF
    elif name == "wait_destroy":
        p.wait_destroy = check_value(optarg, "uint32_t", "wait_destroy")
    elif name in ("flows", "flows_burst"):
        v = check_value(optarg, "uint16_t", "flows" if name == "flows" else "flows burst")
        if v == 0:
            _err("Invalid flows value. Please set a positive number\n" if name == "flows"
                 else "Invalid burst flow value. Please set a positive number\n")
            raise _Fail
        p.unsupported.append(UNSUPPORTED[key])
    elif name == "force-link":
        if optarg[:2].lower() == "ib":
            p.link_type = 1
        elif optarg[:8].lower() == "ethernet":
            p.link_type = 2
        else:
            _err("Invalid link layer value should be IB or ETHERNET.\n")
            raise _Fail
    elif name in ("remote_port", "local_port"):
        check_value(optarg, "int", name.replace("_", " "))
        p.unsupported.append(UNSUPPORTED[key])
    elif name == "reply_every":
        check_value(optarg, "uint32_t", "reply_every")
        p.unsupported.append(UNSUPPORTED[key])
    elif name == "vlan_pcp":
        check_value_in_range(optarg, "uint32_t", 0, 8, "VLAN PCP", unsigned=True)
        p.unsupported.append(UNSUPPORTED[key])
    elif name == "recv_post_list":
        p.recv_post_list = check_value(optarg, "int", "Receive Post List size")
        p.unsupported.append(UNSUPPORTED[key])
    elif name == "bind_source_ip":
        p.source_ip = optarg
    elif name == "payload_file_path":
        p.payload_file = optarg
    elif name == "write_with_imm":
        if p.tst not in (LAT, BW) or p.verb != WRITE:
            _err("Write_with_imm can only be used with write_lat and write_bw tests\n")
            raise _Fail
        p.unsupported.append(UNSUPPORTED[key])
    elif name == "run_infinitely":
        p.test_method = RUN_INFINITELY
    elif name == "use-srq":
        p.use_srq = True
    elif name == "report_gbits":
        p.report_fmt = GBS
    elif name == "dont_xchg_versions":
        p.dont_xchg_versions = True
    elif name == "report-both":
        p.report_both = True
    elif name == "reversed":
        p.is_reversed = True
    elif name == "cpu_util":
        p.cpu_util = True
    elif name == "out_json":
        p.out_json = True
    elif name == "report-per-port":
        p.report_per_port = True
    elif name == "ipv6":
        p.ipv6 = True
    elif name == "ipv6-addr":
        p.ai_family_v6 = True
    elif name == "use_old_post_send":
        p.use_old_post_send = True
    elif name == "mr_per_qp":
        p.mr_per_qp = True
    elif name == "perform_warm_up":
        p.perform_warm_up = True
    elif name == "connectionless":
        p.connectionless = True
    elif key in UNSUPPORTED:
        p.unsupported.append(UNSUPPORTED[key])


def force_dependencies(p: Params) -> None:
    """force_dependecies(): the cross-option rules, in perftest's order."""
    if p.verb == WRITE:
        p.rx_depth = DEF_RX_RDMA
    if p.test_method != RUN_INFINITELY and p.test_type == ITERATIONS:
        if p.tx_depth > p.iters:
            p.tx_depth = p.iters
        if p.verb in (SEND, WRITE_IMM) and p.rx_depth > p.iters:
            p.rx_depth = p.iters
        if p.connection_type in (UD, UC):
            if p.use_srq and p.iters <= MIN_SRQ_UD_RX_DEPTH:
                p.rx_depth = MIN_SRQ_UD_RX_DEPTH
            if p.rx_depth == DEF_RX_SEND:
                p.rx_depth = min(p.iters, UC_MAX_RX)
    if p.size > MSG_SIZE_CQ_MOD_LIMIT and p.connection_type != UD and p.test_method != RUN_ALL \
            and not p.use_event:
        if not p.req_cq_mod:
            p.cq_mod = DISABLED_CQ_MOD_VALUE
        elif p.cq_mod > DISABLED_CQ_MOD_VALUE:
            _out(RESULT_LINE)
            _out("Warning: Large message requested and CQ moderation enabled\n")
            _out("Warning: It can lead to inaccurate results\n")
    if p.cq_mod > p.tx_depth:
        p.cq_mod = p.tx_depth
    if p.verb in (READ, ATOMIC):
        p.inline_size = 0
    if p.test_method == RUN_ALL:
        p.size = MAX_SIZE
    if p.verb == ATOMIC and p.size != DEF_SIZE_ATOMIC:
        _out(RESULT_LINE)
        _out("Message size cannot be changed for Atomic tests \n")
        raise _Exit(1)
    if p.use_srq and p.verb != SEND:
        _out(RESULT_LINE)
        _out(" Using SRQ only avavilible in SEND tests.\n")
        raise _Exit(1)
    if p.connectionless and (p.machine != SERVER or not p.use_mcg or p.tst != BW
                             or p.connection_type != UD or p.test_method != RUN_INFINITELY):
        _out(RESULT_LINE)
        _out(" Using Connectionless server only avavilible in Multicast, UD BW with RUN INFINITELY tests.\n")
        raise _Exit(1)
    if p.use_srq and p.verb == SEND and p.num_of_qps > p.rx_depth:
        _out(RESULT_LINE)
        _out(" Using SRQ depth should be greater than number of QPs.\n")
        raise _Exit(1)
    if p.dualport:
        p.num_of_qps *= 2
        if p.tst != BW:
            _out(" Dual-port mode only supports BW tests.\n")
            raise _Exit(1)
        if p.use_mcg:
            _out(" Dual-port mode not supported in multicast feature\n")
            raise _Exit(1)
    if p.post_list > 1:
        if p.tst == BW:
            if p.test_type == ITERATIONS and p.iters % p.post_list != 0:
                _out(RESULT_LINE)
                _err("Number of iterations must be a multiple of post list size\n")
                raise _Exit(1)
            if not p.req_cq_mod:
                p.cq_mod = p.post_list
                _out(RESULT_LINE)
                _out("Post List requested - CQ moderation will be the size of the post list\n")
            elif p.post_list % p.cq_mod != 0:
                _out(RESULT_LINE)
                _err("Post list size must be a multiple of CQ moderation\n")
                raise _Exit(1)
        else:
            _out(RESULT_LINE)
            _err("Post list is supported in BW tests only\n")
            raise _Exit(1)
    if p.test_type == DURATION:
        p.iters = 0
        if not p.noPeak and p.tst == BW:
            _out(" WARNING: BW peak won't be measured in this run.\n")
        p.noPeak = True
        if p.use_event:
            _out(RESULT_LINE)
            _err("Duration mode doesn't work with events.\n")
            raise _Exit(1)
        if p.test_method == RUN_ALL:
            _out(RESULT_LINE)
            _err("Duration mode currently doesn't support running on all sizes.\n")
            raise _Exit(1)
        if p.cpu_util:
            p.cpu_util_enable = True
    if p.test_type != DURATION and p.cpu_util:
        _out(RESULT_LINE)
        _err(" CPU Utilization works only with Duration mode.\n")
    if p.use_mcg and p.gid_index == -1:
        p.gid_index = 0
    if p.work_rdma_cm:
        if p.connection_type == UC:
            _out(RESULT_LINE)
            _out(" UC is not supported in librdmacm\n")
            raise _Exit(1)
        if p.use_mcg:
            _out(RESULT_LINE)
            _out(" Perftest still doesn't support Multicast with rdma_cm\n")
            raise _Exit(1)
        if p.dualport:
            _out(RESULT_LINE)
            _out(" Perftest still doesn't support Dual Port with rdma_cm\n")
            raise _Exit(1)
        if p.num_of_qps > 1:
            # perftest's own check before it had one rdma_cm node per QP
            _out(RESULT_LINE)
            _out(" Perftest only supports 1 rmda_cm QP for now\n")
            raise _Exit(1)
        if p.connection_type == UD:
            _out(RESULT_LINE)
            _out(" softrdma's perftest runs -R on RC only (UD over rdma_cm is not built yet)\n")
            raise _Exit(1)
        p.use_rdma_cm = True
    elif p.tos != DEF_TOS:
        _out(" TOS only valid for rdma_cm based QP and RawEth QP \n")
        raise _Exit(1)
    if p.hop_limit != DEF_HOP_LIMIT:
        _out(" Hop limit only valid for RawEth QP \n")
        raise _Exit(1)
    if p.use_mcg:
        p.connection_type = UD
        if p.duplex:
            _out("Bidirectional mode not supported in multicast\n")
            raise _Exit(1)
        if p.num_of_qps > 1:
            _out("Only 1 QP supported in multicast\n")
            raise _Exit(1)
    if p.verb in (SEND, WRITE_IMM) and p.tst == BW and p.machine == SERVER and not p.duplex:
        if not p.noPeak:
            _out(" WARNING: BW peak won't be measured in this run.\n")
        p.noPeak = True
    if p.test_method == RUN_INFINITELY:
        if not p.noPeak and p.tst == BW:
            _out(" WARNING: BW peak won't be measured in this run.\n")
        p.noPeak = True
        p.test_type = DURATION
        if p.use_event:
            _out(RESULT_LINE)
            _err(" run_infinitely does not support events feature yet.\n")
            raise _Exit(1)
        if p.tst == LAT:
            _out(RESULT_LINE)
            _err(" run_infinitely exists only in BW tests for now.\n")
            raise _Exit(1)
        if p.duplex and p.verb in (SEND, WRITE_IMM):
            _out(RESULT_LINE)
            _err(" run_infinitely mode is not supported in SEND or WRITE_IMM Bidirectional BW test\n")
            raise _Exit(1)
        if p.rate_limit_type != DISABLE_RATE_LIMIT:
            _out(RESULT_LINE)
            _err(" run_infinitely does not support rate limit feature yet\n")
            raise _Exit(1)
    if p.use_srq and (p.tst == LAT or p.machine == SERVER or p.duplex):
        p.srq_exists = True
    if p.burst_size > 0 and p.rate_limit_type == DISABLE_RATE_LIMIT:
        _out(RESULT_LINE)
        _err(" Can't enable burst mode when rate limiter is off\n")
        raise _Exit(1)
    if p.burst_size <= 0:
        if p.rate_limit_type == SW_RATE_LIMIT:
            _err(f" Setting burst size to tx depth = {p.tx_depth}\n")
        if p.rate_limit_type != PP_RATE_LIMIT:
            p.burst_size = p.tx_depth
    if p.typical_pkt_size and p.rate_limit_type != PP_RATE_LIMIT:
        _out(RESULT_LINE)
        _err(" Typical packet size only supports PP rate limiter\n")
        raise _Exit(1)
    if p.rate_limit_type == SW_RATE_LIMIT:
        if p.tst != BW or p.verb == ATOMIC or (p.verb == SEND and p.duplex):
            _out(RESULT_LINE)
            _err("SW Rate limiter cann't be executed on non-BW, ATOMIC or bidirectional SEND tests\n")
            raise _Exit(1)
    elif p.rate_limit_type == HW_RATE_LIMIT:
        if p.use_rdma_cm or p.work_rdma_cm:
            _err(" HW rate limit isn't supported yet with rdma_cm scenarios\n")
            raise _Exit(1)
        if p.rate_units == PACKET_PS:
            _out(RESULT_LINE)
            _err(" Failed: pps rate limit units is not supported when setting HW rate limit\n")
            raise _Exit(1)
        p.unsupported.append("--rate_limit_type=HW: softrdma devices have no hardware rate limiter"
                             " (ibv_modify_qp with IBV_QP_RATE_LIMIT is EOPNOTSUPP); use --rate_limit_type=SW")
    elif p.rate_limit_type == PP_RATE_LIMIT:
        if p.rate_limit < 0:
            _err(" Must specify a rate limit when using Packet Pacing.\n Please add --rate_limit=<limit>.\n")
            raise _Exit(1)
        _err("Packet Pacing is only supported for Raw Ethernet.\n")
        raise _Exit(1)
    if p.output != FULL_VERBOSITY:
        if p.tst == BW and p.output not in (OUTPUT_BW, OUTPUT_MR):
            _out(RESULT_LINE)
            _err(" Output verbosity level for BW can be: bandwidth, message_rate\n")
            raise _Exit(1)
        if p.tst == LAT and p.output != OUTPUT_LAT:
            _out(RESULT_LINE)
            _err(" Output verbosity level for LAT can be: latency\n")
            raise _Exit(1)
    if p.latency_gap > 0 and p.tst != LAT:
        _out(RESULT_LINE)
        _err(" Latency gap feature is only for latency tests\n")
        raise _Exit(1)
    if p.test_type == DURATION and p.margin == DEF_INIT_MARGIN:
        p.margin = p.duration // 4
    if p.connection_type == UD and p.inline_size > MAX_INLINE_UD:
        _out(RESULT_LINE)
        _err(f"Setting inline size to {MAX_INLINE_UD} (Max inline size in UD)\n")
        p.inline_size = MAX_INLINE_UD
    if p.report_per_port and (p.test_type != DURATION or not p.dualport):
        _out(RESULT_LINE)
        _err("report per port feature work only with Duration and Dualport\n")
        raise _Exit(1)
    if p.verb in (SEND, WRITE_IMM) and p.rx_depth % 2 == 1 and p.test_method == RUN_REGULAR:
        p.rx_depth += 1                             # "WA for a bug when rx_depth is odd in SEND"
    if p.test_type == ITERATIONS and p.iters > 20000 and not p.noPeak and p.tst == BW:
        _out(" WARNING: BW peak won't be measured in this run.\n")
        p.noPeak = True
    if not p.duration > 2 * p.margin:
        _out(RESULT_LINE)
        _err("please check that DURATION > 2*MARGIN\n")
        raise _Exit(1)
    if not p.use_event and p.use_eq_num:
        _err(" Events must be enabled to select a completion vector\n")
        raise _Exit(1)
    p.fill_count = 0
    if p.test_type == ITERATIONS:
        if p.cq_mod >= p.tx_depth and p.iters % p.tx_depth:
            p.fill_count = 1
        elif p.cq_mod < p.tx_depth and p.iters % p.cq_mod:
            p.fill_count = 1
