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
    """``prefix``: opensm's log_prefix, before every message (``PREFIX: msg``);
    ``max_size``: opensm's log_max_size in bytes (``-L`` MB): once the
    lines written pass it, the file is truncated, as osm_log does, with its
    message on stderr; 0 = no limit."""

    def __init__(self, path: str | None = None, flags: int = DEFAULT, append: bool = True,
                 stream=None, prefix: str | None = None, max_size: int = 0) -> None:
        self.flags = flags
        self.prefix = prefix
        self.max_size = max_size
        self.count = 0                      # bytes written since the last truncation (osm_log's count)
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
        if self.prefix is not None:
            msg = f"{self.prefix}: {msg}"
        if self.max_size and self.count > self.max_size:
            print(f"osm_log: log file exceeds the limit {self.max_size}. Truncating.", file=sys.stderr)
            try:
                self.f.seek(0)
                self.f.truncate()
            except OSError:                 # (a pipe or a terminal: nothing to truncate)
                pass
            self.count = 0
        t = time.time()
        lt = time.localtime(t)
        line = "%s %06d [%04X] 0x%02x -> %s\n" % (time.strftime("%b %d %H:%M:%S", lt),
                                                   int((t % 1) * 1e6),
                                                   threading.get_native_id() & 0xFFFF or os.getpid(),
                                                   level, msg)
        self.f.write(line)
        self.f.flush()
        self.count += len(line)

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
