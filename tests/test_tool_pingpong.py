"""ibv_rc_pingpong / ibv_ud_pingpong (softrdma.tools.pingpong).

Three layers, each checked against docs/formats/pingpong.md and
../shared/interop/rxe-vm/NOTES.md rather than against the module itself:

* the out-of-band messages, byte for byte, with the bytes observed on rxe;
  the libc arithmetic (drand48, strtoul/strtol) against the real libc; the
  float rule of the summary lines against the worked examples;
* a fake peer: this file's own TCP code, written from the format, plays the
  real tool's side of the exchange against the tool's server and client
  roles (and its own verbs QP does the ping-pong), checking what the tool
  writes and when;
* both tools end to end as two processes on a real softrdmad, RC and UD,
  polling and with events, with -c; and the option errors.
"""

from __future__ import annotations

import ctypes
import queue
import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from daemon_helpers import RunningDaemon
from wait_helpers import free_port
from wait_helpers import wait_listening as _wait_listening
from softrdma.tools import pingpong as pp
from softrdma.tools.libc import Drand48
from softrdma.tools.pingpong import exchange, options

# --------------------------------------------------------------------------- the format, as the doc writes it
LOCAL_RC = re.compile(r"^  local address:  LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$")
LOCAL_UD = re.compile(r"^  local address:  LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}): GID (\S+)$")
REMOTE = re.compile(r"^  remote address: LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$")
BYTES_LINE = re.compile(r"^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d|inf) Mbit/sec$")
ITERS_LINE = re.compile(r"^(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d) usec/iter$")
WIRE_MSG = re.compile(rb"^([0-9a-f]{4}):([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{32})\x00$")

RC_USAGE = (
    "Usage:\n"
    "  ibv_rc_pingpong            start a server and wait for connection\n"
    "  ibv_rc_pingpong <host>     connect to server at <host>\n"
    "\n"
    "Options:\n"
    "  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n"
    "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
    "  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n"
    "  -s, --size=<size>      size of message to exchange (default 4096)\n"
    "  -m, --mtu=<size>       path MTU (default 1024)\n"
    "  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n"
    "  -n, --iters=<iters>    number of exchanges (default 1000)\n"
    "  -l, --sl=<sl>          service level value\n"
    "  -e, --events           sleep on CQ events (default poll)\n"
    "  -g, --gid-idx=<gid index> local port gid index\n"
    "  -o, --odp\t\t    use on demand paging\n"
    "  -O, --iodp\t\t    use implicit on demand paging\n"
    "  -P, --prefetch\t    prefetch an ODP MR\n"
    "  -t, --ts\t            get CQE with timestamp\n"
    "  -c, --chk\t            validate received buffer\n"
    "  -j, --dm\t            use device memory\n"
    "  -N, --new_send            use new post send WR API\n")
UD_USAGE = (
    "Usage:\n"
    "  ibv_ud_pingpong            start a server and wait for connection\n"
    "  ibv_ud_pingpong <host>     connect to server at <host>\n"
    "\n"
    "Options:\n"
    "  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n"
    "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
    "  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n"
    "  -s, --size=<size>      size of message to exchange (default 2048)\n"
    "  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n"
    "  -n, --iters=<iters>    number of exchanges (default 1000)\n"
    "  -l, --sl=<SL>          send messages with service level <SL> (default 0)\n"
    "  -e, --events           sleep on CQ events (default poll)\n"
    "  -g, --gid-idx=<gid index> local port gid index\n"
    "  -c, --chk              validate received buffer\n")

QKEY = 0x11111111


def wire_msg(lid: int, qpn: int, psn: int, gid: bytes) -> bytes:
    """The test's own encoder: sprintf("%04x:%06x:%06x:%s") + NUL, GID as
    the 16 raw bytes in hex."""
    return b"%04x:%06x:%06x:%s\x00" % (lid, qpn, psn, gid.hex().encode())


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def lines_consistent(out_lines: list[str], size: int, iters: int) -> None:
    """The two summary lines are what `float usec` of some whole number of
    microseconds gives (the doc's formula, computed here independently)."""
    b = BYTES_LINE.match(out_lines[0])
    it = ITERS_LINE.match(out_lines[1])
    assert b and it, out_lines
    assert int(b.group(1)) == size * iters * 2 and int(it.group(1)) == iters
    assert b.group(2) == it.group(2)
    guess = int(float(it.group(3)) * iters)
    for u in range(max(1, guess - iters - 2), guess + iters + 3):
        uf = f32(float(u))
        if ("%.2f" % (uf / 1e6), "%.2f" % (size * iters * 2 * 8.0 / uf), "%.2f" % f32(uf / f32(float(iters)))) \
                == (b.group(2), b.group(3), it.group(3)):
            return
    raise AssertionError(f"no whole-microsecond time gives {out_lines}")


# --------------------------------------------------------------------------- 1. the messages and the arithmetic
def test_oob_messages_byte_for_byte():
    v4 = bytes(10) + b"\xff\xff" + bytes([10, 77, 0, 2])
    observed = {   # NOTES.md, "Out-of-band exchange formats"
        (0x12, 0x9ab5ce, v4): b"0000:000012:9ab5ce:00000000000000000000ffff0a4d0002\x00",
        (0x11, 0xfa4ea0, v4): b"0000:000011:fa4ea0:00000000000000000000ffff0a4d0002\x00",
        (0x16, 0x2fff49, v4): b"0000:000016:2fff49:00000000000000000000ffff0a4d0002\x00",
        (0xa1, 0xe6f2d5, v4[:-1] + b"\x01"): b"0000:0000a1:e6f2d5:00000000000000000000ffff0a4d0001\x00",
    }
    for (qpn, psn, gid), raw in observed.items():
        assert len(raw) == 52 == exchange.MSG_SIZE
        assert exchange.encode_dest(exchange.Dest(0, qpn, psn, gid)) == raw == wire_msg(0, qpn, psn, gid)
        assert exchange.decode_dest(raw) == exchange.Dest(0, qpn, psn, gid)
    assert exchange.DONE == b"done\x00" and len(exchange.DONE) == 5
    # no -g: all-zero GID; the link-local GID keeps its byte order
    assert exchange.encode_dest(exchange.Dest(0, 0x11, 0, bytes(16))) == b"0000:000011:000000:" + b"0" * 32 + b"\x00"
    ll = bytes.fromhex("fe80000000000000505400fffe770002")
    assert exchange.encode_dest(exchange.Dest(0, 1, 2, ll))[19:51] == b"fe80000000000000505400fffe770002"
    # sscanf("%x:%x:%x:%s") is lenient: upper case, 0x prefixes, no NUL
    assert exchange.decode_dest(b"0000:0X00001A:00ABCD:00000000000000000000FFFF0A4D0002") == \
        exchange.Dest(0, 0x1a, 0xabcd, v4)


def test_summary_lines_float_rule():
    # docs/formats/pingpong.md: transcript, NOTES.md smoke line, UD example
    assert pp.result_lines(4096, 1000, 1300730) == (
        "8192000 bytes in 1.30 seconds = 50.38 Mbit/sec", "1000 iters in 1.30 seconds = 1300.73 usec/iter")
    assert pp.result_lines(4096, 500, 126615) == (
        "4096000 bytes in 0.13 seconds = 258.80 Mbit/sec", "500 iters in 0.13 seconds = 253.23 usec/iter")
    assert pp.result_lines(1024, 1000, 140000) == (
        "2048000 bytes in 0.14 seconds = 117.03 Mbit/sec", "1000 iters in 0.14 seconds = 140.00 usec/iter")
    for us in (1, 999, 123457, 16777217, 98765432):        # past 2^24 a float loses the last microseconds
        lines_consistent(list(pp.result_lines(4096, 1000, us)), 4096, 1000)


def test_psn_and_number_parsing_match_libc():
    libc = ctypes.CDLL(None)
    libc.lrand48.restype = ctypes.c_long
    libc.strtoul.restype = ctypes.c_ulong
    libc.strtol.restype = ctypes.c_long
    libc.strtoul.argtypes = libc.strtol.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    for seed in (0, 1, 12345 * 1732000000, -7, 2**40 + 99):
        libc.srand48(ctypes.c_long(seed))
        r = Drand48(seed)
        assert [r.lrand48() for _ in range(3)] == [libc.lrand48() for _ in range(3)]
    for s in ("18515", "0x4853", "010", "-1", " +12abc", "", "zz", "0x", "99999999999999999999999", "4294967297"):
        assert options.strtoul_uint(s) == libc.strtoul(s.encode(), None, 0) & 0xFFFFFFFF, s
        assert options.strtol_int(s) == ctypes.c_int(libc.strtol(s.encode(), None, 0) & 0xFFFFFFFF).value, s


# --------------------------------------------------------------------------- bad options (in process: no daemon)
@pytest.mark.parametrize("prog,argv,err", [
    ("ibv_rc_pingpong", ["-x"], "ibv_rc_pingpong: invalid option -- 'x'\n"),
    ("ibv_rc_pingpong", ["-m", "1000"], ""),
    ("ibv_rc_pingpong", ["-p", "65536"], ""),
    ("ibv_rc_pingpong", ["-i", "0"], ""),
    ("ibv_rc_pingpong", ["host1", "host2"], ""),
    ("ibv_rc_pingpong", ["-g"], "ibv_rc_pingpong: option requires an argument -- 'g'\n"),
    ("ibv_rc_pingpong", ["--port"], "ibv_rc_pingpong: option '--port' requires an argument\n"),
    ("ibv_rc_pingpong", ["--events=1"], "ibv_rc_pingpong: option '--events' doesn't allow an argument\n"),
    ("ibv_rc_pingpong", ["--i=1"],
     "ibv_rc_pingpong: option '--i=1' is ambiguous; possibilities: '--ib-dev' '--ib-port' '--iters' '--iodp'\n"),
    ("ibv_rc_pingpong", ["--bogus"], "ibv_rc_pingpong: unrecognized option '--bogus'\n"),
    ("ibv_ud_pingpong", ["-m", "1024"], "ibv_ud_pingpong: invalid option -- 'm'\n"),
    ("ibv_ud_pingpong", ["-o"], "ibv_ud_pingpong: invalid option -- 'o'\n"),
])
def test_bad_options_print_usage(capsys, prog, argv, err):
    assert pp.main(argv, prog) == 1
    out, got_err = capsys.readouterr()
    assert out == (UD_USAGE if "ud" in prog else RC_USAGE)
    assert got_err == err


@pytest.mark.parametrize("argv,err", [
    (["-o", "-j"], "DM memory region can't be on demand\n"),
    (["-P"], "prefetch is valid only with on-demand memory region\n"),
])
def test_rc_option_conflicts(capsys, argv, err):
    assert pp.main(argv, "ibv_rc_pingpong") == 1
    assert capsys.readouterr() == ("", err)


def test_bad_option_subprocess_no_traceback():
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibv_ud_pingpong", "-q"], capture_output=True, text=True,
                       timeout=20)
    assert (r.returncode, r.stdout, r.stderr) == (1, UD_USAGE, "ibv_ud_pingpong: invalid option -- 'q'\n")


# --------------------------------------------------------------------------- the daemon and helpers
@pytest.fixture(scope="module")
def daemon(shm_path_module):
    d = RunningDaemon(str(shm_path_module))
    yield d
    d.stop()


@pytest.fixture
def verbs_env(daemon, monkeypatch):
    monkeypatch.setenv("SOFTRDMA_RUN", daemon.run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    return daemon


@pytest.fixture(scope="module")
def gid_info(daemon):
    """(index, raw GID) of the daemon's IPv4 GID (::ffff:a.b.c.d), read
    from its GID table -- the index is the daemon's business."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOFTRDMA_RUN", daemon.run_dir)
        from softrdma.verbs import device
        with device.Context(name="rxe0") as ctx:
            for i in range(ctx.query_port(1).gid_tbl_len):
                raw = ctx.query_gid(1, i).raw
                if raw[:12] == bytes(10) + b"\xff\xff":
                    return i, raw
    pytest.fail("the daemon's rxe0 has no IPv4 GID")


def tool_env(daemon) -> dict:
    return {**daemon.env, "SOFTRDMA_AUTOSTART": "0"}


class Tool:
    """A tool subprocess whose output lines are collected as they come."""

    def __init__(self, daemon, tool: str, args: list[str]):
        self.proc = subprocess.Popen([sys.executable, "-m", "softrdma", tool, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=tool_env(daemon))
        self.out: queue.Queue = queue.Queue()
        self.err: list[str] = []
        self._t = [threading.Thread(target=self._pump, args=(self.proc.stdout, self.out.put), daemon=True),
                   threading.Thread(target=self._pump, args=(self.proc.stderr, self.err.append), daemon=True)]
        for t in self._t:
            t.start()
        self.lines: list[str] = []

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\n"))

    def line(self, timeout: float = 60.0) -> str:
        try:
            line = self.out.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"no output line; stderr: {self.err}") from None
        self.lines.append(line)
        return line

    def finish(self, timeout: float = 60.0) -> tuple[int, list[str], str]:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"tool did not exit; out {self.lines} err {self.err}") from None
        for t in self._t:
            t.join(5)
        while not self.out.empty():
            self.lines.append(self.out.get())
        return rc, self.lines, "".join(e + "\n" for e in self.err)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def wait_listening(tool: Tool, port: int) -> None:
    try:
        _wait_listening(port, tool.proc)
    except AssertionError as e:
        tool.kill()
        raise AssertionError(f"server never listened on {port}: {e} {tool.err}") from None


class VerbsPeer:
    """The RDMA half of the fake peer: one QP made with the verbs library,
    attributes as the doc lists them."""

    SEND_OFF = 16384

    def __init__(self, ud: bool, size: int, gid_index: int):
        from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_QPT_RC, IBV_QPT_UD
        from softrdma.verbs import cq, device, mr, pd, qp, wr
        self.wr = wr
        self.ud, self.size, self.gid_index = ud, size, gid_index
        self.ctx = device.Context(name="rxe0")
        self.gid = self.ctx.query_gid(1, gid_index).raw
        self.pd = pd.PD(self.ctx)
        self.mr = mr.MR(self.pd, 2 * self.SEND_OFF, IBV_ACCESS_LOCAL_WRITE)
        self.mr.write(b"\x7b" * (2 * self.SEND_OFF))
        self.cq = cq.CQ(self.ctx, 64)
        self.qp = qp.QP(self.pd, qp.QPInitAttr(IBV_QPT_UD if ud else IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                               cap=qp.QPCap(4, 16, 1, 1)))
        self.psn = 0x2468ac
        a = qp.QPAttr()
        a.qkey = QKEY
        self.qp.to_init(a)
        for _ in range(8):
            self.post_recv()
        self.ah = None
        self.rem_qpn = 0
        self.seen: list = []

    def post_recv(self):
        w = self.wr
        self.qp.post_recv(w.RecvWR(1, 1, [w.SGE(self.mr.buf, self.size + (40 if self.ud else 0), self.mr.lkey)]))

    def connect(self, qpn: int, psn: int, gid: bytes):
        from softrdma.enums import IBV_MTU_1024
        from softrdma.verbs import addr, qp
        route = addr.AHAttr(gr=addr.GlobalRoute(dgid=addr.GID(gid), sgid_index=self.gid_index, hop_limit=1),
                            is_global=1, port_num=1)
        a = qp.QPAttr()
        a.sq_psn = self.psn
        if self.ud:
            self.qp.to_rts(a)
            self.ah = addr.AH(self.pd, route)
        else:
            a.path_mtu, a.dest_qp_num, a.rq_psn = IBV_MTU_1024, qpn, psn
            a.max_dest_rd_atomic = a.max_rd_atomic = 1
            a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
            a.ah_attr = route
            self.qp.to_rts(a)
        self.rem_qpn = qpn

    def send(self):
        w = self.wr
        s = w.SendWR(2, sg=[w.SGE(self.mr.buf + self.SEND_OFF, self.size, self.mr.lkey)])
        if self.ud:
            s.set_wr_ud(self.ah, self.rem_qpn, QKEY)
        self.qp.post_send(s)

    def wait(self, wr_id: int, timeout: float = 60.0):
        """The next completion of ``wr_id`` (1 receive, 2 send), successful."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for wc in self.seen:
                if wc.wr_id == wr_id:
                    self.seen.remove(wc)
                    return wc
            n, wcs = self.cq.poll(4)
            for wc in wcs:
                assert wc.status == 0, (wc.wr_id, wc.status)
                if wc.wr_id == 1:
                    self.post_recv()
            self.seen += wcs
            if not n:
                time.sleep(0.0005)
        raise AssertionError(f"no completion for wr_id {wr_id}")

    def close(self):
        self.ctx.close()


def recv_exact(s: socket.socket, n: int, timeout: float = 60.0) -> bytes:
    s.settimeout(timeout)
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def quiet(s: socket.socket, t: float = 0.3) -> bool:
    """Nothing arrives on s within t seconds."""
    return not select.select([s], [], [], t)[0]


def parse_wire(raw: bytes) -> tuple[int, int, int, bytes]:
    m = WIRE_MSG.match(raw)
    assert m, raw
    return int(m[1], 16), int(m[2], 16), int(m[3], 16), bytes.fromhex(m[4].decode())


# --------------------------------------------------------------------------- 2. the fake peer
@pytest.mark.parametrize("tool", ["ibv_rc_pingpong", "ibv_ud_pingpong"])
def test_fake_client_against_server(verbs_env, gid_info, tool):
    """The test plays the real client: it connects, writes its 52 bytes,
    reads the server's 52, sends the first message before "done" (the
    server's QP must already be ready), then "done"; then the ping-pong."""
    ud = tool == "ibv_ud_pingpong"
    gidx, gid = gid_info
    size, iters = (1024 if ud else 4096), 3
    peer = VerbsPeer(ud, size, gidx)
    port = free_port()
    srv = Tool(verbs_env, tool, ["-g", str(gidx), "-p", str(port), "-n", str(iters), "-c"])
    try:
        local = (LOCAL_UD if ud else LOCAL_RC).match(srv.line())
        assert local, srv.lines
        lid, qpn, psn = (int(local[i], 16) for i in (1, 2, 3))
        assert lid == 0 and local[4] == socket.inet_ntop(socket.AF_INET6, gid)
        wait_listening(srv, port)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            assert quiet(s), "the server wrote before the client's message"
            s.sendall(wire_msg(0, peer.qp.qp_num, peer.psn, peer.gid))
            reply = recv_exact(s, 52)
            assert parse_wire(reply) == (0, qpn, psn, gid)
            assert quiet(s), "the server wrote more than its 52 bytes"
            peer.connect(qpn, psn, gid)
            peer.send()                              # before "done": the server's QP is RTR/RTS already
            peer.wait(2)
            s.sendall(b"done\x00")
            s.settimeout(60)
            assert s.recv(16) == b"", "the server must close after reading done"
        for i in range(iters):
            peer.wait(1)
            if i < iters - 1:
                peer.send()
                peer.wait(2)
        rc, out, err = srv.finish()
    finally:
        srv.kill()
        peer.close()
    assert rc == 0 and err == "", (out, err)
    assert REMOTE.match(out[1]).groups() == ("0000", "%06x" % peer.qp.qp_num, "%06x" % peer.psn,
                                             socket.inet_ntop(socket.AF_INET6, gid))
    lines_consistent(out[2:4], size, iters)
    # -c on the server: the first byte of each page must be 0; ours is 0x7b
    assert out[4:] == ["invalid data in page 0"]


@pytest.mark.parametrize("tool", ["ibv_rc_pingpong", "ibv_ud_pingpong"])
def test_fake_server_against_client(verbs_env, gid_info, tool):
    """The test plays the real server: the client must write its 52 bytes
    at once, wait for the reply, then write exactly "done\\0" and close, and
    only then send first."""
    ud = tool == "ibv_ud_pingpong"
    gidx, gid = gid_info
    size, iters = (1024 if ud else 4096), 3
    peer = VerbsPeer(ud, size, gidx)
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    cli = Tool(verbs_env, tool, ["-g", str(gidx), "-p", str(port), "-n", str(iters), "127.0.0.1"])
    try:
        local = (LOCAL_UD if ud else LOCAL_RC).match(cli.line())
        assert local, cli.lines
        qpn, psn = int(local[2], 16), int(local[3], 16)
        lsock.settimeout(60)
        s, _ = lsock.accept()
        with s:
            msg = recv_exact(s, 52)
            assert parse_wire(msg) == (0, qpn, psn, gid)
            assert quiet(s), "the client wrote more before the server's reply"
            peer.connect(qpn, psn, gid)              # as the real server: ready before replying
            s.sendall(wire_msg(0, peer.qp.qp_num, peer.psn, peer.gid))
            assert recv_exact(s, 5) == b"done\x00"
            s.settimeout(60)
            assert s.recv(16) == b"", "the client must close after done"
        for _ in range(iters):
            peer.wait(1)
            peer.send()
            peer.wait(2)
        rc, out, err = cli.finish()
    finally:
        cli.kill()
        lsock.close()
        peer.close()
    assert rc == 0 and err == "", (out, err)
    assert REMOTE.match(out[1]).groups() == ("0000", "%06x" % peer.qp.qp_num, "%06x" % peer.psn,
                                             socket.inet_ntop(socket.AF_INET6, gid))
    lines_consistent(out[2:4], size, iters)
    assert len(out) == 4


@pytest.mark.parametrize("tool,errors", [
    ("ibv_rc_pingpong", "Failed to modify QP to RTR\nCouldn't connect to remote QP\n"),
    ("ibv_ud_pingpong", "Failed to create AH\nCouldn't connect to remote QP\n"),
])
def test_peer_without_gid_has_no_grh(verbs_env, gid_info, tool, errors):
    """A client run without -g sends an all-zero GID: no GRH, which RoCE
    cannot do -- the server fails as the real one does on rxe, and closes
    the connection without replying."""
    port = free_port()
    srv = Tool(verbs_env, tool, ["-g", str(gid_info[0]), "-p", str(port), "-n", "1"])
    try:
        srv.line()
        wait_listening(srv, port)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(wire_msg(0, 0x99, 0x1234, bytes(16)))
            assert recv_exact(s, 52) == b""
        rc, out, err = srv.finish()
    finally:
        srv.kill()
    assert (rc, len(out), err) == (1, 1, errors)


def test_server_short_first_message(verbs_env, gid_info):
    port = free_port()
    srv = Tool(verbs_env, "ibv_rc_pingpong", ["-g", str(gid_info[0]), "-p", str(port)])
    try:
        srv.line()
        wait_listening(srv, port)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"0000:000012")
        rc, out, err = srv.finish()
    finally:
        srv.kill()
    assert (rc, err) == (1, "server read: Success\n11/52: Couldn't read remote address\n")


# --------------------------------------------------------------------------- 3. end to end
@pytest.mark.parametrize("tool,extra", [
    ("ibv_rc_pingpong", []),
    ("ibv_rc_pingpong", ["-e", "-c"]),
    ("ibv_rc_pingpong", ["-j"]),                    # the buffer in device memory (ibv_alloc_dm, ibv_reg_dm_mr)
    ("ibv_rc_pingpong", ["-o", "-c"]),              # an ODP MR on the tool's buffer
    ("ibv_rc_pingpong", ["-O", "-P"]),              # implicit ODP, the buffer prefetched (ibv_advise_mr)
    ("ibv_ud_pingpong", ["-c"]),
    ("ibv_ud_pingpong", ["-e"]),
])
def test_end_to_end(daemon, gid_info, tool, extra):
    ud = tool == "ibv_ud_pingpong"
    gidx, gid = gid_info
    iters = 20
    port = free_port()
    args = ["-g", str(gidx), "-p", str(port), "-n", str(iters), *extra]
    srv = Tool(daemon, tool, args)
    cli = None
    try:
        wait_listening(srv, port)
        cli = Tool(daemon, tool, [*args, "127.0.0.1"])
        crc, cout, cerr = cli.finish()
        src, sout, serr = srv.finish()
    finally:
        srv.kill()
        if cli:
            cli.kill()
    assert (src, serr, crc, cerr) == (0, "", 0, ""), (sout, serr, cout, cerr)
    local = LOCAL_UD if ud else LOCAL_RC
    size = 1024 if ud else 4096
    for out in (sout, cout):
        assert len(out) == 4, out                     # no "invalid data in page" with -c on both sides
        assert local.match(out[0]) and REMOTE.match(out[1])
        assert local.match(out[0])[4] == REMOTE.match(out[1])[4] == socket.inet_ntop(socket.AF_INET6, gid)
        lines_consistent(out[2:], size, iters)
    assert local.match(sout[0]).groups()[:3] == REMOTE.match(cout[1]).groups()[:3]
    assert local.match(cout[0]).groups()[:3] == REMOTE.match(sout[1]).groups()[:3]


def test_completion_timestamps_end_to_end(daemon, gid_info):
    """-t: the CQ is an extended CQ whose completions carry the device's
    clock; after the two summary lines each side prints rc_pingpong's
    receive-completion clock statistics."""
    gidx, _ = gid_info
    iters = 50
    port = free_port()
    args = ["-g", str(gidx), "-p", str(port), "-n", str(iters), "-t"]
    srv = Tool(daemon, "ibv_rc_pingpong", args)
    cli = None
    try:
        wait_listening(srv, port)
        cli = Tool(daemon, "ibv_rc_pingpong", [*args, "127.0.0.1"])
        crc, cout, cerr = cli.finish()
        src, sout, serr = srv.finish()
    finally:
        srv.kill()
        if cli:
            cli.kill()
    assert (src, serr, crc, cerr) == (0, "", 0, ""), (sout, serr, cout, cerr)
    for out in (sout, cout):
        assert len(out) == 7, out
        lines_consistent(out[2:4], 4096, iters)
        mx = re.fullmatch(r"Max receive completion clock cycles = (\d+)", out[4])
        mn = re.fullmatch(r"Min receive completion clock cycles = (\d+)", out[5])
        avg = re.fullmatch(r"Average receive completion clock cycles = (\d+\.\d{6})", out[6])
        assert mx and mn and avg, out
        assert 0 < int(mn[1]) <= float(avg[1]) <= int(mx[1])


# --------------------------------------------------------------------------- device-side errors (in process)
def test_ts_refused_without_a_completion_clock(verbs_env, capsys, monkeypatch):
    """A device whose query_device_ex reports no completion_timestamp_mask:
    rc_pingpong's own refusal of -t."""
    from softrdma.verbs import device
    real = device.Context.query_device_ex

    def no_clock(ctx):
        attr = real(ctx)
        attr.completion_timestamp_mask = 0
        return attr
    monkeypatch.setattr(device.Context, "query_device_ex", no_clock)
    assert pp.main(["-t"], "ibv_rc_pingpong") == 1
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and lines[0] == "The device isn't completion timestamp capable" and len(lines) == 2, err
    assert lines[1].startswith("ibv_rc_pingpong: -t: the device reports no completion timestamp mask")


def test_device_errors(verbs_env, gid_info, capsys):
    from softrdma.verbs import device
    with device.Context(name="rxe0") as ctx:
        mtu = 1 << (ctx.query_port(1).active_mtu + 7)
    cases = [
        ("ibv_rc_pingpong", ["-d", "mlx5_0"], "IB device mlx5_0 not found\n"),
        ("ibv_ud_pingpong", ["-d", "mlx5_0"], "IB device mlx5_0 not found\n"),
        ("ibv_rc_pingpong", ["-g", "5000"], "can't read sgid of index 5000\n"),
        ("ibv_ud_pingpong", ["-g", "5000"], "Could not get local gid for gid index 5000\n"),
        ("ibv_ud_pingpong", ["-s", str(mtu + 1)], f"Requested size larger than port MTU ({mtu})\n"),
        ("ibv_ud_pingpong", ["-i", "2"], "Unable to query port info for port 2\n"),
        ("ibv_rc_pingpong", ["-i", "2"], "Failed to modify QP to INIT\n"),
    ]
    for prog, argv, err in cases:
        assert pp.main(argv, prog) == 1, (prog, argv)
        assert capsys.readouterr().err == err, (prog, argv)
