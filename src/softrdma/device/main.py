"""``softrdmad`` / ``softrdma daemon``: start, stop and show the device daemon.

    softrdmad [-f] [--run-dir DIR] [--port PORT] [--device NAME:NETDEV ...] [--cpu LIST [--spin-us N]]
    softrdmad status | stop [--run-dir DIR]

Started by hand, the daemon hosts the devices given with ``--device`` and
no other: like ``modprobe rdma_rxe``, it creates none, and ``rdma link add``
adds them.  (A tool or ``softrdma run`` that finds no daemon starts one
with the embedded default, rxe0 on lo, by passing ``--device`` itself.)

Foreground (``-f``) logs to stderr; background mode detaches, logs to
RUN/softrdmad.log, and writes RUN/softrdmad.pid once the control socket
accepts connections.  The command itself returns only then -- 0 -- or
once the daemon failed to start, with the daemon's one-line reason on
stderr and exit status 1, so a starter never polls.  SIGTERM shuts down
cleanly: every client connection is closed and the socket and pid file are
removed; ``stop`` sends it and waits until the daemon is gone.

``--cpu LIST`` pins the daemon (taskset's CPU list syntax; see
``placement``): the NIC's interrupt affinity, for latency runs with the
applications placed on the other CPUs (``taskset -c``).  Pinned to CPUs of
its own, the loop polls ``--spin-us`` (default 50) after its last work
before it gives the core away.  ``status`` names a pinned daemon's CPUs
and the ones left for the applications.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import socket
import sys
import time

from ..cliargs import Parser, int_range, udp_port
from ..transport.qp import DeviceCaps
from ..uapi.control import recv_msg, send_msg
from ..uapi.rundir import SOCKET_NAME, default_run_dir
from ..wire import fastpath
from .commands.link import make_device
from .core import Device
from .daemon import Daemon
from .placement import (DEFAULT_SPIN_US, CpuListError, check_cpus, format_cpu_list, online_cpus, parse_cpu_list, pin,
                        spin_budget_s)

PID_NAME = "softrdmad.pid"
LOG_NAME = "softrdmad.log"
#: how long ``stop`` waits for the daemon to end after SIGTERM
STOP_TIMEOUT_S = 30.0
#: The daemon's nice value where it may raise its own priority (root,
#: CAP_SYS_NICE).  softrdmad is the NIC: its work -- answering a peer's
#: packets, ACKing them -- runs ahead of user processes on a real host (the
#: kernel's softirqs do), and a device that waits its turn behind CPU-bound
#: processes leaves its peers' ACK timers running out for tens of
#: milliseconds at a time.  It sleeps when idle, so it takes nothing from an
#: idle host.
DEFAULT_NICE = -10


def build_parser(prog: str = "softrdmad") -> Parser:
    p = Parser(prog=prog, description="softrdma device daemon: start it (the default), "
               "or show (status) or end (stop) the one serving the run directory")
    p.add_argument("action", nargs="?", choices=("start", "status", "stop"), default="start",
                   help="start (default), status, or stop")
    p.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground, log to stderr")
    p.add_argument("--run-dir", default=None, help="run directory (default: $SOFTRDMA_RUN, "
                   "$XDG_RUNTIME_DIR/softrdma, /dev/shm/softrdma-UID or /tmp/softrdma-UID)")
    p.add_argument("--device", action="append", metavar="NAME:NETDEV",
                   help="a device to host (repeatable; default: none -- add them with "
                   "'softrdma rdma link add NAME type rxe netdev NETDEV')")
    p.add_argument("--port", type=udp_port, default=4791, help="UDP port (default 4791; 0: any free port)")
    p.add_argument("--nice", type=int_range(-20, 19), default=DEFAULT_NICE, metavar="N",
                   help=f"scheduling priority, where the daemon may raise its own (default {DEFAULT_NICE}: "
                   "a NIC's work runs ahead of user processes; 0 keeps the starter's)")
    p.add_argument("--limit", action="append", type=_limit, default=[], metavar="NAME=N",
                   help="lower a resource limit (repeatable): a device attribute ("
                   + ", ".join(DeviceCaps.LIMITS) + ") for every device, or max_contexts_per_user")
    p.add_argument("--cpu", type=_cpu_list, default=None, metavar="LIST",
                   help="pin the daemon to these CPUs (taskset's syntax: 1 / 0,2 / 2-3 / 0-7:2), as a NIC's "
                   "interrupt affinity; run the applications on the others (taskset -c) -- for latency")
    p.add_argument("--spin-us", type=int_range(0, 1_000_000), default=None, metavar="N",
                   help=f"with --cpu: poll N us after the last work before yielding the core (default "
                   f"{DEFAULT_SPIN_US}; 0: yield at once); applies only when the CPUs are not all of them")
    p.add_argument("--ipoib", action="store_true",
                   help="an IPoIB network interface (ib0, ib1, ...) for each InfiniBand port, as the kernel's "
                   "ib_ipoib module makes (needs CAP_NET_ADMIN: TUN devices)")
    return p


def _cpu_list(text: str) -> frozenset[int]:
    """``--cpu LIST``: parsed, and every CPU online and allowed to us."""
    try:
        cpus = parse_cpu_list(text)
        check_cpus(cpus)
    except CpuListError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return cpus


def _limit(text: str) -> tuple[str, int]:
    """``--limit NAME=N``: a limit softrdmad enforces and query_device reports."""
    name, sep, value = text.partition("=")
    if name not in (*DeviceCaps.LIMITS, "max_contexts_per_user") or not sep:
        raise argparse.ArgumentTypeError(f"unknown limit {text!r}: expected NAME=N, NAME one of "
                                         + ", ".join((*DeviceCaps.LIMITS, "max_contexts_per_user")))
    try:
        n = int(value, 0)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a non-negative integer")
    return name, n


def raise_priority(nice: int) -> int:
    """Lower the process's nice value to ``nice`` if that raises its priority
    and it is allowed to; never lowers the priority.  Returns the nice value
    in force.  Called before any thread exists (Linux's nice is per thread;
    threads inherit it)."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if nice < current:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
            return nice
        except PermissionError:               # no CAP_SYS_NICE (and RLIMIT_NICE does not allow it)
            pass
    return current


def _alive(pid: int) -> bool:
    """``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def running_pid(run_dir: str) -> int | None:
    """The pid of the daemon serving ``run_dir``, if one is alive."""
    try:
        with open(os.path.join(run_dir, PID_NAME)) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def main(argv: list[str] | None = None, prog: str = "softrdmad") -> int:
    args = build_parser(prog).parse_args(argv)
    run_dir = args.run_dir or default_run_dir()
    if args.action == "status":
        return status(run_dir, prog)
    if args.action == "stop":
        return stop(run_dir, prog)
    try:
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
    except OSError as e:
        print(f"{prog}: cannot create run directory {run_dir}: {e.strerror}", file=sys.stderr)
        return 1
    pid = running_pid(run_dir)
    if pid:
        print(f"{prog}: already running in {run_dir} (pid {pid})", file=sys.stderr)
        return 1
    if args.spin_us is not None and args.cpu is None:
        print(f"{prog}: --spin-us needs --cpu: on a shared core spinning delays the applications",
              file=sys.stderr)
        return 1
    spin_s = 0.0
    if args.cpu is not None:
        try:
            pin(args.cpu)                       # before the fork: the daemon inherits it
        except CpuListError as e:
            print(f"{prog}: --cpu: {e}", file=sys.stderr)
            return 1
        spin_s = spin_budget_s(args.cpu, DEFAULT_SPIN_US if args.spin_us is None else args.spin_us)
    devices: list[Device] = []
    try:
        for spec in args.device or ():
            devices.append(make_device(spec, args.port))
    except (SystemExit, OSError) as e:
        for d in devices:
            d.close()
        msg = e.strerror if isinstance(e, OSError) else str(e)
        print(msg.replace("softrdmad:", f"{prog}:", 1), file=sys.stderr)
        return 1
    if args.foreground:
        return _serve(run_dir, devices, args.port, None, dict(args.limit), args.nice, spin_s, args.ipoib)
    r, w = os.pipe()
    child = os.fork()
    if child:
        # the starter: wait for the daemon's word -- "ok" once its pid file
        # exists, or the line that says why it could not start
        os.close(w)
        for d in devices:                       # the daemon's now
            d.close()
        os.waitpid(child, 0)
        with os.fdopen(r, "rb") as f:
            word = f.read().decode(errors="replace").strip()
        if word == "ok":
            return 0
        print(word or f"{prog}: the daemon exited while starting (see {os.path.join(run_dir, LOG_NAME)})",
              file=sys.stderr)
        return 1
    os.close(r)
    os.setsid()
    if os.fork():
        os._exit(0)
    fd = os.open(os.path.join(run_dir, LOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(null)
    os.close(fd)
    return _serve(run_dir, devices, args.port, w, dict(args.limit), args.nice, spin_s, args.ipoib)


def _serve(run_dir: str, devices: list[Device], port: int, ready_fd: int | None,
           limits: dict[str, int], nice: int = DEFAULT_NICE, spin_s: float = 0.0, ipoib: bool = False) -> int:
    """Run the daemon until stopped.  ``ready_fd`` (background mode) gets
    "ok" once the pid file exists, or the reason the start failed."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s softrdmad[%(process)d] %(message)s")
    foreground = ready_fd is None
    nice_in_force = raise_priority(nice)

    def tell(word: str) -> None:
        nonlocal ready_fd
        if ready_fd is not None:
            try:
                os.write(ready_fd, word.encode() + b"\n")
            except OSError:
                pass
            os.close(ready_fd)
            ready_fd = None

    # SIGTERM/SIGINT only ask to stop from before the socket and the pid file
    # exist: a signal in between (a starter that saw the socket, or the pid
    # file, and stops us at once) must still remove both, never kill us with
    # the default action and leave them behind.
    stop_request = _StopRequest()
    signal.signal(signal.SIGTERM, stop_request)
    signal.signal(signal.SIGINT, stop_request)
    try:
        daemon = Daemon(run_dir, devices, limits=limits, spin_budget_s=spin_s, ipoib=ipoib)
    except SystemExit as e:                 # e.g. another daemon holds the run directory's lock
        tell(str(e))
        if foreground:
            print(e, file=sys.stderr)
        else:
            logging.error("%s", e)
        return 1
    except Exception as e:                  # noqa: BLE001 -- the starter must hear of it
        logging.exception("could not start")
        tell(f"softrdmad: could not start: {e}")
        raise
    if not devices:
        daemon.udp_port = port              # the port ``rdma link add`` binds
    stop_request.daemon = daemon
    if stop_request.requested:
        daemon.stop()
    pid_path = os.path.join(run_dir, PID_NAME)
    serving = False
    try:
        with open(pid_path + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(pid_path + ".tmp", pid_path)
        logging.info("serving %s in %s (nice %d) on CPUs %s, spin %d us, data path %s",
                     ", ".join(f"{d.name} ({d.netdev} {' '.join(d.addresses)})" for d in devices) or "no device",
                     run_dir, nice_in_force, format_cpu_list(os.sched_getaffinity(0)), round(spin_s * 1e6),
                     fastpath.describe())
        serving = True
        tell("ok")
        daemon.serve()                  # returns at once if a stop came already; shuts down either way
    finally:
        if not serving:
            daemon.shutdown()
            tell("softrdmad: could not start (see the log in the run directory)")
        for path in (pid_path + ".tmp", pid_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        logging.info("stopped")
    return 0


def _devices(run_dir: str) -> list[dict] | None:
    """The devices the daemon serving ``run_dir`` reports (None: no answer)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(5)
            s.connect(os.path.join(run_dir, SOCKET_NAME))
            send_msg(s, {"op": "devices", "seq": 1})
            msg, fds = recv_msg(s)
            for fd in fds:
                os.close(fd)
        return list(msg["devices"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def status(run_dir: str, prog: str = "softrdmad") -> int:
    """Print whether a daemon serves ``run_dir``, its pid and devices; 0 if one does, 3 if not
    (as ``systemctl status``)."""
    pid = running_pid(run_dir)
    if pid is None:
        print(f"{prog}: not running (run dir {run_dir})")
        return 3
    devs = _devices(run_dir)
    print(f"{prog}: running, pid {pid}, run dir {run_dir}")
    if devs is None:
        print("devices: (no answer on the control socket)")
    elif not devs:
        print("devices: none (add one: softrdma rdma link add rxe0 type rxe netdev NETDEV)")
    else:
        print("devices: " + ", ".join(f"{d['name']} (netdev {d['netdev']})" for d in devs))
    cpus = _cpus_of(pid)
    online = online_cpus()
    if cpus is not None and cpus != online:     # pinned (--cpu): where its applications should not run
        rest = online - cpus
        print(f"cpus: {format_cpu_list(cpus)}" + (f" (latency: run the applications with taskset -c "
                                                  f"{format_cpu_list(rest)})" if rest else ""))
    return 0


def _cpus_of(pid: int) -> frozenset[int] | None:
    """The CPUs process ``pid`` may run on (its Cpus_allowed_list)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return parse_cpu_list(line.split(":", 1)[1].strip())
    except (OSError, CpuListError):
        pass
    return None


def stop(run_dir: str, prog: str = "softrdmad") -> int:
    """SIGTERM the daemon serving ``run_dir`` and wait until it is gone."""
    pid = running_pid(run_dir)
    if pid is None:
        print(f"{prog}: not running (run dir {run_dir})", file=sys.stderr)
        return 1
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    end = time.monotonic() + STOP_TIMEOUT_S
    try:
        while _alive(pid):
            left = end - time.monotonic()
            if left <= 0:
                print(f"{prog}: pid {pid} did not stop within {STOP_TIMEOUT_S:.0f} s", file=sys.stderr)
                return 1
            if pidfd is not None:
                select.select([pidfd], [], [], left)   # readable once the process exited
            else:
                time.sleep(0.02)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return 0


class _StopRequest:
    """The early SIGTERM/SIGINT handler: a stop asked for before the daemon
    exists is remembered and handed to it (``Daemon.serve`` installs its own
    handler later)."""

    def __init__(self):
        self.daemon = None
        self.requested = False

    def __call__(self, *_):
        self.requested = True
        if self.daemon is not None:
            self.daemon.stop()
