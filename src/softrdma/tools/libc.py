"""What the real tools get from the C library, reproduced: strtol/strtoul
(sign, base prefixes, clamping), the int conversion ``%d`` prints,
glibc's getopt_long with its diagnostics, and glibc's srand48/lrand48.
One copy for every tool."""

from __future__ import annotations

import os
import sys
from typing import Iterator, Sequence

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
ULONG_MAX = (1 << 64) - 1


def _strto(s: str, base: int, unsigned: bool) -> int:
    i, n = 0, len(s)
    while i < n and s[i] in " \t\n\v\f\r":
        i += 1
    neg = False
    if i < n and s[i] in "+-":
        neg = s[i] == "-"
        i += 1
    if base in (0, 16) and s[i:i + 2].lower() == "0x" and i + 2 < n and s[i + 2] in "0123456789abcdefABCDEF":
        base, i = 16, i + 2
    elif base == 0:
        base = 8 if s[i:i + 1] == "0" else 10
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"[:base]
    j = i
    while j < n and s[j].lower() in digits:
        j += 1
    v = int(s[i:j], base) if j > i else 0
    if unsigned:
        if v > ULONG_MAX:
            return ULONG_MAX                        # ERANGE (sign ignored)
        return (-v) & ULONG_MAX if neg else v
    v = -v if neg else v
    return max(LONG_MIN, min(LONG_MAX, v))          # ERANGE: LONG_MIN/LONG_MAX


def strtol(s: str, base: int = 0) -> int:
    """C ``strtol(s, NULL, base)`` on LP64: leading white space, a sign,
    ``0x``/``0`` prefixes for base 0, the longest run of digits; 0 if there
    is none; clamped to LONG_MIN/LONG_MAX on overflow."""
    return _strto(s, base, False)


def strtoul(s: str, base: int = 0) -> int:
    """C ``strtoul(s, NULL, base)`` on LP64: as strtol, but a minus sign
    negates modulo 2^64 and overflow gives ULONG_MAX."""
    return _strto(s, base, True)


def c_int(v: int) -> int:
    """A value converted to a 32-bit C ``int`` (what ``%d`` of it prints)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


class GetoptLong:
    """glibc ``getopt_long`` (argument permutation, ``--``, clustered and
    attached short options, abbreviated long options, ``POSIXLY_CORRECT``),
    printing glibc's diagnostics to stderr.

    Iterating yields ``(option, optarg)``; an option error yields
    ``("?", None)`` after the message.  ``operands`` holds the non-option
    arguments met so far (all of them once iteration has finished)."""

    def __init__(self, args: Sequence[str], prog: str, optstring: str,
                 longopts: Sequence[tuple[str, int, str]] = ()):
        self.args = list(args)
        self.prog = prog
        self.posix = optstring[:1] == "+" or "POSIXLY_CORRECT" in os.environ
        self.optstring = optstring.lstrip("+-")
        self.longopts = list(longopts)
        self.operands: list[str] = []

    def _err(self, msg: str) -> None:
        sys.stderr.write(f"{self.prog}: {msg}\n")

    def _missing(self) -> str:
        return ":" if self.optstring[:1] == ":" else "?"

    def __iter__(self) -> Iterator[tuple[str, str | None]]:
        args, i = self.args, 0
        while i < len(args):
            a = args[i]
            if a == "--":
                self.operands += args[i + 1:]
                return
            if a[:1] != "-" or a == "-":
                if self.posix:
                    self.operands += args[i:]
                    return
                self.operands.append(a)
                i += 1
                continue
            i += 1
            if a[:2] == "--":
                i, opt = self._long(a[2:], i)
                yield opt
                continue
            k = 1
            while k < len(a):
                c = a[k]
                k += 1
                pos = self.optstring.find(c)
                if pos < 0 or c in ":;":
                    self._err(f"invalid option -- '{c}'")
                    yield "?", None
                    continue
                if self.optstring[pos + 1:pos + 2] != ":":
                    yield c, None
                    continue
                if self.optstring[pos + 2:pos + 3] == ":":          # optional argument
                    yield c, (a[k:] or None)
                elif k < len(a):
                    yield c, a[k:]
                elif i < len(args):
                    i += 1
                    yield c, args[i - 1]
                else:
                    self._err(f"option requires an argument -- '{c}'")
                    yield self._missing(), None
                break

    def _long(self, body: str, i: int) -> tuple[int, tuple[str, str | None]]:
        name, eq, value = body.partition("=")
        found = next((o for o in self.longopts if o[0] == name), None)
        if found is None:
            cands = [o for o in self.longopts if o[0].startswith(name)]
            if not cands:
                self._err(f"unrecognized option '--{body}'")
                return i, ("?", None)
            found = cands[0]
            ambig = [o for o in cands[1:] if o[1:] != found[1:]]
            if ambig:
                poss = "".join(f" '--{o[0]}'" for o in [found] + ambig)
                self._err(f"option '--{body}' is ambiguous; possibilities:{poss}")
                return i, ("?", None)
        lname, has_arg, val = found
        if eq:
            if has_arg:
                return i, (val, value)
            self._err(f"option '--{lname}' doesn't allow an argument")
            return i, ("?", None)
        if has_arg == 1:
            if i < len(self.args):
                return i + 1, (val, self.args[i])
            self._err(f"option '--{lname}' requires an argument")
            return i, (self._missing(), None)
        return i, (val, None)


class Drand48:
    """glibc's srand48()/lrand48()."""

    A, C, MASK = 0x5DEECE66D, 0xB, (1 << 48) - 1

    def __init__(self, seed: int):
        seed &= 0xFFFFFFFF                          # glibc keeps 32 bits of a 64-bit long
        self.x = (seed << 16) | 0x330E

    def lrand48(self) -> int:
        self.x = (self.A * self.x + self.C) & self.MASK
        return self.x >> 17

