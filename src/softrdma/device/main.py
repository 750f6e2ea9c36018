"""``softrdmad`` / ``softrdma daemon``: start the device daemon.

    softrdmad [-f] [--run-dir DIR] [--device NAME:NETDEV ...]

Foreground (``-f``) logs to stderr; background mode detaches, logs to
RUN/softrdmad.log, and writes RUN/softrdmad.pid once the control socket
accepts connections (so a starter can wait for the pid file).  SIGTERM
shuts down cleanly: every client connection is closed and the socket and
pid file are removed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from .core import Device
from .daemon import Daemon, default_run_dir
from .netdev import active_mtu, netdev_info
from ..transport.qp import DeviceCaps

PID_NAME = "softrdmad.pid"
LOG_NAME = "softrdmad.log"


def build_parser(prog: str = "softrdmad") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="softrdma device daemon")
    p.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground, log to stderr")
    p.add_argument("--run-dir", default=None, help="run directory (default: $SOFTRDMA_RUN, "
                   "$XDG_RUNTIME_DIR/softrdma, or /tmp/softrdma-UID)")
    p.add_argument("--device", action="append", metavar="NAME:NETDEV",
                   help="a device to host (repeatable; default rxe0:lo)")
    p.add_argument("--port", type=int, default=4791, help="UDP port (default 4791)")
    p.add_argument("--limit", action="append", type=_limit, default=[], metavar="NAME=N",
                   help="lower a resource limit (repeatable): a device attribute ("
                   + ", ".join(DeviceCaps.LIMITS) + ") for every device, or max_contexts_per_user")
    return p


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


def make_device(spec: str, port: int) -> Device:
    name, _, netdev = spec.partition(":")
    if not name or not netdev:
        raise SystemExit(f"softrdmad: bad --device {spec!r}: expected NAME:NETDEV")
    try:
        info = netdev_info(netdev)
    except LookupError as e:
        raise SystemExit(f"softrdmad: {e}") from None
    caps = DeviceCaps(active_mtu=active_mtu(info.mtu))
    return Device(name, netdev, info.addresses, mac=info.mac, port=port, caps=caps, netdev_index=info.index)


def running_pid(run_dir: str) -> int | None:
    """The pid of the daemon serving ``run_dir``, if one is alive."""
    try:
        with open(os.path.join(run_dir, PID_NAME)) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None, prog: str = "softrdmad") -> int:
    args = build_parser(prog).parse_args(argv)
    run_dir = args.run_dir or default_run_dir()
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    if running_pid(run_dir):
        print(f"{prog}: already running in {run_dir} (pid {running_pid(run_dir)})", file=sys.stderr)
        return 1
    devices = [make_device(s, args.port) for s in (args.device or ["rxe0:lo"])]
    if not args.foreground:
        if os.fork():
            return 0
        os.setsid()
        if os.fork():
            os._exit(0)
        fd = os.open(os.path.join(run_dir, LOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s softrdmad[%(process)d] %(message)s")
    # SIGTERM/SIGINT only ask to stop from before the socket and the pid file
    # exist: a signal in between (a starter that saw the socket, or the pid
    # file, and stops us at once) must still remove both, never kill us with
    # the default action and leave them behind.
    stop = _StopRequest()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    daemon = Daemon(run_dir, devices, limits=dict(args.limit))
    stop.daemon = daemon
    if stop.requested:
        daemon.stop()
    pid_path = os.path.join(run_dir, PID_NAME)
    serving = False
    try:
        with open(pid_path + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(pid_path + ".tmp", pid_path)
        logging.info("serving %s in %s", ", ".join(f"{d.name} ({d.netdev} {' '.join(d.addresses)})"
                                                   for d in devices), run_dir)
        serving = True
        daemon.serve()                  # returns at once if a stop came already; shuts down either way
    finally:
        if not serving:
            daemon.shutdown()
        for path in (pid_path + ".tmp", pid_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        logging.info("stopped")
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
