"""Where tests put the run directories of the daemons they start.

A daemon's run dir holds its sysfs tree (thousands of small files), so it
goes on /dev/shm, not on a journalled disk.  The test session makes one
directory there (``SOFTRDMA_TEST_SHM``, set by conftest before any test
runs) and every test's run dir goes inside it: what a test forgets to
remove is found by name at the session's end (conftest fails the run
naming it), and concurrent sessions never see each other's directories.
Outside a session (a test module run by hand without conftest) the base is
/dev/shm itself, or the temp dir where there is no /dev/shm."""

from __future__ import annotations

import os
import tempfile

ENV = "SOFTRDMA_TEST_SHM"


def shm_base() -> str:
    base = os.environ.get(ENV)
    if base and os.path.isdir(base):
        return base
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def shm_dir(name: str) -> str:
    """The path of a run dir called NAME (not created)."""
    return os.path.join(shm_base(), name)


def shm_mkdtemp(prefix: str) -> str:
    """A fresh run dir whose name starts with PREFIX (created)."""
    return tempfile.mkdtemp(prefix=prefix, dir=shm_base())
