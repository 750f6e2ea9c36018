"""The progress line of long perftest runs (-D, -a, --run_infinitely), on
stderr, never in the way of the report on stdout.

perftest itself prints nothing while it measures; softrdma's tools add one
status line for the runs that take long.  The rules:

* it goes to stderr only, and only when stderr is a terminal (a pipe or a
  log file never gets it); ``SOFTRDMA_PROGRESS=1`` forces it on (for
  example into a file being watched), ``SOFTRDMA_PROGRESS=0`` off;
* it is one line rewritten in place (``\\r`` + the text + erase to end of
  line), at most every 0.2 s, and the callers only ask between batches of
  work requests, so it costs the data path nothing measurable;
* every write to stdout goes through ``out()``, which erases the line first
  (``\\r\\x1b[K`` on stderr) and flushes stdout before the line is drawn
  again -- on a terminal that shows both streams, the table rows are never
  interleaved with it, and stdout itself never contains a byte of it.
"""

from __future__ import annotations

import os
import sys
import time

_MIN_INTERVAL = 0.2


class Progress:
    def __init__(self, stream=None, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.shown = False
        self.last = 0.0
        self.enabled = False
        self.configure(enabled)

    def configure(self, enabled: bool | None = None) -> None:
        """On or off by the rules above (``enabled`` None: decide)."""
        if enabled is None:
            force = os.environ.get("SOFTRDMA_PROGRESS")
            if force in ("0", "1"):
                enabled = force == "1"
            else:
                try:
                    enabled = self.stream.isatty()
                except (AttributeError, ValueError):
                    enabled = False
        self.enabled = enabled

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < _MIN_INTERVAL:
            return
        self.last = now
        sys.stdout.flush()
        self.stream.write("\r" + text + "\x1b[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


PROGRESS = Progress(enabled=False)


def start() -> Progress:
    """Turn the progress line of this run on or off per the rules above."""
    PROGRESS.stream = sys.stderr
    PROGRESS.configure()
    return PROGRESS


def out(text: str) -> None:
    """Write to stdout with the progress line out of the way."""
    PROGRESS.clear()
    sys.stdout.write(text)
    sys.stdout.flush()
