"""The ``softrdma`` command: one entry point, a subcommand per tool."""

from __future__ import annotations

import errno
import importlib
import sys

from . import __version__, demo, runner
from .cliargs import Parser
from .device.main import main as daemon_main
from .fabric import cli as fabric_cli
from .tools import HELP as TOOLS_HELP, TOOLS, rdma_core_tests
from .verbs.errors import PyverbsRDMAError


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="softrdma", description="softrdma: a software RDMA stack")
    parser.add_argument("-V", "--version", action="version", version=f"softrdma {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("demo", help="two RC QPs moving data over a lossy simulated link")
    demo.add_arguments(p)
    p.set_defaults(func=demo.run)
    p = sub.add_parser("daemon", help="the device daemon (softrdmad)", add_help=False)
    p.set_defaults(func=None, daemon=True)
    for name in sorted(TOOLS):
        sub.add_parser(name, help=TOOLS_HELP.get(name, f"{name}, as the real tool"), add_help=False)
    runner.add_parsers(sub)
    p = sub.add_parser("rdma-core-tests", help="run rdma-core's own test suite, unmodified, on softrdma")
    rdma_core_tests.add_arguments(p)
    p.set_defaults(func=rdma_core_tests.run)
    p = sub.add_parser("fabric", help="a simulated IB fabric for opensm and the diags (ibsim protocol)")
    fabric_cli.add_arguments(p)
    p.set_defaults(func=fabric_cli.run)
    p = sub.add_parser("version", help="print the version")
    p.set_defaults(func=lambda a: print(__version__) or 0)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["daemon"]:
        return daemon_main(argv[1:], prog="softrdma daemon")
    if argv and argv[0] in TOOLS:
        try:
            # the one tool asked for, by its name in the TOOLS table (importing every
            # tool here would make each command pay for all the others' imports)
            mod = importlib.import_module(TOOLS[argv[0]])
        except ModuleNotFoundError as e:
            print(f"softrdma: {argv[0]} is not built yet ({e.name})", file=sys.stderr)
            return 1
        try:
            return mod.main(argv[1:], prog=argv[0])
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            return 141
        except PyverbsRDMAError as e:
            if e.error_code not in (errno.EIO, errno.ETIMEDOUT):      # the device is gone: say so, in one line
                raise
            print(f"{argv[0]}: {e}", file=sys.stderr)
            return 1
    if not argv:
        parser.print_usage(sys.stderr)
        print("softrdma: error: a command is required (softrdma --help lists them)", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
