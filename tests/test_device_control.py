"""The control socket's framing on a socketpair: messages longer than one
record go as fragments and come back whole; garbage is a ControlError with
the errno the daemon replies with."""

from __future__ import annotations

import errno
import json
import os
import socket
import threading

import pytest

from softrdma.uapi.control import MAX_MSG, ControlError, encode, recv_msg, send_msg


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.settimeout(10)
    yield a, b
    a.close()
    b.close()


def send_bg(sock, msg, fds=()) -> threading.Thread:
    """send_msg from another thread: a long message fills the socket buffer
    before the reader starts."""
    def send():
        try:
            send_msg(sock, msg, fds)
        except OSError:                 # the reader gave up on the message and closed: fine
            pass
    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def test_a_message_longer_than_a_record_comes_back_whole(pair):
    a, b = pair
    msg = {"seq": 1, "errno": 0, "resources": [{"kind": "mr", "i": i, "s": 'q"\\' * 3} for i in range(20000)]}
    records = encode(msg)
    assert len(records) > 10 and all(len(r) <= MAX_MSG for r in records)
    r, w = os.pipe()
    t = send_bg(a, msg, [r])
    got, fds = recv_msg(b)
    t.join()
    assert got == msg and len(fds) == 1                          # the fds came along
    os.close(fds[0])
    send_msg(a, {"seq": 2})                                      # and the next one is a message of its own
    assert recv_msg(b)[0] == {"seq": 2}
    for fd in (r, w):
        os.close(fd)


def test_a_receiver_that_takes_single_records_refuses_fragments(pair):
    a, b = pair
    send_bg(a, {"op": "x", "pad": "y" * (2 * MAX_MSG)})
    with pytest.raises(ControlError) as e:
        recv_msg(b, max_bytes=MAX_MSG)
    assert e.value.errno == errno.EMSGSIZE


def test_a_record_longer_than_max_msg_is_emsgsize(pair):
    a, b = pair
    a.send(json.dumps({"pad": "z" * MAX_MSG}).encode())
    with pytest.raises(ControlError) as e:
        recv_msg(b)
    assert e.value.errno == errno.EMSGSIZE


@pytest.mark.parametrize("data", [b"nope", b"[1]", b"\xff", b"[" * 60000, b'{"a":NaN}', b'{"a":-Infinity}',
                                  b'{"frag":1,"of":2,"part":"{}"}', b'{"frag":0,"of":"2","part":"{"}'])
def test_garbage_is_einval_and_its_fds_are_closed(pair, data):
    a, b = pair
    r, w = os.pipe()
    a.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, r.to_bytes(4, "little"))])
    os.close(r)
    with pytest.raises(ControlError) as e:
        recv_msg(b)
    assert e.value.errno == errno.EINVAL
    os.close(w)                                                  # the reader's copy is gone: no one holds the pipe


def test_fragments_out_of_order_or_cut_short(pair):
    a, b = pair
    recs = encode({"pad": "x" * (3 * MAX_MSG)})
    for r in (recs[0], recs[2]):
        a.send(r)
    with pytest.raises(ControlError):
        recv_msg(b)
    a.send(recs[0])
    a.close()                                                    # the sender dies mid-message
    with pytest.raises(ControlError):
        recv_msg(b)
