"""The SM's log, in opensm's format and with its ``-D`` flag bits.

A line is ``Mon DD HH:MM:SS uuuuuu [TID] 0xLL -> message`` as osm_log writes
it.  Flags (``-D``): 0x01 errors, 0x02 info, 0x04 verbose, 0x08 debug,
0x40 routing (also: dump opensm-lfts.dump), 0x80 sys.  The default is 0x03
as opensm's (errors and info).  ``-d2``-style flushing is unconditional here:
every line is flushed, so a resident SM's "SUBNET UP" is visible at once.
"""

from __future__ import annotations

import os
import sys
import threading
import time

ERROR, INFO, VERBOSE, DEBUG, FUNCS, FRAMES, ROUTING, SYS = 1, 2, 4, 8, 0x10, 0x20, 0x40, 0x80
DEFAULT = ERROR | INFO


class Log:
    def __init__(self, path: str | None = None, flags: int = DEFAULT, append: bool = True,
                 stream=None) -> None:
        self.flags = flags
        self.f = None
        if path and path != "-":
            self.f = open(path, "a" if append else "w")
        elif path == "-":
            self.f = stream or sys.stdout

    def active(self, level: int) -> bool:
        return bool(self.flags & level)

    def log(self, level: int, msg: str) -> None:
        if not (self.flags & level) and level != SYS:
            return
        if self.f is None:
            return
        t = time.time()
        lt = time.localtime(t)
        line = "%s %06d [%04X] 0x%02x -> %s\n" % (time.strftime("%b %d %H:%M:%S", lt),
                                                   int((t % 1) * 1e6),
                                                   threading.get_native_id() & 0xFFFF or os.getpid(),
                                                   level, msg)
        self.f.write(line)
        self.f.flush()

    def error(self, msg: str) -> None:
        self.log(ERROR, msg)

    def info(self, msg: str) -> None:
        self.log(INFO, msg)

    def verbose(self, msg: str) -> None:
        self.log(VERBOSE, msg)

    def debug(self, msg: str) -> None:
        self.log(DEBUG, msg)

    def sys(self, msg: str) -> None:
        self.log(SYS, msg)

    def close(self) -> None:
        if self.f not in (None, sys.stdout, sys.stderr):
            self.f.close()
