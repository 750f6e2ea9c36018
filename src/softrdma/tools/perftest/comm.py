"""perftest's out-of-band exchange over TCP (perftest_communication.c, the
"Data ex. method : Ethernet" path), byte for byte.

Every message is one ``write()`` of a fixed size; the reader asks for
exactly that size.  For every step the client writes first and then reads,
the server reads first and then writes (``ctx_xchg_data_ethernet``,
``ctx_hand_shake``).  The steps a run goes through, in order:

1. version: ``char version[16]`` (``"6.24"`` + NULs; a 4.5-0.17 peer sends
   ``"6.06"``), skipped with ``--dont_xchg_versions``;
2. ``check_sys_data``: cycle buffer and cache line size, each a big-endian
   ``int``, only if the peer's version is >= 5.32; each side keeps the max;
3. ``check_mtu``: the active MTU enum as ``"%d"`` -- 2 bytes (``"3\\0"``) if
   the peer is >= 5.31, else ``sizeof(int)`` = 4 -- only if the peer is >=
   5.1; each side uses the smaller valid one;
4. per QP, the keys (``ctx_hand_shake``): 108 bytes
   ``"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:"`` and NUL
   (LID, outstanding reads, QPN, PSN, RKey, VAddr, the 16 GID bytes, SRQN)
   when a GID index is in use -- always on RoCE -- else the 59-byte
   ``"%04x:%04x:%06x:%06x:%08x:%016llx:%08x"``;
5. more key exchanges as synchronisation points (after RTR, before and after
   the measurement, per message size in the ``-a`` sweeps of SEND);
6. ``xchg_bw_reports``: five fields one by one -- size (``unsigned long``,
   big-endian 8 bytes), iterations (8 bytes if the peer is >= 5.33, else a
   4-byte ``int``), peak BW, average BW, message rate (IEEE doubles,
   big-endian);
7. ``ctx_close_connection``: one more key exchange, then close.  perftest
   4.5-0.17 (the version Debian ships, "6.06" on the wire) also writes
   ``"done\\0"`` before closing and nobody reads it; softrdma writes it too,
   so a capture matches that peer byte for byte, and never waits for it.
"""

from __future__ import annotations

import socket
import struct
import sys
from dataclasses import dataclass

from .. import oob
from ..libc import strtol, strtoul

KEY_MSG_SIZE = 59
KEY_MSG_SIZE_GID = 108
MAX_VERSION = 16
DONE = b"done\0"

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_F64 = struct.Struct(">d")


class CommError(Exception):
    """An exchange step failed; its messages are already on stderr."""


def _err(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


@dataclass
class Dest:
    """struct pingpong_dest."""
    lid: int = 0
    out_reads: int = 0
    qpn: int = 0
    psn: int = 0
    rkey: int = 0
    vaddr: int = 0
    gid: bytes = bytes(16)
    srqn: int = 0
    gid_index: int = -1


def encode_keys(d: Dest) -> bytes:
    """ethernet_write_keys(): the message, NUL included, exactly the C sizes."""
    if d.gid_index == -1:
        s = "%04x:%04x:%06x:%06x:%08x:%016x:%08x" % (
            d.lid & 0xFFFFFFFF, d.out_reads & 0xFFFFFFFF, d.qpn & 0xFFFFFFFF, d.psn & 0xFFFFFFFF,
            d.rkey & 0xFFFFFFFF, d.vaddr & 0xFFFFFFFFFFFFFFFF, d.srqn & 0xFFFFFFFF)
        size = KEY_MSG_SIZE
    else:
        s = "%04x:%04x:%06x:%06x:%08x:%016x:" % (
            d.lid & 0xFFFFFFFF, d.out_reads & 0xFFFFFFFF, d.qpn & 0xFFFFFFFF, d.psn & 0xFFFFFFFF,
            d.rkey & 0xFFFFFFFF, d.vaddr & 0xFFFFFFFFFFFFFFFF)
        s += "".join("%02x:" % b for b in d.gid) + "%08x:" % (d.srqn & 0xFFFFFFFF)
        size = KEY_MSG_SIZE_GID
    raw = s.encode() + b"\0"
    if len(raw) > size:
        # sprintf would overflow msg[]; perftest's fields never get this wide
        raise ValueError(f"perftest keys message longer than {size} bytes: {raw!r}")
    return raw.ljust(size, b"\0")


def _c_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def decode_keys(msg: bytes, with_gid: bool) -> Dest | None:
    """ethernet_read_keys(): the GID form field by field with strtol(,16)
    (the C code's strpbrk walk over ``:``), the short form with sscanf; None
    if sscanf could not fill all seven fields."""
    text = bytes(msg).split(b"\0", 1)[0].decode("latin-1")
    if not with_gid:
        parts = text.split(":")
        vals = []
        for tok in parts[:7]:
            t = tok.strip()
            if not t or t.lstrip("+-")[:1].lower() not in "0123456789abcdef" or t.lstrip("+-") == "":
                break
            vals.append(strtoul(t, 16))
        if len(vals) != 7:
            return None
        return Dest(_c_int(vals[0]), _c_int(vals[1]), _c_int(vals[2]), _c_int(vals[3]), vals[4] & 0xFFFFFFFF,
                    vals[5] & 0xFFFFFFFFFFFFFFFF, bytes(16), vals[6] & 0xFFFFFFFF, -1)
    parts = text.split(":") + [""] * 24
    d = Dest(gid_index=0)
    d.lid = _c_int(strtol(parts[0], 16))
    d.out_reads = _c_int(strtol(parts[1], 16))
    d.qpn = _c_int(strtol(parts[2], 16))
    d.psn = _c_int(strtol(parts[3], 16))
    d.rkey = strtoul(parts[4], 16) & 0xFFFFFFFF
    d.vaddr = strtoul(parts[5], 16) & 0xFFFFFFFFFFFFFFFF
    d.gid = bytes(strtol(parts[6 + i], 16) & 0xFF for i in range(16))
    d.srqn = strtoul(parts[22], 16) & 0xFFFFFFFF
    return d


def version_float(v: str) -> float:
    """atof(rem_version)."""
    s = v.strip()
    num = ""
    for ch in s:
        if ch.isdigit() or (ch == "." and "." not in num) or (ch in "+-" and not num):
            num += ch
        else:
            break
    try:
        return float(num)
    except ValueError:
        return 0.0


@dataclass
class BwReport:
    """struct bw_report_data (the exchanged fields)."""
    size: int = 0
    iters: int = 0
    bw_peak: float = 0.0
    bw_avg: float = 0.0
    msgRate_avg: float = 0.0
    bw_avg_p1: float = 0.0
    bw_avg_p2: float = 0.0
    msgRate_avg_p1: float = 0.0
    msgRate_avg_p2: float = 0.0
    sl: int = 0


class Comm:
    """One side of the TCP connection (struct perftest_comm, Ethernet)."""

    def __init__(self, servername: str | None, port: int, ipv6: bool = False, source_ip: str | None = None):
        self.servername = servername
        self.port = port
        self.family = socket.AF_INET6 if ipv6 else socket.AF_INET
        self.source_ip = source_ip
        self.sock: socket.socket | None = None

    # ---- establish_connection()
    def _resolve(self, host: str | None, passive: bool):
        try:
            return oob.resolve(host, self.port, self.family, passive)
        except socket.gaierror as e:
            _err(f"{e.strerror} for {host if host is not None else '(null)'}:{self.port}\n")
            _err("Problem in resolving basic address and port\n")
            return None

    def connect(self) -> bool:
        """ethernet_client_connect() / ethernet_server_connect(); False after
        perftest's messages ("Unable to open file descriptor ...")."""
        ok = self._client() if self.servername is not None else self._server()
        if not ok:
            _err("Unable to open file descriptor for socket connection\n")
        return ok

    def _client(self) -> bool:
        res = self._resolve(self.servername, False)
        if res is None:
            return False
        self.sock = oob.connect_first(res, self.servername, self.port, self.source_ip)
        if self.sock is None:
            return False
        oob.set_nodelay(self.sock)
        return True

    def _server(self) -> bool:
        res = self._resolve(self.source_ip, True)
        if res is None:
            return False
        lsock = oob.listen_first(res, self.port, self.family)
        if lsock is None:
            return False
        try:
            self.sock = oob.accept_one(lsock)
        except OSError as e:
            _err(f"server accept: {e.strerror}\n")
            _err("accept() failed\n")
            return False
        oob.set_nodelay(self.sock)
        return True

    # ---- raw messages
    def write(self, data: bytes) -> bool:
        return oob.write_msg(self.sock, data)

    def read(self, n: int) -> bytes | None:
        """read() of exactly ``n`` bytes (EOF or an error gives None)."""
        return oob.read_msg(self.sock, n)

    # ---- ctx_xchg_data(): client writes then reads, server reads then writes
    def _write_data(self, data: bytes) -> bool:
        """ethernet_write_data()."""
        if self.write(data):
            return True
        _err("client write: Broken pipe\nCouldn't send reports\n")
        return False

    def _read_data(self, n: int) -> bytes | None:
        """ethernet_read_data()."""
        rem = self.read(n)
        if rem is None:
            _err("ethernet_read_data: Couldn't read reports\n")
        return rem

    def _fail(self, msg: str):
        _err(msg)
        raise CommError

    def xchg_data(self, mine: bytes) -> bytes:
        n = len(mine)
        if self.servername is not None:
            if not self._write_data(mine):
                self._fail(" Unable to write to socket/rdma_cm\n")
            rem = self._read_data(n)
            if rem is None:
                self._fail(" Unable to read from socket/rdma_cm\n")
            return rem
        rem = self._read_data(n)
        if rem is None:
            self._fail(" Unable to read to socket/rdma_cm\n")
        if not self._write_data(mine):
            self._fail(" Unable to write from socket/rdma_cm\n")
        return rem

    # ---- ctx_hand_shake()
    def _write_keys(self, d: Dest) -> bool:
        if not self.write(encode_keys(d)):
            _err("client write: Broken pipe\n")
            _err("Couldn't send local address\n")
            return False
        return True

    def _read_keys(self, with_gid: bool) -> Dest | None:
        size = KEY_MSG_SIZE_GID if with_gid else KEY_MSG_SIZE
        msg = self.read(size)
        if msg is None:
            _err("ethernet_read_keys: Couldn't read remote address\n")
            return None
        d = decode_keys(msg, with_gid)
        if d is None:
            _err("Couldn't parse line <%s>\n" % msg[:size].split(b"\0", 1)[0].decode("latin-1"))
            return None
        return d

    def hand_shake(self, my: Dest) -> Dest:
        """The keys of ``my`` out, the peer's in (the peer is assumed to use
        the same form: ``rem_dest->gid_index = my_dest->gid_index``)."""
        with_gid = my.gid_index != -1
        if self.servername is not None:
            if not self._write_keys(my):
                _err(" Unable to write to socket/rdma_cm\n")
                raise CommError
            rem = self._read_keys(with_gid)
            if rem is None:
                _err(" Unable to read from socket/rdma_cm\n")
                raise CommError
        else:
            rem = self._read_keys(with_gid)
            if rem is None:
                _err(" Unable to read to socket/rdma_cm\n")
                raise CommError
            if not self._write_keys(my):
                _err(" Unable to write from socket/rdma_cm\n")
                raise CommError
        rem.gid_index = my.gid_index
        return rem

    # ---- exchange_versions(), check_sys_data(), the MTU step of check_mtu()
    def exchange_versions(self, version: str) -> str:
        mine = version.encode()[:MAX_VERSION].ljust(MAX_VERSION, b"\0")
        try:
            rem = self.xchg_data(mine)
        except CommError:
            _err(" Failed to exchange data between server and clients\n")
            raise
        return rem.split(b"\0", 1)[0].decode("latin-1")

    def exchange_sys_data(self, cycle_buffer: int, cache_line_size: int) -> tuple[int, int]:
        try:
            rem_cb = self.xchg_data(_I32.pack(_c_int(cycle_buffer)))
        except CommError:
            _err(" Failed to exchange Page Size data between server and client\n")
            raise
        try:
            rem_cl = self.xchg_data(_I32.pack(_c_int(cache_line_size)))
        except CommError:
            _err(" Failed to exchange Cache Line Size data between server and client\n")
            raise
        return _I32.unpack(rem_cb)[0], _I32.unpack(rem_cl)[0]

    def exchange_mtu(self, curr_mtu: int, rem_vers: float) -> int:
        """``sprintf(cur, "%d", curr_mtu)`` sent as 2 bytes (peer >= 5.31) or
        ``sizeof(int)``; the peer's answer read with strtol(,10)."""
        size = 2 if rem_vers >= 5.31 else 4
        cur = (b"%d" % curr_mtu + b"\0").ljust(4, b"\0")[:size]
        try:
            rem = self.xchg_data(cur)
        except CommError:
            _err(" Failed to exchange data between server and clients\n")
            raise
        return strtol(rem.split(b"\0", 1)[0].decode("latin-1"), 10)

    # ---- xchg_bw_reports()
    def xchg_bw_reports(self, mine: BwReport, rem_version: float, report_per_port: bool = False) -> BwReport:
        long_iters = rem_version >= 5.33
        steps = [_U64.pack(mine.size & 0xFFFFFFFFFFFFFFFF),
                 _U64.pack(mine.iters & 0xFFFFFFFFFFFFFFFF) if long_iters else _U32.pack(mine.iters & 0xFFFFFFFF),
                 _F64.pack(mine.bw_peak), _F64.pack(mine.bw_avg), _F64.pack(mine.msgRate_avg)]
        if report_per_port:
            steps += [_F64.pack(mine.bw_avg_p1), _F64.pack(mine.msgRate_avg_p1), _F64.pack(mine.bw_avg_p2),
                      _F64.pack(mine.msgRate_avg_p2)]
        got = []
        for raw in steps:
            try:
                got.append(self.xchg_data(raw))
            except CommError:
                _err(" Failed to exchange data between server and clients\n")
                raise
        rem = BwReport(size=_U64.unpack(got[0])[0],
                       iters=_U64.unpack(got[1])[0] if long_iters else _U32.unpack(got[1])[0],
                       bw_peak=_F64.unpack(got[2])[0], bw_avg=_F64.unpack(got[3])[0],
                       msgRate_avg=_F64.unpack(got[4])[0])
        if report_per_port:
            rem.bw_avg_p1, rem.msgRate_avg_p1, rem.bw_avg_p2, rem.msgRate_avg_p2 = \
                (_F64.unpack(g)[0] for g in got[5:9])
        return rem

    # ---- ctx_close_connection()
    def close_connection(self, my: Dest, lenient: bool = False) -> bool:
        """The final key exchange, ``"done\\0"`` (never read by anyone), close.
        ``lenient``: a peer that closes without this exchange (ib_write_lat
        of newer perftest releases) is not an error."""
        try:
            if lenient:
                self._lenient_hand_shake(my)
            else:
                self.hand_shake(my)
        except CommError:
            self.close()
            return False
        try:
            self.sock.send(DONE)
        except OSError:
            pass
        self.close()
        return True

    def _lenient_hand_shake(self, my: Dest) -> None:
        with_gid = my.gid_index != -1
        if self.servername is not None:
            self.write(encode_keys(my))
            self.read(KEY_MSG_SIZE_GID if with_gid else KEY_MSG_SIZE)
        else:
            if self.read(KEY_MSG_SIZE_GID if with_gid else KEY_MSG_SIZE) is not None:
                self.write(encode_keys(my))

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
