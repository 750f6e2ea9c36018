"""``softrdma run -- CMD`` and ``softrdma pyverbs-path``: run unmodified
RDMA software on softrdma.

``run`` makes sure a daemon serves the run directory (starting the embedded
default if none does), then executes CMD with:

* ``PYTHONPATH`` led by the shim directory, whose ``pyverbs`` package maps
  every ``pyverbs.X`` to ``softrdma.pyverbs.X``;
* ``PATH`` led by RUN/bin, where each familiar tool name (rdma, ibv_devinfo,
  ibstat, ibv_*_pingpong, ...) runs softrdma's version of it, and ``python3``
  and ``python`` are the interpreter softrdma is installed in (so ``softrdma
  run -- python3 prog.py`` works from a venv that was never activated, and
  never picks up a ``python3`` on PATH that cannot import softrdma);
* where it may (root), a private mount namespace in which /sys/class is an
  overlay of softrdma's tree (RUN/sys/class) over the real one, so software
  that reads /sys/class/infiniband sees softrdma's devices.  Nothing
  changes outside that namespace;
* with ``--sockets``, ``PYTHONPATH`` led by softrdma.rsocket's preload
  directory, whose ``sitecustomize`` makes the program's TCP sockets go
  over rsockets where the peer speaks them (``softrdma.rsocket.accel``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from . import shim
from .uapi.rundir import default_run_dir
from .tools import TOOLS
from .verbs.device import AutostartError, connect


# Names under which RUN/bin offers softrdma's own interpreter.
INTERPRETERS = ("python3", "python")


def shim_path() -> str:
    return os.path.dirname(os.path.abspath(shim.__file__))


def _bin_dir(run_dir: str) -> str:
    d = os.path.join(run_dir, "bin")
    os.makedirs(d, exist_ok=True)
    scripts = {name: f'#!/bin/sh\nexec "{sys.executable}" -m softrdma {name} "$@"\n' for name in TOOLS}
    for name in INTERPRETERS:
        scripts[name] = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    for name, text in scripts.items():
        path = os.path.join(d, name)
        try:
            with open(path) as f:
                if f.read() == text:
                    continue
        except OSError:
            pass
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)
    return d


def sockets_path() -> str:
    from .rsocket import preload
    return os.path.dirname(os.path.abspath(preload.__file__))


def pyverbs_path(args) -> int:
    print(shim_path())
    return 0


def run(args) -> int:
    cmd = list(args.command)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        print("softrdma run: no command given (softrdma run -- CMD [ARGS...])", file=sys.stderr)
        return 2
    run_dir = default_run_dir()
    try:
        connect().close()
    except AutostartError:                  # its reason is printed already
        return 1
    except OSError as e:
        print(f"softrdma run: no softrdmad: {e.strerror}", file=sys.stderr)
        return 1
    env = dict(os.environ)
    env["SOFTRDMA_RUN"] = run_dir
    env["PYTHONPATH"] = os.pathsep.join(p for p in (sockets_path() if args.sockets else None, shim_path(),
                                                    env.get("PYTHONPATH")) if p)
    env["PATH"] = os.pathsep.join(p for p in (_bin_dir(run_dir), env.get("PATH")) if p)
    sys_class = os.path.join(run_dir, "sys", "class")
    if not args.no_sysfs and os.geteuid() == 0 and shutil.which("unshare") and os.path.isdir(sys_class):
        script = ('mount -t overlay softrdma-sysfs -o "lowerdir=$SOFTRDMA_SYS_CLASS:/sys/class" /sys/class '
                  '|| echo "softrdma run: could not show softrdma devices in /sys/class" >&2; exec "$@"')
        env["SOFTRDMA_SYS_CLASS"] = sys_class
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cmd]
    else:
        argv = cmd
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        print(f"softrdma run: {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127


def add_parsers(sub) -> None:
    p = sub.add_parser("run", help="run a command on softrdma (pyverbs, tool names, /sys/class/infiniband)")
    p.add_argument("--no-sysfs", action="store_true", help="do not overlay /sys/class (no mount namespace)")
    p.add_argument("--sockets", action="store_true",
                   help="Python programs' TCP sockets go over rsockets where the peer speaks them")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=run)
    p = sub.add_parser("pyverbs-path", help="print the directory to put on PYTHONPATH for pyverbs programs")
    p.set_defaults(func=pyverbs_path)
