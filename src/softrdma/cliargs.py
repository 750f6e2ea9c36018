"""Argument parsing shared by softrdma's own commands (``softrdma``,
``softrdmad``, ``softrdma demo``, ``softrdma fabric``): a parser whose
errors are one line, and the value types that refuse out-of-range input.

The tools that mirror a real program (perftest, rdma, the diags, ...)
parse their arguments as that program does and keep its messages; this
module is only for the commands that are softrdma's own.
"""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``PROG: error: MESSAGE``, exit 2);
    the usage is for ``--help``."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_range(lo: int | None = None, hi: int | None = None):
    """An argparse type: an integer within [lo, hi]."""
    def parse(text: str) -> int:
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            if hi is None:
                raise argparse.ArgumentTypeError(f"{text} is out of range (at least {lo})")
            raise argparse.ArgumentTypeError(f"{text} is out of range ({lo}-{hi})")
        return v
    parse.__name__ = "integer"
    return parse


def udp_port(text: str) -> int:
    """An argparse type: a UDP port, 0 (any free one) to 65535."""
    try:
        v = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port: {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port: {text} (0-65535)")
    return v
