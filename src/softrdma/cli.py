"""The ``softrdma`` command: one entry point, a subcommand per tool."""

from __future__ import annotations

import errno
import sys


def main(argv: list[str] | None = None) -> int:
    from .cliargs import Parser
    from . import __version__
    parser = Parser(prog="softrdma", description="softrdma: a software RDMA stack")
    parser.add_argument("-V", "--version", action="version", version=f"softrdma {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import demo
    p = sub.add_parser("demo", help="two RC QPs moving data over a lossy simulated link")
    demo.add_arguments(p)
    p.set_defaults(func=demo.run)
    p = sub.add_parser("daemon", help="the device daemon (softrdmad)", add_help=False)
    p.set_defaults(func=None, daemon=True)
    tools = __import__("softrdma.tools", fromlist=["TOOLS", "HELP"])
    for name in sorted(tools.TOOLS):
        sub.add_parser(name, help=tools.HELP.get(name, f"{name}, as the real tool"), add_help=False)
    from . import runner
    runner.add_parsers(sub)
    from .fabric import cli as fabric_cli
    p = sub.add_parser("fabric", help="a simulated IB fabric for opensm and the diags (ibsim protocol)")
    fabric_cli.add_arguments(p)
    p.set_defaults(func=fabric_cli.run)
    p = sub.add_parser("version", help="print the version")
    p.set_defaults(func=lambda a: print(__import__("softrdma").__version__) or 0)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["daemon"]:
        from .device.main import main as daemon_main
        return daemon_main(argv[1:], prog="softrdma daemon")
    from .tools import TOOLS
    if argv and argv[0] in TOOLS:
        import importlib
        try:
            mod = importlib.import_module(TOOLS[argv[0]])
        except ModuleNotFoundError as e:
            print(f"softrdma: {argv[0]} is not built yet ({e.name})", file=sys.stderr)
            return 1
        from .verbs.errors import PyverbsRDMAError
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
