"""MR and MW keys are ``index << 8 | key byte`` (rxe); the key byte is
random (rxe_get_next_key), so knowing one key says nothing about the next
MR's -- except in a seeded simulation, which stays reproducible."""

from __future__ import annotations

import os
import random
from collections import Counter

from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE
from softrdma.sim import Simulator
from softrdma.transport import memory as memory_mod
from softrdma.transport.memory import MemoryTable
from softrdma.transport.mw import TYPE_2, MW

ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
PD = object()


def key_bytes(table: MemoryTable, n: int) -> list[int]:
    return [table.reg_mr(PD, 64, ACC).rkey & 0xFF for _ in range(n)]


def test_key_bytes_are_unpredictable():
    a, b = key_bytes(MemoryTable(), 64), key_bytes(MemoryTable(), 64)
    assert a != b                           # two devices: different keys (equal by chance: 2^-512)
    # no recurrence: the next key byte is not a function of the last one
    seq = key_bytes(MemoryTable(), 4000)
    succ: dict[int, set] = {}
    for x, y in zip(seq, seq[1:]):
        succ.setdefault(x, set()).add(y)
    assert max(len(s) for s in succ.values()) > 1
    counts = Counter(seq)
    assert len(counts) > 240 and max(counts.values()) < 60      # every byte value, none favoured (mean 15.6)


def test_key_layout_and_lkey_equals_rkey():
    t = MemoryTable()
    mrs = [t.reg_mr(PD, 64, ACC) for _ in range(5)]
    assert [m.rkey >> 8 for m in mrs] == [1, 2, 3, 4, 5]
    assert all(m.lkey == m.rkey and t.lookup(m.rkey) is m for m in mrs)
    w = MW(t, PD, TYPE_2)
    assert w.rkey >> 8 == 6 and t.lookup(w.rkey) is w


def test_csprng_is_drawn_in_batches(monkeypatch):
    calls = []
    real = os.urandom

    def urandom(n):
        calls.append(n)
        return real(n)
    monkeypatch.setattr(memory_mod.os, "urandom", urandom)
    key_bytes(MemoryTable(), 1000)
    assert len(calls) == 4 and set(calls) == {256}


def test_a_seeded_generator_gives_reproducible_keys():
    assert key_bytes(MemoryTable(rng=random.Random(7)), 50) == key_bytes(MemoryTable(rng=random.Random(7)), 50)
    assert key_bytes(MemoryTable(rng=random.Random(7)), 50) != key_bytes(MemoryTable(rng=random.Random(8)), 50)


def test_the_simulator_is_reproducible_per_seed():
    def keys(seed):
        sim = Simulator(seed)
        a, b = sim.add_node("a", "10.0.0.1"), sim.add_node("b", "10.0.0.2")
        return [n.reg_mr(64, ACC).rkey for n in (a, b, a, b)]
    assert keys(1) == keys(1)
    assert keys(1) != keys(2)
    k = keys(1)
    assert k[0] & 0xFF != k[1] & 0xFF or k[2] & 0xFF != k[3] & 0xFF     # nodes draw their own
