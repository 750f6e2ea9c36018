"""Every request gets exactly one reply, with its own seq.

softrdmad answers a request it cannot parse -- a non-finite number, bad
JSON, a record too long, too many fds, a message in fragments -- with an
errno reply carrying the request's seq whenever the raw record shows it,
and with exactly one reply (the tail fragments of a refused message get
none), so a client can always match it.  The case that hung:
``softrdma rdma link set rxe0 faults delay 1e400s`` (JSON Infinity)."""

from __future__ import annotations

import array
import errno
import json
import os
import socket
import subprocess
import sys

import pytest

from daemon_helpers import RawControl, daemon_in_shm
from softrdma.uapi.control import MAX_FDS, MAX_MSG, ControlError, encode, recover_seq, recv_msg


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("replies") as d:
        yield d


class Raw(RawControl):
    def __init__(self, run_dir: str):
        super().__init__(run_dir, timeout=30)

    def send(self, data: bytes, nfds: int = 0) -> None:
        fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(nfds)]
        try:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
            self.s.sendmsg([data], anc)
        finally:
            for fd in fds:
                os.close(fd)


LINK_SET = b'{"op":"link_set","seq":SEQ,"name":"rxe0","faults":{"delay":%s}}'
CASES = [
    ("infinity", LINK_SET % b"Infinity", 0, errno.EINVAL),
    ("minus-infinity", LINK_SET % b"-Infinity", 0, errno.EINVAL),
    ("nan", LINK_SET % b"NaN", 0, errno.EINVAL),
    ("1e400", LINK_SET % b"1e400", 0, errno.EINVAL),              # a float JSON reads as inf
    ("-1e400", LINK_SET % b"-1e400", 0, errno.EINVAL),
    ("seq-after-nan", b'{"op":"devices","x":NaN,"seq":SEQ}', 0, errno.EINVAL),
    ("truncated-json", b'{"op":"devices","seq":SEQ,"x":[1,2', 0, errno.EINVAL),
    ("bad-utf8", b'{"op":"devices","seq":SEQ,"x":"\xff\xfe"}', 0, errno.EINVAL),
    ("too-long", b'{"op":"devices","seq":SEQ,"pad":"' + b"x" * MAX_MSG + b'"}', 0, errno.EMSGSIZE),
    ("too-many-fds", b'{"op":"devices","seq":SEQ}', MAX_FDS + 1, errno.EINVAL),
]


@pytest.mark.parametrize("data,nfds,code", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_malformed_request_gets_one_reply_with_its_seq(daemon, data, nfds, code):
    c = Raw(daemon.run_dir)
    for seq in (7, 1 << 40):
        c.send(data.replace(b"SEQ", str(seq).encode()), nfds)
        c.send(b'{"op":"devices","seq":%d}' % (seq + 1))
        r = c.reply()
        assert (r["seq"], r["errno"]) == (seq, code), r
        r = c.reply()                                  # the very next reply is the next request's
        assert (r["seq"], r["errno"]) == (seq + 1, 0), r
    c.s.close()


def test_a_request_in_fragments_gets_one_reply(daemon):
    """Requests are one record: a longer one is refused once, EMSGSIZE,
    and its other fragments are no requests of their own."""
    c = Raw(daemon.run_dir)
    records = encode({"op": "devices", "seq": 11, "pad": 'q"\\' * MAX_MSG})
    assert len(records) > 3
    for rec in records:
        c.send(rec)
    c.send(b'{"op":"devices","seq":12}')
    r = c.reply()
    assert (r["seq"], r["errno"]) == (11, errno.EMSGSIZE), r
    r = c.reply()
    assert (r["seq"], r["errno"]) == (12, 0), r
    c.s.close()


def test_a_request_without_a_readable_seq_still_gets_one_reply(daemon):
    c = Raw(daemon.run_dir)
    for data in (b"garbage", b"[1,2]", b'{"op":"devices","seq":' + b"9" * 5000 + b"}",
                 b'{"seq":1,"seq":2,', b'{"op":"devices","seq":1.5}', b'{"frag":0,"of":3,"part":"\\ud800"}',
                 b'{"frag":0,"of":3,"part":"\\udfff\\"seq\\":"', b'{"frag":0,"of":3,"part":"\\ud800",'):
        c.send(data)
        c.send(b'{"op":"devices","seq":99}')
        r = c.reply()
        assert r["seq"] is None and r["errno"] in (errno.EINVAL, errno.EMSGSIZE), (data[:40], r)
        r = c.reply()
        assert (r["seq"], r["errno"]) == (99, 0), (data[:40], r)
    c.s.close()


def test_recover_seq():
    assert recover_seq(b'{"op":"x","seq":5,"d":Infinity}') == 5
    assert recover_seq(b'{"op":"x","seq":"abc","d":NaN}') == "abc"
    assert recover_seq(b'{"op":"x", "seq" : -3, "d":[') == -3
    assert recover_seq(b'{"frag":0,"of":3,"part":"{\\"op\\":\\"x\\",\\"seq\\":42,\\"pad\\":\\""}') == 42
    assert recover_seq(b'{"frag":0,"of":3,"part":"{\\"op\\":\\"x\\",\\"seq\\":42') == 42     # truncated too
    assert recover_seq(b'{"seq":1,"a":{"seq":2},') is None                                   # ambiguous
    assert recover_seq(b'{"seq":1.5,') is None
    assert recover_seq(b'{"seq":' + b"9" * 30 + b",") is None
    assert recover_seq(b'{"seq":[1]}') is None
    assert recover_seq(b"\xff" * 10) is None


@pytest.mark.parametrize("delay", ["1e400s", "1e999ms"])
def test_rdma_link_set_with_a_non_finite_delay_fails_at_once(daemon, delay):
    """It waited for ever for a reply it could not match."""
    out = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "link", "set", "rxe0", "faults", "delay", delay],
                         env={**daemon.env, "SOFTRDMA_AUTOSTART": "0"}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) in (1, 2) and "Traceback" not in out.stderr, out.stderr
    assert "Invalid argument" in out.stderr or "finite" in out.stderr, out.stderr


def test_threads_sharing_a_context_each_get_their_own_replies(daemon, monkeypatch):
    """One thread waits for async events while others make requests on the
    same connection: nobody reads another's reply (a reply read by the
    event reader was lost, and its caller waited or saw the device gone)."""
    import threading

    from softrdma.verbs import device, pd
    from softrdma.verbs.errors import PyverbsRDMAError
    monkeypatch.setenv("SOFTRDMA_RUN", daemon.run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    ctx = device.Context(name="rxe0")
    stop = threading.Event()
    errors = []

    def events():
        while not stop.is_set():
            try:
                ctx.get_async_event(timeout=0.001)
            except PyverbsRDMAError as e:
                if e.error_code != errno.EAGAIN:
                    errors.append(e)
                    return

    def requests():
        try:
            for _ in range(150):
                assert ctx.query_port(1).state is not None
                pd.PD(ctx).close()
        except Exception as e:                      # noqa: BLE001 -- reported below
            errors.append(e)

    waiter = threading.Thread(target=events)
    callers = [threading.Thread(target=requests) for _ in range(2)]
    waiter.start()
    for t in callers:
        t.start()
    for t in callers:
        t.join(120)
    stop.set()
    waiter.join(30)
    assert not waiter.is_alive() and not any(t.is_alive() for t in callers)
    assert not errors, errors
    assert not ctx.conn.dead
    ctx.close()


def _records():
    from hypothesis import strategies as st
    text = st.one_of(st.text(st.characters(blacklist_categories=()), max_size=30),
                     st.text(st.sampled_from(["\ud800", "\udfff", '"', "\\", "a", "\u00e9"]), max_size=8))
    value = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), text, st.lists(st.integers(), max_size=3))
    obj = st.dictionaries(st.sampled_from(["op", "seq", "frag", "of", "part", "x"]), value, max_size=5)
    frag = st.fixed_dictionaries({"frag": st.sampled_from([0, 1, -1, "0", None, True, 0.0]),
                                  "of": st.one_of(st.integers(-1, 5), value), "part": st.one_of(text, value)},
                                 optional={"seq": value})
    as_json = st.one_of(obj, frag).map(lambda d: json.dumps(d).encode())
    cut = st.tuples(as_json, st.integers(0, 200)).map(lambda t: t[0][:t[1]])
    return st.one_of(as_json, cut, st.binary(max_size=200))


def test_no_record_makes_the_request_reader_raise_anything_but_control_error():
    """What the daemon's reader does with a record: a message, or a
    ControlError (with a seq when one shows) -- never another exception,
    which would end the daemon's loop."""
    from hypothesis import given, settings

    @settings(max_examples=1500, deadline=None)
    @given(_records())
    def check(data):
        seq = recover_seq(data)
        assert seq is None or type(seq) in (int, str)
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            a.send(data)
            b.setblocking(False)
            try:
                recv_msg(b, max_bytes=MAX_MSG)
            except ControlError:
                pass
        finally:
            a.close()
            b.close()
    check()
