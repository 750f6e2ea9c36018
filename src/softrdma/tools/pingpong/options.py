"""ibv_*_pingpong's command line: the real main()'s getopt_long loop, its
option strings, usage texts and checks, with C's argument conversions."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ...enums import IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_256, IBV_MTU_4096, IBV_MTU_512
from ..libc import GetoptLong, c_int, strtol, strtoul

RC_OPTSTRING = "p:d:i:s:m:r:n:l:eg:oOPtcjN"
RC_LONGOPTS = (("port", 1, "p"), ("ib-dev", 1, "d"), ("ib-port", 1, "i"), ("size", 1, "s"), ("mtu", 1, "m"),
               ("rx-depth", 1, "r"), ("iters", 1, "n"), ("sl", 1, "l"), ("events", 0, "e"), ("gid-idx", 1, "g"),
               ("odp", 0, "o"), ("iodp", 0, "O"), ("prefetch", 0, "P"), ("ts", 0, "t"), ("chk", 0, "c"),
               ("dm", 0, "j"), ("new_send", 0, "N"))
UD_OPTSTRING = "p:d:i:s:r:n:l:eg:c"
UD_LONGOPTS = (("port", 1, "p"), ("ib-dev", 1, "d"), ("ib-port", 1, "i"), ("size", 1, "s"), ("rx-depth", 1, "r"),
               ("iters", 1, "n"), ("sl", 1, "l"), ("events", 0, "e"), ("gid-idx", 1, "g"), ("chk", 0, "c"))

RC_USAGE = """\
Usage:
  {0}            start a server and wait for connection
  {0} <host>     connect to server at <host>

Options:
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)
  -i, --ib-port=<port>   use port <port> of IB device (default 1)
  -s, --size=<size>      size of message to exchange (default 4096)
  -m, --mtu=<size>       path MTU (default 1024)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<sl>          service level value
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index
  -o, --odp\t\t    use on demand paging
  -O, --iodp\t\t    use implicit on demand paging
  -P, --prefetch\t    prefetch an ODP MR
  -t, --ts\t            get CQE with timestamp
  -c, --chk\t            validate received buffer
  -j, --dm\t            use device memory
  -N, --new_send            use new post send WR API
"""

UD_USAGE = """\
Usage:
  {0}            start a server and wait for connection
  {0} <host>     connect to server at <host>

Options:
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)
  -i, --ib-port=<port>   use port <port> of IB device (default 1)
  -s, --size=<size>      size of message to exchange (default 2048)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<SL>          send messages with service level <SL> (default 0)
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index
  -c, --chk              validate received buffer
"""

# Why the RC tool's device-feature options cannot work here (printed after
# the real tool's own message).


def strtoul_uint(s: str) -> int:
    """``unsigned int x = strtoul(optarg, NULL, 0)``."""
    return strtoul(s) & 0xFFFFFFFF


def strtol_int(s: str) -> int:
    """``int x = strtol(optarg, NULL, 0)``."""
    return c_int(strtol(s))


def mtu_to_enum(mtu: int) -> int:
    """pp_mtu_to_enum(); 0 for a size that is not an IB MTU (the v44 tool
    rejects those with the usage text)."""
    return {256: IBV_MTU_256, 512: IBV_MTU_512, 1024: IBV_MTU_1024, 2048: IBV_MTU_2048,
            4096: IBV_MTU_4096}.get(mtu, 0)


# --------------------------------------------------------------------------- options
@dataclass
class Options:
    ud: bool
    port: int = 18515
    ib_devname: str | None = None
    ib_port: int = 1
    size: int = 4096
    mtu: int = IBV_MTU_1024
    rx_depth: int = 500
    iters: int = 1000
    sl: int = 0
    use_event: bool = False
    gidx: int = -1
    use_odp: bool = False
    implicit_odp: bool = False
    prefetch_mr: bool = False
    use_ts: bool = False
    validate_buf: bool = False
    use_dm: bool = False
    use_new_send: bool = False
    servername: str | None = None


def parse_args(argv: list[str], prog: str, ud: bool) -> Options | int:
    """The real main()'s option loop: Options, or the exit code after the
    usage text."""
    usage = (UD_USAGE if ud else RC_USAGE).format(prog)
    o = Options(ud=ud, size=1024 if ud else 4096)
    getopt = GetoptLong(argv, prog, UD_OPTSTRING if ud else RC_OPTSTRING, UD_LONGOPTS if ud else RC_LONGOPTS)
    for c, arg in getopt:
        if c in ("?", ":"):                      # getopt already printed glibc's message
            sys.stdout.write(usage)
            return 1
        if c == "p":
            # RC: strtoul; UD: strtol into the same unsigned int -- identical after truncation
            o.port = strtoul_uint(arg) if not ud else strtol(arg) & 0xFFFFFFFF
            if o.port > 65535:
                sys.stdout.write(usage)
                return 1
        elif c == "d":
            o.ib_devname = arg
        elif c == "i":
            o.ib_port = strtol_int(arg)
            if o.ib_port < 1:
                sys.stdout.write(usage)
                return 1
        elif c == "s":
            o.size = strtoul_uint(arg)
        elif c == "m":
            o.mtu = mtu_to_enum(strtol_int(arg))
            if o.mtu == 0:
                sys.stdout.write(usage)
                return 1
        elif c == "r":
            o.rx_depth = strtoul_uint(arg)
        elif c == "n":
            o.iters = strtoul_uint(arg)
        elif c == "l":
            o.sl = strtol_int(arg)
        elif c == "e":
            o.use_event = True
        elif c == "g":
            o.gidx = strtol_int(arg)
        elif c == "o":
            o.use_odp = True
        elif c == "P":
            o.prefetch_mr = True
        elif c == "O":
            o.use_odp = o.implicit_odp = True
        elif c == "t":
            o.use_ts = True
        elif c == "c":
            o.validate_buf = True
        elif c == "j":
            o.use_dm = True
        elif c == "N":
            o.use_new_send = True
    operands = getopt.operands
    if len(operands) == 1:
        o.servername = operands[0]
    elif operands:
        sys.stdout.write(usage)
        return 1
    return o


