"""rping, as rdma-core's librdmacm/examples/rping.c has it.

What a user or a peer sees is the real tool's (docs/formats/rping.md):

* the options (``getopt(argc, argv, "a:I:Pp:C:S:t:scvVdq")`` with
  ``opterr = 0``: an unknown option, a missing argument and ``-t`` all give
  the usage text and exit 22, EINVAL), the checks of ``-S`` (26 to 65535)
  and ``-C``, the usage text, every message and the exit codes (``ret`` of
  main, so -1 is 255);
* the wire: an RC connection made with rdma_cm (port space TCP, default
  port 7174, responder resources and initiator depth 1, retry and RNR
  retry 7), one receive of ``struct rping_rdma_info`` (be64 buf, be32 rkey,
  be32 size: 16 bytes) re-posted after each receive, and the ping-pong:
  the client SENDs its source buffer's address/rkey/size, the server RDMA
  READs it and SENDs "go ahead" (its own 16-byte send buffer, contents
  unchanged), the client SENDs its sink buffer's info, the server RDMA
  WRITEs ``strlen + 1`` bytes of what it read there and SENDs "go ahead";
* the ping data: ``"rdma-ping-%d: "`` then letters from ``start`` (65, one
  more each ping, wrapping after 122) counting up to 122 and wrapping to
  65, the last byte NUL;
* the CM events and what rping prints for them ("cma event %s, error %d"
  then exit 255 for the error events, "client DISCONNECT EVENT..." /
  "server DISCONNECT EVENT...").

rping is three threads (the CM event thread, the CQ thread and the main
thread, which waits on a semaphore the other two post).  This module is one
thread doing the same: ``Rping.sem_wait`` handles CM events and CQ
completions with rping's two handlers, in arrival order, until one of them
posts the semaphore.  ``-P`` (persistent server) serves the connections one
after another rather than one thread each: a second client's request waits
(in the listen backlog of 3) until the first client is done.

The tool uses only ``softrdma.pyverbs`` (``cmid``, ``cq``, ``mr``, ``qp``,
``wr``).

rping.c is one file; here this module is its main() (options, the CM ID),
:mod:`.cb` struct rping_cb with the two event handlers and the resources
both sides set up, :mod:`.server` and :mod:`.client` the two sides' runs.
"""

from __future__ import annotations

import errno
import socket
import sys

from ...pyverbs.cmid import CMID
from ...pyverbs.librdmacm_enums import RDMA_PS_TCP
from ...pyverbs.pyverbs_error import PyverbsError
from ..cma_common import _close, _err, _out, atoi, create_first_event_channel, perror
from . import client, server
from .cb import RPING_BUFSIZE, RPING_MIN_BUFSIZE, Exit, Rping, ptr_str

OPTSTRING = "a:I:Pp:C:S:t:scvVdq"

USAGE = (
    "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n"
    "rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n"
    "\t-c\t\tclient side\n"
    "\t-I\t\tSource address to bind to for client.\n"
    "\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n"
    "\t-v\t\tdisplay ping data to stdout\n"
    "\t-V\t\tvalidate ping data\n"
    "\t-d\t\tdebug printfs\n"
    "\t-S size \tping data size\n"
    "\t-C count\tping count times\n"
    "\t-a addr\t\taddress\n"
    "\t-p port\t\tport\n"
    "\t-P\t\tpersistent server mode allowing multiple connections\n"
    "\t-q\t\tuse self-created, self-modified QP\n"
)


def getopt(argv: list[str], optstring: str):
    """POSIX getopt with ``opterr = 0`` (no diagnostics), glibc's argument
    permutation; yields ``(opt, optarg)``, ``("?", None)`` for an unknown
    option or a missing argument."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return
        if a[:1] != "-" or a == "-":
            i += 1                              # operands are permuted to the end; rping has none
            continue
        i += 1
        j = 1
        while j < len(a):
            c = a[j]
            k = optstring.find(c)
            if c == ":" or k < 0:
                yield "?", None
                j += 1
                continue
            if optstring[k + 1:k + 2] == ":":
                if j + 1 < len(a):
                    yield c, a[j + 1:]
                elif i < len(argv):
                    yield c, argv[i]
                    i += 1
                else:
                    yield "?", None
                break
            yield c, None
            j += 1


def get_addr(dst: str) -> tuple[int, str] | int:
    """getaddrinfo(dst, NULL, NULL, &res): the first address (family, text),
    or the getaddrinfo error (negative) after rping's message."""
    try:
        res = socket.getaddrinfo(dst, None)
    except socket.gaierror as e:
        _out(f"getaddrinfo failed ({e.strerror}) - invalid hostname or IP address\n")
        return e.errno if e.errno else -1
    except UnicodeError:
        _out("getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n")
        return socket.EAI_NONAME
    family, _, _, _, sa = res[0]
    if family not in (socket.AF_INET, socket.AF_INET6):
        return -1
    return family, sa[0]


def parse(argv: list[str], cb: Rping) -> int:
    """main()'s option loop; 0 or the exit status."""
    ret = 0
    for op, optarg in getopt(argv, OPTSTRING):
        if op == "a":
            r = get_addr(optarg)
            if isinstance(r, tuple):
                cb.sin, ret = r, 0
            else:
                ret = r
        elif op == "I":
            r = get_addr(optarg)
            if isinstance(r, tuple):
                cb.ssource, ret = r, 0
            else:
                ret = r
        elif op == "P":
            cb.persistent = 1
        elif op == "p":
            cb.port = atoi(optarg) & 0xFFFF
            cb.log(f"port {atoi(optarg)}\n")
        elif op == "s":
            cb.server = 1
            cb.log("server\n")
        elif op == "c":
            cb.server = 0
            cb.log("client\n")
        elif op == "S":
            cb.size = atoi(optarg)
            if cb.size < RPING_MIN_BUFSIZE or cb.size > RPING_BUFSIZE - 1:
                _err(f"Invalid size {cb.size} (valid range is {RPING_MIN_BUFSIZE} to {RPING_BUFSIZE})\n")
                ret = errno.EINVAL
            else:
                ret = 0
                cb.log(f"size {atoi(optarg)}\n")
        elif op == "C":
            cb.count = atoi(optarg)
            if cb.count < 0:
                _err(f"Invalid count {cb.count}\n")
                ret = errno.EINVAL
            else:
                ret = 0
                cb.log(f"count {cb.count}\n")
        elif op == "v":
            cb.verbose += 1
            cb.log("verbose\n")
        elif op == "V":
            cb.validate += 1
            cb.log("validate data\n")
        elif op == "d":
            cb.debug += 1
        elif op == "q":
            cb.self_create_qp = 1
        else:
            _out(USAGE)
            return errno.EINVAL
    if ret:
        return ret
    if cb.server == -1:
        _out(USAGE)
        return errno.EINVAL
    return 0


def main(argv: list[str] | None = None, prog: str = "rping") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cb = Rping()
    ret = parse(argv, cb)
    if ret:
        return ret & 0xFF
    try:
        return _run(cb) & 0xFF
    except Exit as e:
        return e.code
    finally:
        sys.stdout.flush()


def _run(cb: Rping) -> int:
    channel = create_first_event_channel()
    if isinstance(channel, int):
        return channel
    cb.cm_channel = channel
    try:
        try:
            cb.cm_id = CMID(creator=cb.cm_channel, port_space=RDMA_PS_TCP)
        except PyverbsError as e:
            perror("rdma_create_id", e)
            return -1
        cb.log(f"created cm_id {ptr_str(cb.cm_id)}\n")
        if cb.server:
            ret = server.run_persistent_server(cb) if cb.persistent else server.run_server(cb)
        else:
            ret = client.run_client(cb)
        cb.log(f"destroy cm_id {ptr_str(cb.cm_id)}\n")
        _close(cb.cm_id)
        return ret
    finally:
        _close(cb.cm_channel)
