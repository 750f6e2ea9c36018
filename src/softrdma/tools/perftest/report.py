"""What perftest prints and writes (perftest_parameters.c and
perftest_communication.c): the test information block, the address lines,
the result tables, the numbers in them, and the ``--out_json`` file.

Time is ``time.perf_counter_ns()``: perftest's "cycles" are nanoseconds
here and its ``get_cpu_mhz()`` is 1000 (ticks per microsecond), so every
formula keeps perftest's shape: BW = bytes x ticks/s / (ticks x 2^20) in
MiB/s (or / 125e6 in Gb/s), peak = size x ticks/s / (the shortest per-
message time over any window of posts ... completions) x 2^20, latency =
the time between successive posts / (1000 x 2 for WRITE and SEND, the
round trip halved; x 1 for READ and ATOMIC).  With ``-C`` latencies are in
these ticks (nanoseconds), the unit softrdma's clock counts.  The clock does
not depend on the CPU frequency, so perftest's frequency warning (and
``-F``, which silences it) has nothing to act on.
"""

from __future__ import annotations

import math
import os
import sys

from . import params as P
from .comm import BwReport, Dest
from .progress import out
from .resources import IBV_LINK_LAYER_ETHERNET, gid_decimal, mtu_size

TICKS_PER_USEC = 1000.0                 # get_cpu_mhz(): perf_counter_ns ticks per microsecond
CYCLES_TO_UNITS = TICKS_PER_USEC * 1000000
LAT_MEASURE_TAIL = 2

RESULT_FMT = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
RESULT_FMT_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
RESULT_FMT_LAT = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
                  "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
RESULT_FMT_LAT_DUR = " #bytes        #iterations       t_avg[usec]    tps average"
RESULT_EXT = "\n"
RESULT_EXT_CPU_UTIL = "    CPU_Util[%]\n"


def _err(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


# --------------------------------------------------------------------------- C printf
def _cf(value: float, prec: int) -> str:
    """``%.Nlf`` as glibc prints it (inf/nan spelled as C spells them)."""
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return "%.*f" % (prec, value)


def _left(text: str, width: int) -> str:
    """``%-Ns``."""
    return text.ljust(width)


def _hash_hex(value: int, width: int) -> str:
    """printf's ``%#0Nx``: ``0x`` and zero padding to N, but no prefix for 0."""
    value &= 0xFFFFFFFFFFFFFFFF
    if value == 0:
        return "0" * width
    return "0x" + ("%x" % value).rjust(width - 2, "0")


def _g(value: float) -> str:
    """``%g``."""
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    return "%g" % value


def report_fmt_bw(size: int, iters: int, peak: float, avg: float, rate: float) -> str:
    """REPORT_FMT: ``" %-7lu    %-10lu       %-7.2lf            %-7.2lf\\t\\t     %-7.6lf"``."""
    return (f" {_left(str(size), 7)}    {_left(str(iters), 10)}       {_left(_cf(peak, 2), 7)}            "
            f"{_left(_cf(avg, 2), 7)}\t\t     {_left(_cf(rate, 6), 7)}")


def report_fmt_bw_ext(size: int, iters: int, peak: float, avg: float, rate: float) -> str:
    """REPORT_FMT_EXT (Gb/s below 0.1): six decimals everywhere."""
    return (f" {_left(str(size), 7)}    {iters}           {_left(_cf(peak, 6), 7)}            "
            f"{_left(_cf(avg, 6), 7)}            {_left(_cf(rate, 6), 7)}")


def report_fmt_lat(size: int, iters: int, tmin: float, tmax: float, typical: float, avg: float, stdev: float,
                   p99: float, p999: float) -> str:
    """REPORT_FMT_LAT."""
    return (f" {_left(str(size), 7)} {iters}          {_left(_cf(tmin, 2), 7)}        {_left(_cf(tmax, 2), 7)}"
            f"      {_left(_cf(typical, 2), 7)}  \t       {_left(_cf(avg, 2), 7)}     \t{_left(_cf(stdev, 2), 7)}"
            f"\t\t{_left(_cf(p99, 2), 7)} \t\t{_left(_cf(p999, 2), 7)}")


def report_fmt_lat_dur(size: int, iters: int, avg: float, tps: float) -> str:
    """REPORT_FMT_LAT_DUR."""
    return f" {_left(str(size), 7)}       {iters}            {_left(_cf(avg, 2), 7)}        {_left(_cf(tps, 2), 7)}"


def cpu_ext(p: P.Params, util: float) -> str:
    """REPORT_EXT / REPORT_EXT_CPU_UTIL."""
    return "\t    %s\n" % _left("%.2f" % util, 3) if p.cpu_util_enable else "\n"


# --------------------------------------------------------------------------- CPU utilisation (--cpu_util)
def cpu_stats() -> tuple[int, int]:
    """get_cpu_stats(): the first line of /proc/stat, user time and idle time."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[1]), int(fields[4])
    except (OSError, IndexError, ValueError):
        return 0, 0


def calc_cpu_util(p: P.Params) -> float:
    """calc_cpu_util(): user / (user + idle) over the sample, in percent."""
    (u0, i0), (u1, i1) = p.cpu_stats
    us, idle = u1 - u0, i1 - i0
    return float(us) / (us + idle) * 100 if us + idle else 0.0


# --------------------------------------------------------------------------- ctx_print_test_info()
def link_layer_str(link: int) -> str:
    return {0: "IB", 1: "IB", IBV_LINK_LAYER_ETHERNET: "Ethernet"}.get(link, "Unknown")


def print_test_info(p: P.Params) -> None:
    if p.output != P.FULL_VERBOSITY:
        return
    t = [P.RESULT_LINE, "                    ", P.TESTS_STR[p.verb] + " "]
    if p.verb == P.ATOMIC:
        t.append(P.ATOMIC_TYPES[p.atomicType] + " ")
    if p.tst == P.BW:
        if p.duplex:
            t.append("Bidirectional ")
        if p.post_list > 1:
            t.append("Post List ")
        t.append("BW ")
    else:
        t.append("Latency ")
    if p.use_mcg:
        t.append("Multicast ")
    t.append("Test\n")
    if p.use_event:
        t.append(f" Test with events. Using {p.ib_devname}_comp{p.eq_num}\n")
    if p.use_mcg:
        t.append(" MultiCast runs on UD!\n")
    t.append(f" Dual-port       : {'ON' if p.dualport else 'OFF'}\t\tDevice         : {p.ib_devname}\n")
    t.append(f" Number of qps   : {p.num_of_qps}\t\tTransport type : IB\n")
    t.append(f" Connection type : {P.CONN_STR[p.connection_type]}\t\tUsing SRQ      : "
             f"{'ON' if p.use_srq else 'OFF'}\n")
    t.append(" PCIe relax order: Unsupported\t\tLock-free\t: Unsupported\n")
    t.append(f" ibv_wr* API     : {'OFF' if p.use_old_post_send else 'ON'}\t\tUsing DDP      : OFF\n")
    if p.machine == P.CLIENT or p.duplex:
        t.append(f" TX depth        : {p.tx_depth}\n")
    if p.post_list > 1:
        t.append(f" Post List       : {p.post_list}\n")
    if p.recv_post_list > 1:
        t.append(f" Recv Post List  : {p.recv_post_list}\n")
    if p.verb in (P.SEND, P.WRITE_IMM) and (p.machine == P.SERVER or p.duplex):
        t.append(f" RX depth        : {p.rx_depth}\n")
    if p.tst == P.BW:
        t.append(f" CQ Moderation   : {p.cq_mod}\n")
    t.append(f" Mtu             : {mtu_size(p.curr_mtu)}[B]\n")
    t.append(f" Link type       : {link_layer_str(p.link_type)}\n")
    if p.gid_index != -1:
        t.append(f" GID index       : {p.gid_index}\n")
    if p.verb not in (P.READ, P.ATOMIC):
        t.append(f" Max inline data : {p.inline_size}[B]\n")
    else:
        t.append(f" Outstand reads  : {p.out_reads}\n")
    t.append(f" rdma_cm QPs\t : {'ON' if p.work_rdma_cm else 'OFF'}\n")
    t.append(f" Data ex. method : {'rdma_cm' if p.use_rdma_cm else 'Ethernet'}")
    t.append("\n")
    t.append(P.RESULT_LINE)
    out("".join(t))


# --------------------------------------------------------------------------- ctx_print_pingpong_data()
def pingpong_data(p: P.Params, d: Dest, remote: bool, print_gid_index: int) -> str:
    """The address line(s) of one QP, as ctx_print_pingpong_data prints them."""
    lid = p.dlid if (p.dlid and remote) else d.lid & 0xFFFF
    line = (f" {'remote' if remote else 'local'} address: LID {_hash_hex(lid, 4)} QPN {_hash_hex(d.qpn, 6)}"
            f" PSN {_hash_hex(d.psn, 6)}")
    if p.verb == P.READ:
        line += f" OUT {_hash_hex(d.out_reads, 4)}"
    if p.verb in (P.READ, P.WRITE):
        line += f" RKey {_hash_hex(d.rkey, 8)} VAddr {_hash_hex(d.vaddr, 16)}"
    line += "\n"
    if print_gid_index > -1:
        line += f" GID: {gid_decimal(d.gid)}\n"
    return line


def print_pingpong_data(p: P.Params, d: Dest, remote: bool, print_gid_index: int) -> None:
    if p.output != P.FULL_VERBOSITY:
        return
    out(pingpong_data(p, d, remote, print_gid_index))


def bw_title(p: P.Params) -> str:
    """RESULT_FMT or RESULT_FMT_G, and its line end."""
    return (RESULT_FMT if p.report_fmt == P.MBS else RESULT_FMT_G) + \
        (RESULT_EXT_CPU_UTIL if p.cpu_util_enable else RESULT_EXT)


def print_bw_header(p: P.Params) -> None:
    if p.output == P.FULL_VERBOSITY:
        out(P.RESULT_LINE + bw_title(p))


def print_lat_header(p: P.Params) -> None:
    if p.output == P.FULL_VERBOSITY:
        out(P.RESULT_LINE + (RESULT_FMT_LAT if p.test_type == P.ITERATIONS else RESULT_FMT_LAT_DUR)
            + (RESULT_EXT_CPU_UTIL if p.cpu_util_enable else RESULT_EXT))


# --------------------------------------------------------------------------- bandwidth
def peak_delta(tposted: list[int], tcompleted: list[int], n: int, post_list: int, cq_mod: int) -> int:
    """The shortest per-message time print_report_bw finds:

        min over posts i (every ``post_list``-th) and signaled completions
        j >= i (every ``cq_mod``-th, and the last one) of
        (tcompleted[j] - tposted[i]) / (j - i + 1)   (integer division)

    perftest tries every pair, O(n^2 / cq_mod).  The minimum of the real
    quotients is found here on the upper convex hull of the points
    (i - 1, tposted[i]) with one binary search per j, O(n log n), and its
    integer part is the minimum of perftest's integer quotients (the floor
    is monotone); the C start value ``tcompleted[0] - tposted[0]`` (an
    unsigned wrap when the first WR was unsignaled) joins the minimum."""
    best_num, best_den = None, 1
    hull: list[tuple[int, int]] = []           # points (x, y) of the upper hull, x increasing
    signaled = set(range(cq_mod - 1, n, cq_mod))
    if n % cq_mod:
        signaled.add(n - 1)
    i_next = 0
    for j in sorted(signaled):
        if not tcompleted[j]:
            continue                # never stamped (perftest reads it as a huge unsigned quotient)
        while i_next <= j:
            pt = (i_next - 1, tposted[i_next])
            while len(hull) >= 2:
                (x1, y1), (x2, y2) = hull[-2], hull[-1]
                # drop the middle point when it is not above the segment (upper hull)
                if (y2 - y1) * (pt[0] - x1) <= (pt[1] - y1) * (x2 - x1):
                    hull.pop()
                else:
                    break
            hull.append(pt)
            i_next += post_list
        qx, qy = j, tcompleted[j]
        # slope(q, h) = (qy - hy) / (qx - hx); unimodal along the hull: binary search its minimum
        lo, hi = 0, len(hull) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            (x1, y1), (x2, y2) = hull[mid], hull[mid + 1]
            # slope to mid+1 <= slope to mid  <=>  (qy-y2)*(qx-x1) <= (qy-y1)*(qx-x2)
            if (qy - y2) * (qx - x1) <= (qy - y1) * (qx - x2):
                lo = mid + 1
            else:
                hi = mid
        hx, hy = hull[lo]
        num, den = qy - hy, qx - hx
        if best_num is None or num * best_den < best_num * den:
            best_num, best_den = num, den
    start = (tcompleted[0] - tposted[0]) & 0xFFFFFFFFFFFFFFFF
    if best_num is None:
        return start
    return min(start, best_num // best_den)


def print_report_bw(p: P.Params, run, my: BwReport | None = None) -> BwReport:
    """print_report_bw(): the numbers of one run, printed when the run is not
    a bidirectional one (those print the sum after the exchange)."""
    if my is None:
        my = BwReport()
    num_qps = p.num_of_qps
    n_iters = p.iters
    if p.test_method == P.RUN_INFINITELY:
        n_iters = p.iters - run.last_iters
    if not p.noPeak:
        opt_delta = peak_delta(run.tposted, run.tcompleted, n_iters * num_qps, p.post_list, p.cq_mod)
    else:
        opt_delta = (run.tcompleted[0] - run.tposted[0]) & 0xFFFFFFFFFFFFFFFF
    run_inf_bi_factor = (1 if p.verb == P.SEND else 2) if (p.duplex and p.test_method == P.RUN_INFINITELY) else 1
    tsize = run_inf_bi_factor * p.size
    n_calc = n_iters * (1 if p.test_type == P.DURATION else num_qps)
    location = 0 if p.noPeak else n_calc - 1
    fmt_factor = 0x100000 if p.report_fmt == P.MBS else 125000000
    total = float(run.tcompleted[location] - run.tposted[0])

    def div(a: float, b: float) -> float:
        if b == 0:
            return math.nan if a == 0 else math.copysign(math.inf, a)
        return a / b

    my.bw_avg = div(float(tsize) * n_calc * CYCLES_TO_UNITS, total * fmt_factor)
    my.msgRate_avg = div(float(n_calc) * CYCLES_TO_UNITS * run_inf_bi_factor, total * 1000000)
    peak_up = 0 if p.noPeak else tsize * int(CYCLES_TO_UNITS)
    peak_down = opt_delta * fmt_factor
    my.bw_peak = div(float(peak_up), float(peak_down))
    my.size = p.size
    my.iters = n_calc
    my.sl = p.sl
    if not p.duplex or (p.verb in (P.SEND, P.WRITE_IMM) and p.test_type == P.DURATION) \
            or p.test_method == P.RUN_INFINITELY:
        print_full_bw_report(p, my, None)
    return my


def print_full_bw_report(p: P.Params, my: BwReport, rem: BwReport | None) -> None:
    bw_peak, bw_avg, rate = my.bw_peak, my.bw_avg, my.msgRate_avg
    inc_accuracy = bw_avg < 0.1 and p.report_fmt == P.GBS
    if rem is not None:
        bw_peak += rem.bw_peak
        bw_avg += rem.bw_avg
        rate += rem.msgRate_avg
    if (p.duplex and rem is not None) or (not p.duplex and rem is None) or (p.duplex and p.verb == P.SEND):
        p.is_bw_limit_passed |= not (p.is_limit_bw and p.limit_bw > bw_avg)
        p.is_msgrate_limit_passed |= not (p.is_limit_msgrate and p.limit_msgrate > rate)
    util = calc_cpu_util(p) if p.cpu_util_enable else 0.0
    if p.out_json:
        write_json(p, bw_results_json(p, inc_accuracy, bw_avg, rate, my.size, my.iters, bw_peak, util))
    if p.output == P.OUTPUT_BW:
        out("%s\n" % _cf(bw_avg, 6))
    elif p.output == P.OUTPUT_MR:
        out("%s\n" % _cf(rate, 6))
    else:
        fmt = report_fmt_bw_ext if inc_accuracy else report_fmt_bw
        out(fmt(my.size, my.iters, bw_peak, bw_avg, rate) + cpu_ext(p, util))


# --------------------------------------------------------------------------- latency
def _median(n: int, delta: list[int]) -> int:
    """get_median(): the middle one, or the integer mean of the two."""
    if (n - 1) % 2:
        return (delta[n // 2] + delta[n // 2 - 1]) // 2
    return delta[n // 2]


def lat_stats(p: P.Params, tposted: list[int]) -> dict:
    """print_report_lat()'s numbers: the deltas between successive posts
    (one round trip each), sorted, the two largest dropped, median, mean,
    the C stdev (each deviation truncated to an int before it is squared),
    and the 99% / 99.9% entries."""
    measure_cnt = p.iters - 1
    rtt_factor = 1 if p.verb in (P.READ, P.ATOMIC) else 2
    cycles_to_units = 1.0 if p.r_flag.cycles else TICKS_PER_USEC
    delta = [tposted[i + 1] - tposted[i] for i in range(measure_cnt)]
    q = cycles_to_units * rtt_factor
    unsorted = list(delta)
    delta.sort()
    measure_cnt -= LAT_MEASURE_TAIL
    median = _median(measure_cnt, delta)
    average_sum = 0.0
    for i in range(measure_cnt):
        average_sum += delta[i] / q
    average = average_sum / measure_cnt
    stdev_sum = 0.0
    for i in range(measure_cnt):
        temp_var = int(average - delta[i] / q)          # C: int temp_var = ...; int pow_var = pow(...)
        stdev_sum += int(temp_var ** 2)
    return {"q": q, "units": "cycles" if p.r_flag.cycles else "usec", "unsorted": unsorted, "delta": delta,
            "measure_cnt": measure_cnt, "latency": median / q, "average": average,
            "stdev": math.sqrt(stdev_sum / measure_cnt), "iters_99": math.ceil(measure_cnt * 0.99),
            "iters_99_9": math.ceil(measure_cnt * 0.999)}


def print_report_lat(p: P.Params, tposted: list[int]) -> dict:
    s = lat_stats(p, tposted)
    q, delta, m = s["q"], s["delta"], s["measure_cnt"]
    if p.r_flag.unsorted:
        out("#, %s\n" % s["units"] + "".join("%d, %s\n" % (i + 1, _g(d / q)) for i, d in enumerate(s["unsorted"])))
    if p.r_flag.histogram:
        out("#, %s\n" % s["units"] + "".join("%d, %s\n" % (i + 1, _g(delta[i] / q)) for i in range(m)))
    if (p.r_flag.unsorted or p.r_flag.histogram) and p.output == P.FULL_VERBOSITY:
        out(P.RESULT_LINE + (RESULT_FMT_LAT if p.test_type == P.ITERATIONS else RESULT_FMT_LAT_DUR)
            + (RESULT_EXT_CPU_UTIL if p.cpu_util_enable else RESULT_EXT))
    vals = (delta[0] / q, delta[m] / q, s["latency"], s["average"], s["stdev"], delta[s["iters_99"]] / q,
            delta[s["iters_99_9"]] / q)
    util = calc_cpu_util(p) if p.cpu_util_enable else 0.0
    if p.out_json:
        write_json(p, lat_results_json(p, vals, util))
    if p.output == P.OUTPUT_LAT:
        out("%s\n" % _cf(s["average"], 6))
    else:
        out(report_fmt_lat(p.size, p.iters, *vals) + cpu_ext(p, util))
    s["values"] = vals
    return s


def print_report_lat_duration(p: P.Params, run) -> None:
    rtt_factor = 1 if p.verb in (P.READ, P.ATOMIC) else 2
    sample = run.tcompleted[0] - run.tposted[0]
    latency = sample / TICKS_PER_USEC / rtt_factor / p.iters if p.iters else math.nan
    tps = p.iters / (sample / (TICKS_PER_USEC * 1000000)) if sample else math.nan
    util = calc_cpu_util(p) if p.cpu_util_enable else 0.0
    if p.out_json:
        if p.output == P.OUTPUT_LAT:
            body = '"t_avg": %s\n' % _cf(latency, 6)
        else:
            body = ('"MsgSize": %d,\n"n_iterations": %d,\n"t_avg": %s,\n"tps_average": %s' % (
                p.size, p.iters, _cf(latency, 6), _cf(tps, 6))) + json_ext(p, util)
        write_json(p, '"results": {\n' + body + "}\n")
    if p.output == P.OUTPUT_LAT:
        out("%s\n" % _cf(latency, 6))
    else:
        out(report_fmt_lat_dur(p.size, p.iters, latency, tps) + cpu_ext(p, util))


# --------------------------------------------------------------------------- --out_json
def _json_str(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def test_info_json(p: P.Params) -> str:
    """write_test_info_to_file()."""
    name = P.TESTS_STR[p.verb] + "_"
    if p.verb == P.ATOMIC:
        name += P.ATOMIC_TYPES[p.atomicType] + "_"
    if p.tst == P.BW:
        if p.duplex:
            name += "Bidirectional_"
        if p.post_list > 1:
            name += "Post_List_"
        name += "BW_"
    else:
        name += "Latency_"
    if p.use_mcg:
        name += "Multicast_"
    name += "Test"
    t = ['"test_info": {\n', f'"test": "{name}",\n']
    if p.use_event:
        t.append(f'"Test with events": "Using_{_json_str(p.ib_devname or "")}_comp{p.eq_num}",\n')
    if p.use_mcg:
        t.append(' "MultiCast_runs": "on_UD",\n')
    t.append(f'"Dual_port": "{"ON" if p.dualport else "OFF"}",\n"Device": "{_json_str(p.ib_devname or "")}",\n')
    t.append(f'"Number_of_qps": {p.num_of_qps},\n"Transport_type": "IB",\n')
    t.append(f'"Connection_type": "{P.CONN_STR[p.connection_type]}",\n"Using_SRQ": "{"ON" if p.use_srq else "OFF"}",\n')
    t.append(' "PCIe_relax_order": "Unsupported",\n')
    t.append(f'"ibv_wr_API": "{"OFF" if p.use_old_post_send else "ON"}",\n')
    if p.machine == P.CLIENT or p.duplex:
        t.append(f'"TX_depth": {p.tx_depth},\n')
    if p.post_list > 1:
        t.append(f'"Post_List": {p.post_list},\n')
    if p.verb in (P.SEND, P.WRITE_IMM) and (p.machine == P.SERVER or p.duplex):
        t.append(f'"RX_depth": {p.rx_depth},\n')
    if p.tst == P.BW:
        t.append(f'"CQ_Moderation": {p.cq_mod},\n')
    t.append(f'"Mtu": {mtu_size(p.curr_mtu)},\n')
    t.append(f'"Link_type": "{link_layer_str(p.link_type)}",\n')
    if p.gid_index != -1:
        t.append(f'"GID_index": {p.gid_index},\n')
    if p.verb not in (P.READ, P.ATOMIC):
        t.append(f'"Max_inline_data": {p.inline_size},\n')
    else:
        t.append(f'"Outstand_reads": {p.out_reads},\n')
    t.append(f'"rdma_cm_QPs": "{"ON" if p.work_rdma_cm else "OFF"}",\n')
    t.append('"Use_ROCm_memory": "OFF",\n')
    t.append(f'"Data_ex_method": "{"rdma_cm" if p.use_rdma_cm else "Ethernet"}"')
    t.append("\n},\n")
    return "".join(t)


def json_ext(p: P.Params, util: float) -> str:
    """REPORT_EXT_JSON / REPORT_EXT_CPU_UTIL_JSON."""
    return ',\n"CPU_util": %.2f\n' % util if p.cpu_util_enable else "\n"


def bw_results_json(p: P.Params, inc_accuracy: bool, bw_avg: float, rate: float, size: int, iters: int,
                    peak: float, util: float) -> str:
    """write_bw_report_to_file()."""
    r = '"results": {\n'
    if p.output == P.OUTPUT_BW:
        r += '"bw_avg": %s,\n' % _cf(bw_avg, 6)
    elif p.output == P.OUTPUT_MR:
        r += '"msgRate_avg": %s,\n' % _cf(rate, 6)
    else:
        prec = 6 if inc_accuracy else 2
        r += ('"MsgSize": %d,\n"n_iterations": %d,\n"BW_peak": %s,\n"BW_average": %s,\n"MsgRate": %s'
              % (size, iters, _cf(peak, prec), _cf(bw_avg, prec), _cf(rate, 6)))
    r += json_ext(p, util)
    return r + "}\n"


def lat_results_json(p: P.Params, vals: tuple, util: float) -> str:
    """write_report_lat_to_file()."""
    r = '"results": {\n'
    if p.output == P.OUTPUT_LAT:
        r += '"avg_lat": %s\n' % _cf(vals[3], 6)
    else:
        tmin, tmax, typical, avg, stdev, p99, p999 = vals
        r += ('"MsgSize": %d,\n"n_iterations": %d,\n"t_min": %s,\n"t_max": %s,\n"t_typical": %s,\n"t_avg": %s,\n'
              '"t_stdev": %s,\n"percentile_99": %s,\n"percentile_99.9": %s'
              % (p.size, p.iters, _cf(tmin, 2), _cf(tmax, 2), _cf(typical, 2), _cf(avg, 2), _cf(stdev, 2),
                 _cf(p99, 2), _cf(p999, 2)))
        r += json_ext(p, util)
    return r + "}\n"


def write_json(p: P.Params, results: str) -> None:
    """open_file_write() + the document; perftest rewrites the file for each
    report (the last message size of an -a sweep is what stays)."""
    try:
        fd = os.open(p.out_json_file_name, os.O_CREAT | os.O_RDWR | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError:
        _err(f"failed to open {p.out_json_file_name}\n")
        return
    with os.fdopen(fd, "w") as f:
        f.write("{\n" + test_info_json(p) + results + "}\n")
