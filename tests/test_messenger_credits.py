"""The messenger's flow control in one process through a daemon: a sender
never posts beyond the receiver's credit, and resumes as credits return."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.runner import shim_path
from wait_helpers import free_port, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "messenger"))


@pytest.fixture(scope="module")
def messenger_env():
    # one daemon for the module: rdma_cm keeps one context per daemon socket
    # and device for the life of the process, as librdmacm keeps its devices
    with daemon_in_shm("msgr-credits") as d, pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        monkeypatch.syspath_prepend(shim_path())
        from msgr.messenger import Messenger
        yield Messenger


def test_sender_stops_at_the_peer_credit_and_resumes(messenger_env):
    Messenger = messenger_env
    gate = threading.Event()
    got = []

    def on_message(conn, seq, data):
        got.append((seq, data))
        gate.wait(60)                 # the receiver's polling thread holds: no credit comes back

    rx = Messenger(credits=8, on_message=on_message)
    tx = Messenger(credits=8)
    try:
        port = free_port()
        rx.listen("127.0.0.1", port)
        conn = tx.connect("127.0.0.1", port)
        assert conn.credits.available == 8            # the receiver's grant, from its private data
        msgs = [bytes([i]) * (100 + i) for i in range(50)]
        for m in msgs:
            tx.send(conn, m)
        # the receiver returns credits for what it consumed before its first
        # delivery blocked it; after that none, and the sender stops
        def stalled():
            with tx.lock:                             # the state the polling thread keeps
                return got and conn.credits.available == 0 and len(conn.outq)
        wait_for(stalled, 30, "the credit to run out")
        with tx.lock:
            sent, back = tx.stats["frags_sent"], tx.stats["credits_returned"]
            # never beyond the receiver's 8 buffers: fragments sent less credits
            # returned (a credit message may have landed since the stall)
            assert 0 < sent - back <= 8 and conn.credits.available == 8 - (sent - back)
            assert len(conn.outq) == 50 - sent > 0
        gate.set()
        wait_for(lambda: len(got) == 50, 30, "every message")
        assert got == list(enumerate(msgs))
        assert tx.stats["credits_returned"] >= 50 - 8  # all it needed came back
        assert rx.stats["credit_msgs"] >= 1            # in credit messages: the receiver sends no data
        assert tx.stats["frags_sent"] == 50
        with rx.lock:
            peer = next(iter(rx.conns.values()))
            assert peer.inbound.duplicates == 0 and peer.inbound.next_seq == 50
    finally:
        gate.set()
        tx.close()
        rx.close()


def test_listener_refuses_beyond_max_conns(messenger_env):
    Messenger = messenger_env
    rx = Messenger(max_conns=1)
    a, b = Messenger(), Messenger()
    try:
        port = free_port()
        rx.listen("127.0.0.1", port)
        a.connect("127.0.0.1", port)
        with pytest.raises(ConnectionError, match="REJECTED"):
            b.connect("127.0.0.1", port)
        assert rx.stats["rejected"] == 1
    finally:
        for m in (a, b, rx):
            m.close()
