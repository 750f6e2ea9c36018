"""What softrdma's rdma_cm examples (rping, ucmatose, udaddy) share, as
rdma-core's librdmacm/examples/common.c is shared by theirs.

It owns:

* the output: ``_out`` (stdout, flushed), ``_err`` (stderr, after flushing
  stdout), ``perror`` and the errno of a failed call (``_errno_of``);
* the small C helpers the tools parse and clean up with: ``atoi``,
  ``_close``, and ``Getopt`` (plain getopt with glibc's diagnostics, no
  long options: cmatose's and udaddy's);
* common.c's ``get_rdma_addr`` (``getaddrinfo`` here, ``GaiError``) and
  ``create_first_event_channel``;
* ``Options``: the options cmatose and udaddy both have.

Every message a tool prints with these is the tool's own: the helpers take
the text (or the tool's name) from their caller.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from .libc import GetoptLong, c_int, strtol


# ---------------------------------------------------------------------- output
def _out(msg: str) -> None:
    sys.stdout.write(msg)
    sys.stdout.flush()


def _err(msg: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(msg)
    sys.stderr.flush()


def _errno_of(e: BaseException | None) -> int:
    code = getattr(e, "error_code", None) or getattr(e, "errno", None) or errno.EINVAL
    return abs(code)


def perror(what: str, e: BaseException | None = None) -> int:
    """perror(what) for a call that failed with ``e``; the errno."""
    code = _errno_of(e)
    _err(f"{what}: {os.strerror(code)}\n")
    return code


# ---------------------------------------------------------------------- C helpers
def atoi(s: str) -> int:
    """C atoi(): strtol base 10 converted to int."""
    return c_int(strtol(s, 10))


def _close(obj) -> None:
    if obj is None:
        return
    try:
        obj.close()
    except Exception:
        pass


class Getopt(GetoptLong):
    """Plain getopt: no long options, so ``--word`` is the option '-'
    (cmatose stops at the first error, the rest of the word is not read)."""

    def _long(self, body: str, i: int):
        self._err("invalid option -- '-'")
        return i, ("?", None)


# ---------------------------------------------------------------------- common.c
class GaiError(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(code, text)
        self.code = code
        self.text = text


def getaddrinfo(node: str | None, service: str | None, o: Options, passive: bool) -> tuple[str, int]:
    """get_rdma_addr / rdma_getaddrinfo's address: (numeric address, port);
    GaiError as getaddrinfo's (negative EAI code, gai_strerror text)."""
    if o.af_ib:
        # AF_IB (struct sockaddr_ib) does not exist in softrdma's rdma_cm
        raise GaiError(socket.EAI_FAMILY, "ai_family not supported")
    flags = (socket.AI_PASSIVE if passive else 0) | (socket.AI_NUMERICHOST if o.numeric else 0)
    try:
        res = socket.getaddrinfo(node, service, 0, o.socktype, 0, flags)
    except socket.gaierror as e:
        raise GaiError(e.errno, e.strerror) from None
    except UnicodeError:
        raise GaiError(socket.EAI_NONAME, "Name or service not known") from None
    for family, _, _, _, sa in res:
        if family in (socket.AF_INET, socket.AF_INET6):
            return sa[0], sa[1]
    raise GaiError(socket.EAI_FAMILY, "ai_family not supported")


def create_first_event_channel():
    """common.c's create_first_event_channel(): the CMEventChannel, or the
    errno after the message.  librdmacm's ucma_init lists the verbs devices
    first (this also starts softrdma's embedded daemon when none runs)."""
    from ..pyverbs.cmid import CMEventChannel
    from ..pyverbs.device import get_device_list
    from ..pyverbs.pyverbs_error import PyverbsError
    try:
        if not get_device_list():
            raise PyverbsError("no devices", errno.ENODEV)
        return CMEventChannel()
    except PyverbsError as e:
        if e.error_code == errno.ENODEV:
            _err("No RDMA devices were detected\n")
        else:
            perror("failed to create RDMA CM event channel", e)
        return e.error_code or errno.ENODEV


# ---------------------------------------------------------------------- cmatose's and udaddy's options
class Options:
    def __init__(self, port: str):
        self.connections = 1
        self.message_size = 100
        self.message_count = 10
        self.port = port
        self.set_tos = False
        self.tos = 0
        self.set_timeout = False
        self.timeout = 0
        self.migrate = False
        self.dst_addr: str | None = None
        self.src_addr: str | None = None
        self.numeric = False            # RAI_NUMERICHOST
        self.af_ib = False              # -f gid: RAI_FAMILY, AF_IB
        self.port_space = None          # RDMA_PS_TCP unless -P ib (udaddy: RDMA_PS_UDP)
        self.socktype = socket.SOCK_STREAM  # rdma_getaddrinfo's for the port space (udaddy: datagram)
