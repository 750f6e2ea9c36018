"""The control socket's framing: one JSON message per SOCK_SEQPACKET record,
file descriptors alongside in SCM_RIGHTS.

SEQPACKET keeps record boundaries (one ``recvmsg`` is one message, with
its fds) and reports the peer's close as an empty read, which is how the
daemon learns that a process died.  Requests are ``{"op": ..., "seq": n,
...}``; replies ``{"seq": n, "errno": 0, ...}``; the daemon may also send
``{"event": ...}`` records (async events) at any time.

A message whose JSON text is longer than one record (``MAX_MSG``: a
``resources`` reply listing thousands of objects) goes as fragments:
consecutive records ``{"frag": i, "of": n, "part": "<text>"}`` whose
parts, joined, are the message's JSON text; its fds come with the first.
The sender writes the fragments of one message back to back (nothing is
sent between them), and ``recv_msg`` returns the whole message.  Who
reassembles decides how much it accepts (``max_bytes``): the daemon takes
requests of one record only, the library takes replies of any size.

Numbers are finite: a record with NaN, Infinity or a float that overflows
(``1e400``) is malformed.  A malformed record still names its request when
its ``seq`` can be read from the raw bytes (``ControlError.seq``), so that
every request gets its one reply; the tail fragments of a message that was
refused (``ControlError.fragment``) are no requests and get none.
"""

from __future__ import annotations

import array
import errno
import json
import math
import os
import re
import select
import socket

MAX_MSG = 1 << 16
MAX_FDS = 8
_FD_SIZE = array.array("i").itemsize
#: characters of JSON text per fragment: escaping at most doubles them
#: (``json.dumps`` output is ASCII; only ``"`` and ``\\`` grow), so a
#: fragment record stays under MAX_MSG
FRAG_CHARS = (MAX_MSG - 256) // 2
#: the most a reassembled message may hold unless the receiver says otherwise
MAX_REASSEMBLED = 1 << 30
#: how long a receiver waits for the next fragment of a message whose first
#: has arrived (the sender writes them back to back)
FRAG_TIMEOUT_S = 30.0


class ControlError(ConnectionError):
    """The control connection broke or carried garbage.  ``errno``: EINVAL
    for a record that is no JSON object, EMSGSIZE for one too long.
    ``seq``: the request's seq as far as the raw record tells it (None if
    it does not); ``fragment``: the record is a later fragment of a message
    (the first one was answered already)."""

    def __init__(self, msg: str, code: int = errno.EINVAL, seq=None, fragment: bool = False):
        super().__init__(code, msg)
        self.seq = seq
        self.fragment = fragment


def valid_seq(seq) -> bool:
    """What a request may use as its seq (echoed in the reply): an integer
    of at most 64 bits or a short string."""
    return (type(seq) is int and -(1 << 63) <= seq < 1 << 64) or (isinstance(seq, str) and len(seq) <= 64)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text[:40]} is not a finite number")
    return v


def _loads(data) -> dict:
    """A JSON object (ValueError otherwise: bad JSON, NaN/Infinity or a
    float out of range, nesting too deep, not an object)."""
    try:
        msg = json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(msg, dict):
        raise ValueError("not an object")
    return msg


# "seq": <integer> in raw JSON text, also as it appears escaped inside a
# fragment's "part" string; the digits must end there (no 5000-digit number)
_SEQ_RE = re.compile(rb'\\?"seq\\?"\s*:\s*(-?\d{1,20})(?![\d.eE])')


def recover_seq(data: bytes):
    """The seq of the request in ``data``, a record that is not a valid
    message (bad JSON, a non-finite number, truncated, a fragment), or None
    if the record does not tell it unambiguously."""
    try:
        msg = json.loads(data, parse_constant=lambda _: None)
    except (ValueError, RecursionError):
        return _seq_in_text(data)
    return _seq_of(msg) if isinstance(msg, dict) else None


def _seq_of(msg: dict):
    part = msg.get("part")
    if "frag" in msg and isinstance(part, str):          # a first fragment: the seq is in its text
        # (which may hold anything JSON can escape, a lone surrogate too)
        return _seq_in_text(part.encode("utf-8", "surrogatepass"))
    seq = msg.get("seq")
    return seq if valid_seq(seq) else None


def _seq_in_text(data: bytes):
    found = {int(m) for m in _SEQ_RE.findall(bytes(data[:MAX_MSG]))}
    seq = found.pop() if len(found) == 1 else None
    return seq if valid_seq(seq) else None


def encode(msg: dict) -> list[bytes]:
    """The records that carry ``msg``: one, or its fragments."""
    text = json.dumps(msg, separators=(",", ":"))
    data = text.encode()
    if len(data) <= MAX_MSG:
        return [data]
    parts = [text[i:i + FRAG_CHARS] for i in range(0, len(text), FRAG_CHARS)]
    return [json.dumps({"frag": i, "of": len(parts), "part": p}, separators=(",", ":")).encode()
            for i, p in enumerate(parts)]


def send_records(sock: socket.socket, records: list[bytes], fds=()) -> None:
    """Send ``records`` (from ``encode``), the fds with the first."""
    for i, data in enumerate(records):
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds and i == 0 else []
        sock.sendmsg([data], anc)


def send_msg(sock: socket.socket, msg: dict, fds=()) -> None:
    send_records(sock, encode(msg), fds)


def _recv_record(sock: socket.socket) -> tuple[bytes, list[int], int]:
    data, anc, flags, _ = sock.recvmsg(MAX_MSG, socket.CMSG_SPACE(MAX_FDS * _FD_SIZE))
    fds: list[int] = []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(payload[:len(payload) - len(payload) % _FD_SIZE])
            fds.extend(a)
    return data, fds, flags


def close_fds(fds) -> None:
    """Close every fd of ``fds``, ignoring ones already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def recv_msg(sock: socket.socket, max_bytes: int = MAX_REASSEMBLED) -> tuple[dict | None, list[int]]:
    """One message and the fds that came with it; (None, []) when the peer
    closed.  Raises ControlError on a malformed record, or a fragmented
    message longer than ``max_bytes`` (``MAX_MSG``: fragments refused); the
    fds that came with it are closed then."""
    data, fds, flags = _recv_record(sock)
    if not data:
        close_fds(fds)
        return None, []
    try:
        if flags & socket.MSG_CTRUNC:
            raise ControlError(f"more than {MAX_FDS} fds or a truncated control message", errno.EINVAL,
                               recover_seq(data))
        if flags & socket.MSG_TRUNC:
            raise ControlError(f"record longer than {MAX_MSG} bytes", errno.EMSGSIZE, recover_seq(data))
        try:
            msg = _loads(data)
        except ValueError as e:
            raise ControlError(f"malformed control message: {e}", errno.EINVAL, recover_seq(data)) from None
        if "frag" in msg:
            msg = _reassemble(sock, msg, fds, max_bytes)
    except BaseException:
        close_fds(fds)
        raise
    return msg, fds


def _reassemble(sock: socket.socket, first: dict, fds: list[int], max_bytes: int) -> dict:
    """The message whose first fragment is ``first``: read the rest (their
    fds join ``fds``)."""
    n = first.get("of")
    i = first.get("frag")
    if type(i) is int and i != 0:
        raise ControlError("a fragment without the message's first one", fragment=True)
    seq = _seq_of(first)
    if i != 0 or type(n) is not int or not isinstance(first.get("part"), str) or n < 2:
        raise ControlError("malformed control message: bad first fragment", errno.EINVAL, seq)
    if max_bytes <= MAX_MSG or n > max_bytes // FRAG_CHARS + 1:
        raise ControlError(f"message longer than {max_bytes} bytes", errno.EMSGSIZE, seq)
    parts = [first["part"]]
    size = len(parts[0])
    while len(parts) < n:
        timeout = sock.gettimeout()
        if timeout is not None:                  # non-blocking or with a timeout: wait for the rest
            ready, _, _ = select.select([sock], [], [], min(timeout, FRAG_TIMEOUT_S) or FRAG_TIMEOUT_S)
            if not ready:
                raise ControlError("message fragments stopped coming")
        data, more_fds, flags = _recv_record(sock)
        fds.extend(more_fds)
        if not data:
            raise ControlError("peer closed in the middle of a message")
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ControlError("truncated fragment")
        try:
            frag = _loads(data)
        except ValueError as e:
            raise ControlError(f"malformed fragment: {e}") from None
        part = frag.get("part")
        if frag.get("frag") != len(parts) or frag.get("of") != n or not isinstance(part, str):
            raise ControlError("malformed control message: fragments out of order")
        size += len(part)
        if size > max_bytes:
            raise ControlError(f"message longer than {max_bytes} bytes", errno.EMSGSIZE)
        parts.append(part)
    try:
        return _loads("".join(parts))
    except ValueError as e:
        raise ControlError(f"malformed control message: {e}") from None
