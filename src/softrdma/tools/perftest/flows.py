"""The eight perftest programs' ``main()`` (write_bw.c, read_bw.c,
atomic_bw.c, send_bw.c, write_lat.c, read_lat.c, atomic_lat.c,
send_lat.c): the order of the setup, of the exchanges with the peer, of the
prints, and the exit codes.

The setup every program shares (``_setup``): device, link check, the TCP
connection (``ib_write_bw`` sleeps a second after it, as perftest does),
versions (a peer older than 5.70 is refused, as perftest refuses it),
system data, MTU, resources, keys, the test information block, then the
key exchanges around RTR/RTS -- three before the test, four for
``ib_write_lat``/``ib_read_lat``/``ib_atomic_lat``; see ``_setup``.
"""

from __future__ import annotations

import os
import sys
import time

from ..libc import Drand48
from . import params as P, rdma_cm
from .comm import BwReport, Comm, CommError, version_float
from .mcast import Group
from .progress import PROGRESS, out
from .report import (
    bw_title, print_bw_header, print_full_bw_report, print_lat_header, print_pingpong_data, print_report_bw,
    print_report_lat, print_report_lat_duration, print_test_info,
)
from .resources import Resources, SetupError, ipv6_addr_v4mapped, mtu_size
from .run_bw import (
    Run, perform_warm_up, run_iter_bi, run_iter_bw, run_iter_bw_infinitely, run_iter_bw_infinitely_server,
    run_iter_bw_server,
)
from .run_lat import LatRun, run_iter_lat, run_iter_lat_send, run_iter_lat_write


def _err(msg: str) -> None:
    PROGRESS.clear()
    sys.stderr.write(msg)
    sys.stderr.flush()


class Failed(Exception):
    """Leave main() with this exit code (messages already printed)."""

    def __init__(self, code: int = 1):
        super().__init__(code)
        self.code = code


class Test:
    """One run: parameters, verbs resources, the TCP connection, the keys."""

    def __init__(self, p: P.Params):
        self.p = p
        self.res = Resources(p)
        if p.use_rdma_cm:
            self.comm = rdma_cm.RdmaComm(p)
        else:
            self.comm = Comm(p.servername, p.port, p.ai_family_v6, p.source_ip)
        self.cma = None
        self.my: list = []
        self.rem: list = []
        self.rem_version = 0.0
        self.mcg = Group()                    # -g: the multicast group (mcast.py)

    # ---- helpers for the exchange steps and their messages
    def hand_shake(self, i: int = 0, msg: str = "Failed to exchange data between server and clients\n",
                   code: int = 1) -> None:
        try:
            self.rem[i] = self.comm.hand_shake(self.my[i])
        except CommError:
            _err(msg)
            raise Failed(code)

    def xchg_bw_reports(self, mine: BwReport) -> BwReport:
        try:
            return self.comm.xchg_bw_reports(mine, self.rem_version, self.p.report_per_port)
        except CommError:
            raise Failed(1)

    def close_connection(self, lenient: bool = False) -> bool:
        return self.comm.close_connection(self.my[0], lenient=lenient)

    def destroy(self) -> bool:
        """destroy_ctx() of the test resources (-R: the rdma_cm
        disconnect first), then the exchange's resources."""
        if self.p.work_rdma_cm:
            rdma_cm.disconnect_nodes(self)
            ok = self.res.destroy()
            rdma_cm.close(self)
            self.comm.close()
            return ok
        ok = self.mcg.detach(self.p)
        ok = self.res.destroy() and ok
        if self.p.use_rdma_cm:
            self.comm.close()
        return ok


_SHAKE = "Failed to exchange data between server and clients\n"


def _setup(t: Test, kind: str) -> None:
    """Everything before the test, in perftest's order.  ``kind``:

    * ``"rdma_bw"`` (ib_write_bw, ib_read_bw, ib_atomic_bw): keys per QP,
      RTR/RTS, print the local keys, keys per QP again and print the peer's,
      one more exchange "after moving qp to RTR";
    * ``"lat"`` (ib_write_lat, ib_read_lat, ib_atomic_lat): the same with
      one extra exchange first;
    * ``"send"`` (ib_send_bw, ib_send_lat): keys per QP, RTR/RTS, the
      exchange after RTR, then print the local keys, keys per QP again and
      print the peer's.

    So three key exchanges before the test (four for the latency tests of
    the RDMA verbs) -- what NOTES.md recorded from perftest 4.5-0.17.
    """
    p, res, comm = t.p, t.res, t.comm
    if not res.open_device():
        raise Failed(1)
    if not res.check_link():
        raise Failed(1)
    if p.output == P.FULL_VERBOSITY and p.machine == P.SERVER:
        out("\n************************************\n* Waiting for client to connect... *\n"
            "************************************\n")
    if not comm.connect():
        _err(" Unable to init the socket connection\n")
        raise Failed(1)
    if p.verb in (P.WRITE, P.WRITE_IMM) and p.tst == P.BW:
        time.sleep(1)                                   # ib_write_bw only, as perftest does
    try:
        if not p.dont_xchg_versions:
            p.rem_version = comm.exchange_versions(p.version)
        rem_vers = version_float(p.rem_version)
        t.rem_version = rem_vers
        # check_version_compatibility(); perftest also fails it after
        # --dont_xchg_versions (rem_version stays empty), we skip it then
        if not p.dont_xchg_versions and rem_vers < 5.70:
            _err("Current implementation is not compatible with versions older than 5.70\n")
            raise Failed(1)
        if rem_vers >= 5.32 and not p.dont_xchg_versions:
            rcb, rcl = comm.exchange_sys_data(p.cycle_buffer, p.cache_line_size)
            p.cycle_buffer = max(p.cycle_buffer, rcb)
            p.cache_line_size = max(p.cache_line_size, rcl)
            res.cycle_buffer, res.cache_line_size = p.cycle_buffer, p.cache_line_size
        # check_mtu()
        curr = res.set_mtu()
        if not p.dont_xchg_versions and rem_vers >= 5.1:
            rem_mtu = comm.exchange_mtu(curr, rem_vers)
            p.curr_mtu = rem_mtu if (1 <= rem_mtu <= 5 and curr > rem_mtu) else curr
        else:
            p.curr_mtu = curr
    except CommError:
        raise Failed(1)
    except SetupError:
        raise Failed(1)
    if p.connection_type == P.UD and p.size > mtu_size(p.curr_mtu):
        if p.test_method == P.RUN_ALL or not p.req_size:
            _err(f" Max msg size in UD is MTU {mtu_size(p.curr_mtu)}\n")
            _err(" Changing to this MTU\n")
            p.size = mtu_size(p.curr_mtu)
        else:
            _err(" Max message size in UD cannot be greater than MTU \n")
            _err(" Couldn't get context for the device\n")
            raise Failed(1)
    res.size = p.size
    if p.work_rdma_cm:
        try:
            ok = rdma_cm.create_rdma_cm_connection(t)
        except SetupError:
            ok = False
        if not ok:
            _err("Failed to create RDMA CM connection with resources.\n")
            raise Failed(1)
    else:
        try:
            if not res.init():
                raise Failed(1)
        except SetupError:
            raise Failed(1)
    rng = Drand48(os.getpid() * int(time.time()))
    my = res.set_up_connection(rng)
    # -g: the receiver attaches (send_bw: the server; send_lat: each side, to its own group)
    if my is not None and p.use_mcg and (p.tst == P.LAT or p.machine == P.SERVER) \
            and not t.mcg.attach_receiver(res, p, my):
        my = None
    if my is None:
        _err(" Unable to set up socket connection\n")
        raise Failed(1)
    t.my = my
    t.rem = [None] * len(my)
    print_test_info(p)
    first = (" " if p.verb == P.WRITE and p.tst == P.BW else "") + _SHAKE
    if kind == "lat":
        t.hand_shake(0, _SHAKE)
    for i in range(len(my)):
        t.hand_shake(i, first)
    if not p.work_rdma_cm:
        if ipv6_addr_v4mapped(my[0].gid) != ipv6_addr_v4mapped(t.rem[0].gid):
            _err("\n Found Incompatibility issue with GID types.\n")
            _err(" Please Try to use a different IP version.\n\n")
            raise Failed(1)
        if not res.connect(t.rem, t.my):
            raise Failed(1)
        if p.use_mcg and (p.tst == P.LAT or p.machine == P.CLIENT) and not t.mcg.join_sender(res, p, t.rem):
            raise Failed(1)
    if kind == "send":
        t.hand_shake(0, _SHAKE)
    for d in my:
        print_pingpong_data(p, d, False, p.gid_index)
    for i in range(len(my)):
        t.hand_shake(i, " " + _SHAKE)
        print_pingpong_data(p, t.rem[i], True, p.gid_index)
    if kind != "send":
        t.hand_shake(0, first)


def _limits(p: P.Params) -> int:
    if not p.is_bw_limit_passed and p.is_limit_bw:
        _err("Error: BW result is below bw limit\n")
        return 1
    if not p.is_msgrate_limit_passed and p.is_limit_bw:
        _err("Error: Msg rate  is below msg_rate limit\n")
        return 1
    return 0


def _result_line(p: P.Params) -> None:
    if p.output == P.FULL_VERBOSITY:
        out(P.RESULT_LINE)


def _report_both(t: Test, my: BwReport, rem: BwReport) -> None:
    p = t.p
    if p.report_both and p.duplex:
        blank = "" if p.verb == P.ATOMIC else " "         # ib_atomic_bw prints no trailing blank
        out(P.RESULT_LINE + f"\n Local results:{blank}\n" + P.RESULT_LINE)
        out(bw_title(p))
        print_full_bw_report(p, my, None)
        out(P.RESULT_LINE + f"\n Remote results:{blank}\n" + P.RESULT_LINE)
        out(bw_title(p))
        print_full_bw_report(p, rem, None)


def _sweep_sizes(p: P.Params) -> range:
    """-a: 2 .. 2^23, UD up to the MTU (UD_MSG_2_EXP(MTU_SIZE) + 1 powers)."""
    top = 24
    if p.connection_type == P.UD:
        top = mtu_size(p.curr_mtu).bit_length()
    return range(1, top)


def _progress_size(p: P.Params, i: int, top: int) -> None:
    PROGRESS.update(f"{P.TESTS_STR[p.verb]} -a: size {1 << i} B ({i}/{top - 1})", force=True)


# --------------------------------------------------------------------------- ib_write_bw / ib_read_bw / ib_atomic_bw
def rdma_bw(t: Test) -> int:
    """write_bw.c, read_bw.c and atomic_bw.c (ib_atomic_bw cannot get -a:
    its size is fixed)."""
    p, res = t.p, t.res
    _setup(t, "rdma_bw")
    print_bw_header(p)
    if p.machine == P.SERVER and not p.duplex:
        # the server only waits: it learns the client's results and prints them
        t.hand_shake(0, " " + _SHAKE)
        rem = t.xchg_bw_reports(BwReport())
        if p.test_method != P.RUN_INFINITELY or p.verb == P.ATOMIC:
            print_full_bw_report(p, rem, None)
        else:
            out(" Client closed connection\n")
        if p.verb == P.ATOMIC:
            _result_line(p)
        if not t.close_connection():
            _err("Failed to close connection between server and client\n")
            return 1
        if p.verb != P.ATOMIC:
            _result_line(p)
        return 0 if t.destroy() else 1
    if p.use_event:
        res.send_cq.req_notify(False)
    sync_msg = "Failed to sync between server and client between different msg sizes\n"
    my = BwReport()
    if p.test_method == P.RUN_ALL:
        sizes = _sweep_sizes(p)
        for i in sizes:
            p.size = 1 << i
            _progress_size(p, i, sizes.stop)
            res.set_send_wqes(t.rem)
            if not perform_warm_up(res, p):
                return 1
            if p.duplex:
                t.hand_shake(0, sync_msg)
            run = Run(p)
            if not run_iter_bw(res, p, run):
                if p.verb == P.READ:
                    return 17
                _err(" Failed to complete run_iter_bw function successfully\n")
                return 1
            if p.duplex:
                t.hand_shake(0, sync_msg)
            my = print_report_bw(p, run, BwReport())
            if p.duplex:
                rem = t.xchg_bw_reports(my)
                print_full_bw_report(p, my, rem)
    elif p.test_method == P.RUN_REGULAR:
        res.set_send_wqes(t.rem)
        if not perform_warm_up(res, p):
            return 1
        if p.duplex:
            t.hand_shake(0, sync_msg)
        run = Run(p)
        if not run_iter_bw(res, p, run):
            _err(" Error occurred in run_iter function\n" if p.verb == P.ATOMIC
                 else " Failed to complete run_iter_bw function successfully\n")
            return 1
        my = print_report_bw(p, run, BwReport())
        if p.duplex:
            rem = t.xchg_bw_reports(my)
            print_full_bw_report(p, my, rem)
            _report_both(t, my, rem)
    else:
        res.set_send_wqes(t.rem)
        run = Run(p)
        if not run_iter_bw_infinitely(res, p, run, lambda r: print_report_bw(p, r)):
            _err({P.READ: " Error occurred while running! aborting ...\n"}.get(
                p.verb, " Error occurred while running infinitely! aborting ...\n"))
            return 1
    _result_line(p)
    if p.machine == P.CLIENT and not p.duplex:
        t.hand_shake(0, " " + _SHAKE)
        t.xchg_bw_reports(my)
    if not t.close_connection():
        _err("Failed to close connection between server and client\n")
        return 1
    rc = _limits(p)
    if rc:
        return rc
    return 0 if t.destroy() else 1


# --------------------------------------------------------------------------- ib_send_bw
def send_bw(t: Test) -> int:
    p, res = t.p, t.res
    _setup(t, "send")
    if p.use_event:
        res.send_cq.req_notify(False)
        res.recv_cq.req_notify(False)
    print_bw_header(p)
    sends = p.machine == P.CLIENT or p.duplex
    recvs = p.machine == P.SERVER or p.duplex

    def one_size() -> tuple[BwReport, BwReport | None]:
        if sends:
            res.set_send_wqes(t.rem)
        if recvs and not res.set_recv_wqes():
            _err(" Failed to post receive recv_wqes\n")
            raise Failed(1)
        t.hand_shake(0)
        run = Run(p)
        if p.duplex:
            ok = run_iter_bi(res, p, run)
        elif p.machine == P.CLIENT:
            ok = run_iter_bw(res, p, run)
        else:
            ok = run_iter_bw_server(res, p, run)
        if not ok:
            raise Failed(17)
        my = print_report_bw(p, run, BwReport())
        rem = None
        if p.duplex and p.test_type != P.DURATION:
            rem = t.xchg_bw_reports(my)
            print_full_bw_report(p, my, rem)
        return my, rem

    if p.test_method == P.RUN_ALL:
        sizes = _sweep_sizes(p)
        for i in sizes:
            p.size = 1 << i
            _progress_size(p, i, sizes.stop)
            one_size()
            t.hand_shake(0)
            if p.check_alive_exited:
                break
    elif p.test_method == P.RUN_REGULAR:
        my, rem = one_size()
        if rem is not None:
            _report_both(t, my, rem)
    else:
        if p.machine == P.CLIENT:
            res.set_send_wqes(t.rem)
        elif not res.set_recv_wqes():
            _err(" Failed to post receive recv_wqes\n")
            return 1
        t.hand_shake(0)
        if p.machine == P.CLIENT:
            run = Run(p)
            if not run_iter_bw_infinitely(res, p, run, lambda r: print_report_bw(p, r)):
                _err(" Error occurred while running infinitely! aborting ...\n")
                return 1
        elif not run_iter_bw_infinitely_server(res, p):
            _err(" Error occurred while running infinitely on server! aborting ...\n")
            return 1
    _result_line(p)
    if not t.close_connection():
        _err(" Failed to close connection between server and client\n")
        _err(" Trying to close this side resources\n")
    if not t.destroy():
        _err("Couldn't destroy all SEND resources\n")
        return 1
    return _limits(p)


# --------------------------------------------------------------------------- the latency tests
def _lat_report(p: P.Params, run: LatRun) -> None:
    if p.test_type == P.ITERATIONS:
        print_report_lat(p, run.tposted)
    else:
        print_report_lat_duration(p, run)


def write_lat(t: Test) -> int:
    p, res = t.p, t.res
    _setup(t, "lat")
    res.set_send_wqes(t.rem)
    print_lat_header(p)
    sizes = range(1, 24) if p.test_method == P.RUN_ALL else [None]
    for i in sizes:
        if i is not None:
            p.size = 1 << i
            _progress_size(p, i, 24)
        run = LatRun(p)
        if not run_iter_lat_write(res, p, run):
            _err("Test exited with Error\n")
            return 1
        _lat_report(p, run)
    _result_line(p)
    # perftest's ib_write_lat ends without a closing exchange; a peer that
    # still does one (older releases) gets it, one that does not is no error
    t.close_connection(lenient=True)
    t.destroy()
    return 0


def read_lat(t: Test) -> int:
    """ib_read_lat and ib_atomic_lat: only the client posts."""
    p, res = t.p, t.res
    _setup(t, "lat")
    if p.machine == P.SERVER:
        if not t.close_connection():
            _err("Failed to close connection between server and client\n")
            return 1
        _result_line(p)
        t.destroy()
        return 0
    if p.use_event:
        res.send_cq.req_notify(False)
    print_lat_header(p)
    res.set_send_wqes(t.rem)
    sizes = range(1, 24) if p.test_method == P.RUN_ALL else [None]
    for i in sizes:
        if i is not None:
            p.size = 1 << i
            _progress_size(p, i, 24)
        run = LatRun(p)
        if not run_iter_lat(res, p, run):
            return 17
        _lat_report(p, run)
    if not t.close_connection():
        _err("Failed to close connection between server and client\n")
        return 1
    _result_line(p)
    t.destroy()
    return 0


def send_lat(t: Test) -> int:
    p, res = t.p, t.res
    _setup(t, "send")
    if p.use_event:
        res.send_cq.req_notify(False)
        res.recv_cq.req_notify(False)
    print_lat_header(p)
    res.set_send_wqes(t.rem)
    sizes = _sweep_sizes(p) if p.test_method == P.RUN_ALL else [None]
    for i in sizes:
        if i is not None:
            p.size = 1 << i
            _progress_size(p, i, sizes.stop)
        if not res.set_recv_wqes():
            _err(" Failed to post receive recv_wqes\n")
            return 1
        t.hand_shake(0)
        run = LatRun(p)
        if not run_iter_lat_send(res, p, run):
            return 17
        _lat_report(p, run)
    _result_line(p)
    if not t.close_connection():
        _err("Failed to close connection between server and client\n")
        _err(" Trying to close this side resources\n")
    return 0 if t.destroy() else 1


FLOWS = {
    (P.WRITE, P.BW): rdma_bw, (P.READ, P.BW): rdma_bw, (P.ATOMIC, P.BW): rdma_bw, (P.SEND, P.BW): send_bw,
    (P.WRITE, P.LAT): write_lat, (P.READ, P.LAT): read_lat, (P.ATOMIC, P.LAT): read_lat,
    (P.SEND, P.LAT): send_lat,
}
