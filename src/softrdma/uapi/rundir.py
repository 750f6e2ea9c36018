"""Where the daemon and its clients meet: the run directory and the control
socket in it (the rule both sides apply, as /dev/infiniband is the
kernel's and libibverbs')."""

from __future__ import annotations

import os

#: the control socket (SOCK_SEQPACKET) in the run directory
SOCKET_NAME = "softrdmad.sock"


def default_run_dir() -> str:
    """SOFTRDMA_RUN if set; else $XDG_RUNTIME_DIR/softrdma; else a per-user
    directory under /dev/shm (memory-backed, like /run), or /tmp."""
    env = os.environ.get("SOFTRDMA_RUN")
    if env:
        return env
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "softrdma")
    # memory-backed like /run: the sysfs tree is thousands of small files
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return f"/dev/shm/softrdma-{os.getuid()}"
    return f"/tmp/softrdma-{os.getuid()}"


def socket_path(run_dir: str | None = None) -> str:
    """The control socket of ``run_dir`` (default: ``default_run_dir()``)."""
    return os.path.join(run_dir if run_dir is not None else default_run_dir(), SOCKET_NAME)
