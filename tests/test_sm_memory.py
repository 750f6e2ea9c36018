"""What keeps the SM's memory small at 10,000s of nodes: a round of SMPs
queued ``light.FEED`` at a time (the P_Key tables read after SUBNET UP are
~93,000 SMPs at 11,664 hosts), and the P_Key blocks read from many ports
with the same content held once."""

from __future__ import annotations

from softrdma.sm import light
from softrdma.sm.pkey_mgr import PkeyTbl
from softrdma.wire.mad import Method
from softrdma.wire.smp import SmpAttr, build_dr_smp


class FakeAgent:
    """``MadAgent``'s surface Queries uses: post_send, idle; answers on demand."""

    def __init__(self):
        self.waiting = []                  # (mad, callback) not answered yet
        self.posted = 0
        self.most = 0                      # the most ever waiting at once

    def post_send(self, mad, cb):
        self.waiting.append((mad, cb))
        self.posted += 1
        self.most = max(self.most, len(self.waiting))

    @property
    def idle(self):
        return not self.waiting

    def answer_all(self):
        for mad, cb in self.waiting:
            resp = bytearray(mad)
            resp[3] = Method.GET_RESP
            cb(bytes(resp))
        self.waiting.clear()


def _items(n):
    for i in range(n):
        yield i, build_dr_smp(Method.GET, SmpAttr.PKEY_TABLE, (1, 2), i % 2)


def test_a_big_round_is_queued_feed_at_a_time_and_every_answer_kept(monkeypatch):
    monkeypatch.setattr(light, "FEED", 100)
    q = FakeAgent()
    made = []
    qs = light.Queries(q, ((k, made.append(k) or m) for k, m in _items(250)))
    qs.start()
    qs.poll()
    assert q.posted == 100 and len(made) == 100 and not qs.done   # the rest not even built yet
    rounds = 0
    while not qs.done:
        q.answer_all()
        qs.poll()
        rounds += 1
    assert rounds == 3 and q.most == 100 and q.posted == 250
    assert sorted(qs.results) == list(range(250)) and all(len(v) == 64 for v in qs.results.values())


def test_no_items_is_done_at_once():
    q = FakeAgent()
    qs = light.Queries(q, iter(()))
    qs.start()
    qs.poll()
    assert qs.done and q.posted == 0 and qs.results == {}


def test_identical_blocks_are_held_once_and_a_set_changes_one_table_only():
    default = (0xFFFF,) + (0,) * 31
    tables = [PkeyTbl() for _ in range(3)]
    for t in tables:
        t.set_block(0, default)
    assert tables[0].blocks[0] is tables[1].blocks[0] is tables[2].blocks[0]
    other = (0xFFFF, 0x8001) + (0,) * 30
    tables[1].set_block(0, other)
    assert tables[0].blocks[0] == list(default) and tables[2].blocks[0] == list(default)
    assert tables[1].blocks[0] == list(other)
    assert 0x0001 in tables[1].keys and 0x0001 not in tables[0].keys


def test_answers_handed_on_as_they_come_are_not_kept():
    q = FakeAgent()
    got = []
    qs = light.Queries(q, _items(5), lambda key, data: got.append((key, len(data))))
    qs.start()
    q.answer_all()
    qs.poll()
    assert qs.done and got == [(i, 64) for i in range(5)] and qs.results == {}
