"""The library against a daemon that answers badly: a fake softrdmad (a
SOCK_SEQPACKET server in this process) answers each request with a script
of records -- async events, replies to other requests, errors without a
seq, garbage bytes, records too long, truncated fragment trains, fds nobody
asked for, a close, or nothing at all -- and ``Connection.call`` must
return or raise PyverbsRDMAError exactly as the rules say, never hang,
never raise anything else, never leak an fd:

* the reply with the request's seq is the answer (errno 0: returned, with
  the fds asked for; errno 1..4095: raised; any other errno: EIO);
* an error reply without a seq answers the one outstanding request;
* events are queued, replies to other requests dropped (fds closed);
* anything that is no message (garbage, too long, truncated, EOF, a
  record that is neither reply nor event) or no reply in time: EIO
  (ETIMEDOUT for the time-out), the device is gone (IBV_EVENT_DEVICE_FATAL
  queued, every later call EIO at once);
* otherwise the connection goes on: the next request gets its reply."""

from __future__ import annotations

import array
import errno
import json
import os
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from softrdma.uapi.control import MAX_FDS, MAX_MSG, encode, recv_msg, send_msg
from softrdma.enums import IBV_EVENT_DEVICE_FATAL
from softrdma.verbs import connection
from softrdma.verbs.connection import Connection
from softrdma.verbs.errors import PyverbsRDMAError

REPLY_TIMEOUT_S = 0.5        # the library's bound on a reply, shortened for the stalls below
HANG_S = 20.0                # a call still running after this is a hang: the test fails


# ---------------------------------------------------------------- what the fake daemon sends
# Each action is (kind, arg); ``seq`` is the request's.  Non-final actions
# leave the request open; a script is some of those, then one final action.

def _send(sock, data: bytes, nfds: int = 0) -> None:
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(nfds)]
    try:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        sock.sendmsg([data], anc)
    finally:
        for fd in fds:
            os.close(fd)


def _json(msg) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def perform(sock, action, seq: int) -> bool:
    """Do one action; False: stop serving this connection (closed, stalled)."""
    kind, arg = action
    if kind == "event":
        _send(sock, _json({"event": arg}))
    elif kind == "other_seq":
        other, nfds = arg
        _send(sock, _json({"seq": seq + other if type(other) is int else other, "errno": 0}), nfds)
    elif kind == "reply":
        fields, nfds = arg
        _send(sock, _json({"seq": seq, **fields}), nfds)
    elif kind == "big_reply":
        for rec in encode({"seq": seq, "errno": 0, "blob": arg}):
            sock.sendmsg([rec])
    elif kind == "no_seq":
        _send(sock, _json(arg))
    elif kind == "raw":
        _send(sock, arg.replace(b"SEQ", str(seq).encode()))
    elif kind == "fds":
        _send(sock, _json({"seq": seq, "errno": 0}), arg)
    elif kind == "fragments":
        recs = encode({"seq": seq, "errno": 0, "blob": "y" * (3 * MAX_MSG)})
        how = arg
        if how == "close":
            sock.sendmsg([recs[0]])
            return False                               # and the connection closes
        if how == "stall":
            sock.sendmsg([recs[0]])
            return None
        if how == "out_of_order":
            sock.sendmsg([recs[0]])
            sock.sendmsg([recs[2]])
        elif how == "bad_part":
            sock.sendmsg([recs[0]])
            sock.sendmsg([b'{"frag":1,"of":%d,"part":7}' % len(recs)])
        elif how == "stray":
            sock.sendmsg([recs[1]])
    elif kind == "close":
        return False
    elif kind == "stall":
        return None
    return True


# ---------------------------------------------------------------- what the library must make of it
# (outcome, alive): outcome 0 (returned) or the errno raised.

def decide(action, want_fds: int):
    """The outcome a final action gives, or None for a non-final one."""
    kind, arg = action
    if kind in ("event", "other_seq"):
        return None
    if kind == "reply":
        fields, nfds = arg
        if nfds > MAX_FDS:
            return errno.EIO, False
        e = fields.get("errno", 0)
        if type(e) is not int or not 0 <= e < 4096:
            return errno.EIO, True
        if e == 0 and nfds < want_fds:
            return errno.EIO, True
        return e, True
    if kind == "big_reply":
        return (errno.EIO if want_fds else 0), True
    if kind == "fds":
        if arg > MAX_FDS:
            return errno.EIO, False
        return (errno.EIO if arg < want_fds else 0), True
    if kind == "no_seq":
        e = arg.get("errno")
        if "event" in arg:
            return None
        if not e:
            return errno.EIO, False                  # neither reply nor event
        return (e if type(e) is int and 0 < e < 4096 else errno.EIO), True
    if kind == "stall":
        return errno.ETIMEDOUT, False
    return errno.EIO, False                          # raw garbage, fragments gone wrong, close


# ---------------------------------------------------------------- strategies
errnos = st.integers(1, 4095)
bad_errnos = st.sampled_from([-1, 4096, 1 << 40, "x", "5", 1.5, [], [5], {"e": 1}, True])
nfds = st.integers(0, 3)
non_final = st.one_of(
    st.tuples(st.just("event"), st.integers(0, 30)),
    st.tuples(st.just("other_seq"), st.tuples(st.sampled_from([-1, 1, 1000, "1", 1.0, [1], {"s": 1}, True, False]),
                                              nfds)),
    st.tuples(st.just("no_seq"), st.fixed_dictionaries({"event": st.integers(0, 30), "seq": st.none()})),
)
final = st.one_of(
    st.tuples(st.just("reply"), st.tuples(st.fixed_dictionaries({"errno": st.just(0), "pd": st.integers(0, 9)}), nfds)),
    st.tuples(st.just("reply"), st.tuples(st.fixed_dictionaries({}, optional={"pd": st.integers()}), st.just(0))),
    st.tuples(st.just("reply"), st.tuples(st.fixed_dictionaries({"errno": errnos},
                                                                optional={"msg": st.one_of(st.text(max_size=20),
                                                                                           st.integers())}),
                                          nfds)),
    st.tuples(st.just("reply"), st.tuples(st.fixed_dictionaries({"errno": bad_errnos}), nfds)),
    st.tuples(st.just("big_reply"), st.tuples(st.sampled_from(["x", 'q"\\', "\u00e9\u2603"]),
                                              st.integers(MAX_MSG // 4, MAX_MSG)).map(lambda t: t[0] * t[1])),
    st.tuples(st.just("no_seq"), st.fixed_dictionaries({"errno": errnos}, optional={"seq": st.none(),
                                                                                   "msg": st.text(max_size=20)})),
    st.tuples(st.just("no_seq"), st.fixed_dictionaries({"errno": st.one_of(bad_errnos, st.sampled_from(
        [0, None, False, "", []]))})),
    st.tuples(st.just("no_seq"), st.fixed_dictionaries({}, optional={"x": st.integers(), "seq": st.none()})),
    st.tuples(st.just("raw"), st.binary(max_size=64).map(lambda b: b"\x00" + b)),      # never JSON
    st.tuples(st.just("raw"), st.sampled_from([
        b"hello", b"[1,2]", b"7", b'"seq"', b"{", b'{"seq":SEQ,', b'{"seq":SEQ,"errno":0,"x":NaN}',
        b'{"seq":SEQ,"errno":Infinity}', b'{"seq":SEQ,"errno":0,"x":1e400}', b"[" * 5000, b"\xff\xfe{}",
        b'{"seq":SEQ,"errno":0,"pad":"' + b"z" * (MAX_MSG + 10) + b'"}', b""])),
    st.tuples(st.just("fds"), st.sampled_from([1, MAX_FDS, MAX_FDS + 1, 20])),
    st.tuples(st.just("fragments"), st.sampled_from(["close", "stall", "out_of_order", "bad_part", "stray"])),
    st.tuples(st.just("close"), st.none()),
    st.tuples(st.just("stall"), st.none()),
)
scripts = st.tuples(st.lists(non_final, max_size=4), final)


# ---------------------------------------------------------------- the fake daemon
class FakeDaemon:
    """Accepts one connection per ``serve`` and plays a script on its
    first request; later requests get good replies (``{"pd": 1}``)."""

    def __init__(self, path: str):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        self.listener.listen(4)

    def serve(self, script) -> threading.Thread:
        t = threading.Thread(target=self._run, args=(script,), daemon=True)
        t.start()
        return t

    def _run(self, script) -> None:
        sock, _ = self.listener.accept()
        try:
            msg, fds = recv_msg(sock)
            for fd in fds:
                os.close(fd)
            seq = msg["seq"]
            go = True
            for action in script:
                go = perform(sock, action, seq)
                if not go:
                    break
            if go is False:
                return
            while True:                                # good replies until the client closes
                msg, fds = recv_msg(sock)
                for fd in fds:
                    os.close(fd)
                if msg is None:
                    return
                if go:
                    send_msg(sock, {"seq": msg["seq"], "errno": 0, "pd": 1})
        except OSError:                                # the client closed while we sent
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    d = FakeDaemon(str(tmp_path_factory.mktemp("fake") / "softrdmad.sock"))
    yield d
    d.close()


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(connection, "REPLY_TIMEOUT_S", REPLY_TIMEOUT_S)


def _open_fds() -> set[int]:
    return set(int(f) for f in os.listdir("/proc/self/fd"))


def _bounded(fn):
    """fn() in a thread: ('ok', value) or ('raised', exception); a call
    that does not end in HANG_S fails the test."""
    out = []

    def run():
        try:
            out.append(("ok", fn()))
        except BaseException as e:                     # noqa: BLE001 -- judged by the caller
            out.append(("raised", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), "the library hung on a bad reply"
    return out[0]


def play(fake, prefix, last, want_fds: int = 0):
    before = _open_fds()
    server = fake.serve(prefix + [last])
    conn = Connection(fake.path)
    try:
        how, value = _bounded(lambda: conn.call("alloc_pd", want_fds=want_fds))
        outcome, alive = decide(last, want_fds)
        if outcome == 0:
            assert how == "ok", (prefix, last, value)
            reply, fds = value
            assert len(fds) == want_fds
            for fd in fds:
                os.close(fd)
            if last[0] == "big_reply":
                assert reply["blob"] == last[1]
            elif last[0] == "reply" and "pd" in last[1][0]:
                assert reply["pd"] == last[1][0]["pd"]
            else:                                        # a field the reply lacks: EIO, not KeyError
                with pytest.raises(PyverbsRDMAError) as e:
                    reply["pd"]
                assert e.value.error_code == errno.EIO
        else:
            assert how == "raised" and type(value) is PyverbsRDMAError, (prefix, last, value)
            assert value.error_code == outcome, (prefix, last, value)
        events = [a[1] if a[0] == "event" else a[1]["event"] for a in prefix
                  if a[0] == "event" or (a[0] == "no_seq" and "event" in a[1])]
        got = [ev["event"] for ev in conn.events]
        if alive:
            assert not conn.dead
            assert got == events
            how, value = _bounded(lambda: conn.call("alloc_pd"))   # the connection goes on
            assert how == "ok", (prefix, last, value)
            assert value[0]["pd"] == 1
        else:
            assert conn.dead
            assert got == events + [int(IBV_EVENT_DEVICE_FATAL)]
            how, value = _bounded(lambda: conn.call("alloc_pd"))
            assert how == "raised" and type(value) is PyverbsRDMAError and value.error_code == errno.EIO
    finally:
        conn.close()
        server.join(HANG_S)
        assert not server.is_alive()
    assert _open_fds() == before, "an fd leaked"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=scripts, want_fds=st.sampled_from([0, 0, 1]))
def test_any_reply_gives_the_result_the_rules_say(fake, script, want_fds):
    prefix, last = script
    play(fake, prefix, last, want_fds)


@pytest.mark.parametrize("last", [
    ("no_seq", {"seq": None, "errno": errno.EINVAL, "msg": "malformed control message: Infinity is not a JSON"
                " number"}),                             # what the old daemon answered to a non-finite number
    ("stall", None),
    ("close", None),
    ("fragments", "stall"),
    ("raw", b"[" * 5000),
], ids=["seq-none-error", "stall", "close", "fragments-stall", "deep-nesting"])
def test_the_cases_that_hung_or_crashed(fake, last):
    play(fake, [("event", 3)], last)
