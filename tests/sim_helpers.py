"""Shared helpers for the simulator-driven transport tests (property + soak).

Everything here drives the public pieces only: ``Simulator``/``Link``/
``connect_qps`` from ``softrdma.sim``, QPs, MRs, WQEs and CQs.  Nothing in
``src/`` is patched; ``PacketTap`` only *reads* the packets a node is about
to put on the wire.

The heart is ``RCWorkload``: a random mix of SEND / SEND_WITH_IMM /
RDMA_WRITE / RDMA_WRITE_WITH_IMM / RDMA_READ / FETCH_AND_ADD / CMP_AND_SWP
from QP ``a`` to QP ``b``, laid out so that every way of getting it wrong
shows up in memory:

* every message has its own random payload;
* receive buffers are distinct and followed by guard bytes;
* RDMA WRITEs land at random (often overlapping) places of a "write area",
  so a stale duplicate re-executed after a later overlapping write leaves
  the wrong bytes behind;
* the responder's memory is modelled byte for byte by applying the ops in
  posting order (RC executes in PSN order), and the whole MR is compared
  with the model at the end -- misplaced or duplicated data anywhere fails;
* every READ's result is compared with the model's snapshot at that point
  (a READ of bytes a later WRITE overwrites gets IBV_SEND_FENCE on that
  WRITE, which is what a real application must do);
* all atomics hit one word; FETCH_AND_ADD adds distinct powers of two and
  CMP_AND_SWP chains (hits and deliberate misses) on the same word, so the
  final value and every returned original prove a single serial execution.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field

from softrdma.enums import (
    IBV_QPT_RC, IBV_QPS_ERR, IBV_SEND_FENCE,
    IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, IBV_WC_SUCCESS,
    IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_WR_FLUSH_ERR,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
    ibv_wc_status,
)
from softrdma.sim import Link, Simulator, connect_qps
from softrdma.transport.counters import Counter
from softrdma.transport.wr import RecvWQE, SendWQE

ACCESS_ALL = 0xF            # LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC
BYTEORDER = sys.byteorder   # the completer stores an ATOMIC's original value in host order
U64 = (1 << 64) - 1
GUARD = 16                  # guard bytes after every buffer
GRH_BYTES = 40
SENTINEL = 0xA5


def status_name(s: int) -> str:
    try:
        return ibv_wc_status(s).name
    except ValueError:
        return str(s)


# --------------------------------------------------------------------- setup
@dataclass
class LinkCfg:
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0
    jitter: float = 0.0
    delay: float = 5e-6

    def link(self) -> Link:
        return Link(loss=self.loss, dup=self.dup, reorder=self.reorder, corrupt=self.corrupt,
                    delay=self.delay, jitter=self.jitter)


@dataclass
class Pair:
    sim: Simulator
    a: object            # Node
    b: object            # Node
    qa: object           # requester QP (on a)
    qb: object           # responder QP (on b)
    fwd: Link            # a -> b
    back: Link           # b -> a
    t_stop: float = 0.0  # virtual time run_to_idle's stop() became true

    def packets_sent(self) -> int:
        return sum(link.stats.sent for link in self.sim.links.values())

    def counters(self, qp) -> dict[str, int]:
        return {c.name: qp.cnt[c] for c in Counter if qp.cnt[c]}


def make_pair(seed: int, qp_type: int = IBV_QPT_RC, fwd: LinkCfg | None = None,
              back: LinkCfg | None = None, **connect_kw) -> Pair:
    """Two nodes, one link each way, one connected QP on each side.
    ``connect_kw`` goes to ``connect_qps`` (path_mtu, psn_a, psn_b, timeout,
    retry_cnt, rnr_retry, min_rnr_timer, ...)."""
    sim = Simulator(seed=seed)
    a = sim.add_node("a", "10.0.0.1")
    b = sim.add_node("b", "10.0.0.2")
    fwd = fwd or LinkCfg()
    back = back or fwd
    lf, lb = sim.connect(a, b, fwd.link(), back.link())
    qa = a.create_qp(qp_type)
    qb = b.create_qp(qp_type)
    connect_qps(qa, qb, a, b, **connect_kw)
    return Pair(sim, a, b, qa, qb, lf, lb)


def run_to_idle(pair: Pair, *, stop=None, max_events: int = 3_000_000) -> int:
    """Run until ``stop()`` (if given; its virtual time is kept as
    ``pair.t_stop``) and then on until the network is idle (no packet in
    flight, no timer armed), so late duplicates get their chance to do
    damage before the checks.  Fails on a livelock."""
    sim = pair.sim
    n = sim.run(max_events=max_events, stop=stop)
    pair.t_stop = sim.now
    n += sim.run(max_events=max_events - n)
    assert n < max_events, f"no quiescence after {n} events (t={sim.now}): livelock?"
    return n


class PacketTap:
    """Records every packet a node hands to the network, before loss or
    duplication: (time, node name, opcode, psn, qpn).  Read-only."""

    def __init__(self, sim: Simulator):
        self.sim = sim
        self.log: list[tuple[float, str, int, int, int]] = []
        orig = sim._transmit

        def transmit(src, _orig=orig):
            for qp, pkt, av in src.tx:
                self.log.append((sim.now, src.name, pkt[0],
                                 (pkt[9] << 16) | (pkt[10] << 8) | pkt[11],
                                 (pkt[5] << 16) | (pkt[6] << 8) | pkt[7]))
            _orig(src)

        sim._transmit = transmit

    def sent(self, node: str, psn: int | None = None):
        return [e for e in self.log if e[1] == node and (psn is None or e[3] == psn)]


def sentinel(n: int) -> bytes:
    return bytes([SENTINEL]) * n


# ----------------------------------------------------------------- workloads
KINDS = ("send", "send_imm", "write", "write_imm", "read", "fadd", "cas")
_RECV_CONSUMERS = ("send", "send_imm", "write_imm")


@dataclass
class Op:
    kind: str
    size: int = 0


@dataclass
class _Planned:
    op: Op
    wr_id: int
    payload: bytes = b""
    local_off: int = 0             # offset in the requester's MR (first piece)
    local_pieces: list = field(default_factory=list)   # [(offset, length)]: the WQE's SGEs
    remote_off: int = 0            # offset in the responder's MR (write target / read source / atomic)
    imm: int = 0
    fence: bool = False
    recv_idx: int = -1             # which receive WQE this message consumes
    add: int = 0                   # FETCH_AND_ADD
    compare: int = 0               # CMP_AND_SWP
    swap: int = 0
    expect: bytes | int | None = None   # READ bytes / ATOMIC original value (from the model)


class RCWorkload:
    """One batch of random RC operations a -> b with a byte-exact model.

    Use: ``w = RCWorkload(pair, ops, rng)``, ``w.post_recvs()`` (or post them
    yourself later with ``w.post_recv(i)``), ``w.post_sends()``, run the
    simulator, then ``w.check()``.  Each workload registers its own two
    MRs (``w.ma`` on a, ``w.mb`` on b); long runs deregister them after the
    check."""

    def __init__(self, pair: Pair, ops: list[Op], rng: random.Random, *, fence_reads: bool = True):
        self.pair = pair
        self.ops = ops
        self.rng = rng
        mtu = pair.qa.mtu
        self.mtu = mtu
        maxsize = max([o.size for o in ops] + [1])
        write_total = sum(o.size for o in ops if o.kind in ("write", "write_imm"))
        # responder layout: [atomic word | recv buffers | write area | read-only area]
        self.atomic_off = 0
        off = 64
        plan: list[_Planned] = []
        n_recv = 0
        for i, op in enumerate(ops):
            p = _Planned(op, wr_id=0x1000 + i)
            if op.kind in _RECV_CONSUMERS:
                p.recv_idx = n_recv
                n_recv += 1
            plan.append(p)
        # receive buffers: (offset, length) of each SGE, the message fills them in order
        self.recv_bufs: list[list[tuple[int, int]]] = []
        self.recv_len: list[int] = []
        self.recv_consumer: list[_Planned] = []
        for p in plan:
            if p.recv_idx >= 0:
                ln = p.op.size if p.op.kind != "write_imm" else 8
                ln += rng.randrange(0, 9)                 # a bit of slack the message must not touch
                pieces, off = _layout(off, split_sges(rng, ln))
                self.recv_bufs.append(pieces)
                self.recv_len.append(ln)
                self.recv_consumer.append(p)
        off = (off + 63) & ~63
        self.write_area = (off, max(write_total // 2, maxsize, 64))
        off += self.write_area[1] + GUARD
        self.read_area = (off, max(maxsize, 64))
        off += self.read_area[1] + GUARD
        self.remote_len = off
        # requester layout: distinct SGEs per op (atomics: one 8-byte aligned SGE)
        loff = 0
        for p in plan:
            if p.op.kind in ("fadd", "cas"):
                loff = (loff + 7) & ~7
                p.local_pieces, loff = _layout(loff, [8])
            else:
                p.local_pieces, loff = _layout(loff, split_sges(rng, p.op.size))
            p.local_off = p.local_pieces[0][0]
        self.local_len = max(loff, 64)

        pa, pb = pair.a, pair.b
        self.ma = pa.reg_mr(self.local_len, ACCESS_ALL)
        self.mb = pb.reg_mr(self.remote_len, ACCESS_ALL)
        local = bytearray(sentinel(self.local_len))
        remote = bytearray(sentinel(self.remote_len))
        atomic0 = rng.getrandbits(64)
        remote[0:8] = atomic0.to_bytes(8, BYTEORDER)
        ra_off, ra_len = self.read_area
        remote[ra_off:ra_off + ra_len] = rng.randbytes(ra_len)
        self.mb.write(bytes(remote))

        # --- the model: apply every op in posting order
        model = bytearray(remote)
        atom = atomic0
        fadd_bit = 0
        wa_off, wa_len = self.write_area
        read_ranges: list[tuple[int, int]] = []     # write-area ranges read and not yet fenced
        for p in plan:
            op = p.op
            k = op.kind
            if k in ("send", "send_imm", "write", "write_imm"):
                p.payload = rng.randbytes(op.size)
                put_pieces(local, p.local_pieces, p.payload)
            if k in ("send_imm", "write_imm"):
                p.imm = rng.getrandbits(32)
            if k in ("send", "send_imm"):
                put_pieces(model, self.recv_bufs[p.recv_idx], p.payload)
            elif k in ("write", "write_imm"):
                p.remote_off = wa_off + rng.randrange(0, wa_len - op.size + 1)
                lo, hi = p.remote_off, p.remote_off + op.size
                if fence_reads and op.size and any(lo < rhi and rlo < hi for rlo, rhi in read_ranges):
                    p.fence = True
                    read_ranges.clear()
                model[lo:hi] = p.payload
            elif k == "read":
                if rng.random() < 0.5 and op.size <= wa_len:
                    p.remote_off = wa_off + rng.randrange(0, wa_len - op.size + 1)
                    if op.size:
                        read_ranges.append((p.remote_off, p.remote_off + op.size))
                else:
                    p.remote_off = ra_off + rng.randrange(0, ra_len - op.size + 1)
                p.expect = bytes(model[p.remote_off:p.remote_off + op.size])
            elif k == "fadd":
                p.add = 1 << (fadd_bit % 64)
                fadd_bit += 1
                p.expect = atom
                atom = (atom + p.add) & U64
            elif k == "cas":
                p.compare = atom if rng.random() < 0.7 else atom ^ (1 << rng.randrange(64))
                p.swap = rng.getrandbits(64)
                p.expect = atom
                if atom == p.compare:
                    atom = p.swap
            else:
                raise ValueError(k)
        model[0:8] = atom.to_bytes(8, BYTEORDER)
        self.ma.write(bytes(local))
        self.local0 = bytes(local)
        self.model = bytes(model)
        self.atomic0 = atomic0
        self.atomic_final = atom
        self.plan = plan

    # ------------------------------------------------------------ posting
    @property
    def n_recv(self) -> int:
        return len(self.recv_bufs)

    def post_recv(self, i: int) -> None:
        mb = self.mb
        self.pair.qb.post_recv(RecvWQE(0x2000 + i, [(mb.addr + off, ln, mb.lkey) for off, ln in self.recv_bufs[i]]))

    def post_recvs(self) -> None:
        for i in range(self.n_recv):
            self.post_recv(i)

    def post_sends(self) -> None:
        ma, mb = self.ma, self.mb
        qa = self.pair.qa
        for p in self.plan:
            k = p.op.kind
            flags = IBV_SEND_FENCE if p.fence else 0
            sge = [(ma.addr + off, ln, ma.lkey) for off, ln in p.local_pieces]
            if k == "send":
                w = SendWQE(p.wr_id, IBV_WR_SEND, sge, send_flags=flags)
            elif k == "send_imm":
                w = SendWQE(p.wr_id, IBV_WR_SEND_WITH_IMM, sge, imm_data=p.imm, send_flags=flags)
            elif k == "write":
                w = SendWQE(p.wr_id, IBV_WR_RDMA_WRITE, sge, remote_addr=mb.addr + p.remote_off,
                            rkey=mb.rkey, send_flags=flags)
            elif k == "write_imm":
                w = SendWQE(p.wr_id, IBV_WR_RDMA_WRITE_WITH_IMM, sge, remote_addr=mb.addr + p.remote_off,
                            rkey=mb.rkey, imm_data=p.imm, send_flags=flags)
            elif k == "read":
                w = SendWQE(p.wr_id, IBV_WR_RDMA_READ, sge, remote_addr=mb.addr + p.remote_off,
                            rkey=mb.rkey, send_flags=flags)
            elif k == "fadd":
                w = SendWQE(p.wr_id, IBV_WR_ATOMIC_FETCH_AND_ADD, sge,
                            remote_addr=mb.addr + self.atomic_off, rkey=mb.rkey, compare_add=p.add,
                            send_flags=flags)
            else:
                w = SendWQE(p.wr_id, IBV_WR_ATOMIC_CMP_AND_SWP, sge,
                            remote_addr=mb.addr + self.atomic_off, rkey=mb.rkey, compare_add=p.compare,
                            swap=p.swap, send_flags=flags)
            qa.post_send(w)

    def done(self) -> bool:
        return len(self.pair.qa.send_cq) >= len(self.plan)

    # ------------------------------------------------------------ checking
    _WC_OP = {"send": IBV_WC_SEND, "send_imm": IBV_WC_SEND, "write": IBV_WC_RDMA_WRITE,
              "write_imm": IBV_WC_RDMA_WRITE, "read": IBV_WC_RDMA_READ, "fadd": IBV_WC_FETCH_ADD,
              "cas": IBV_WC_COMP_SWAP}

    def check(self) -> str:
        """Assert everything; returns "ok" or "retry_exc" (the one acceptable
        failure: the oldest incomplete WQE RETRY_EXC_ERR, the rest flushed)."""
        qa, qb = self.pair.qa, self.pair.qb
        plan = self.plan
        scq = qa.send_cq.poll(len(qa.send_cq) + 1)
        rcq = qb.recv_cq.poll(len(qb.recv_cq) + 1)
        ctx = self.describe(scq, rcq)
        assert not qa.send_cq.overrun and not qb.recv_cq.overrun
        if len(scq) < len(plan) and qa.state != IBV_QPS_ERR:
            raise AssertionError(f"requester stalled: {len(scq)}/{len(plan)} WQEs completed, network idle, "
                                 f"no timer armed (timer_at={qa.timer_at}, rnr_at={qa.rnr_at}, "
                                 f"comp_psn={qa.comp_psn:#x}, req_psn={qa.req_psn:#x})\n{ctx}")
        assert [wc.wr_id for wc in scq] == [p.wr_id for p in plan], f"send completions out of order/missing\n{ctx}"
        n_ok = 0
        while n_ok < len(scq) and scq[n_ok].status == IBV_WC_SUCCESS:
            n_ok += 1
        outcome = "ok"
        if n_ok < len(plan):
            outcome = "retry_exc"
            assert scq[n_ok].status == IBV_WC_RETRY_EXC_ERR, \
                f"wr {n_ok} ended {status_name(scq[n_ok].status)}\n{ctx}"
            bad = [(i, status_name(wc.status)) for i, wc in enumerate(scq[n_ok + 1:], n_ok + 1)
                   if wc.status != IBV_WC_WR_FLUSH_ERR]
            assert not bad, f"after RETRY_EXC_ERR only FLUSH_ERR may follow: {bad}\n{ctx}"
            assert qa.state == IBV_QPS_ERR
        for p, wc in zip(plan[:n_ok], scq):
            assert wc.opcode == self._WC_OP[p.op.kind], f"{p.wr_id}: WC opcode {wc.opcode}\n{ctx}"
            exp_len = 8 if p.op.kind in ("fadd", "cas") else p.op.size
            assert wc.byte_len == exp_len, f"{p.wr_id}: byte_len {wc.byte_len} != {exp_len}\n{ctx}"

        # --- responder side: receive completions are an in-order prefix of the
        #     expected ones, each exactly once (all of them on success)
        got_recv = [wc for wc in rcq if wc.status == IBV_WC_SUCCESS]
        flushed = [wc for wc in rcq if wc.status != IBV_WC_SUCCESS]
        assert not flushed, f"receive errors {flushed}\n{ctx}"
        n_recv_done = sum(1 for p in plan[:n_ok] if p.recv_idx >= 0)
        if outcome == "ok":
            assert len(got_recv) == self.n_recv, f"{len(got_recv)} receive completions, want {self.n_recv}\n{ctx}"
        else:
            assert n_recv_done <= len(got_recv) <= self.n_recv, f"receive completions {len(got_recv)}\n{ctx}"
        mb_now = self.mb.read(self.remote_len)
        for i, wc in enumerate(got_recv):
            p = self.recv_consumer[i]
            assert wc.wr_id == 0x2000 + i, f"receive #{i} completed wr_id {wc.wr_id:#x}\n{ctx}"
            k = p.op.kind
            if k == "write_imm":
                assert wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, f"recv #{i} opcode {wc.opcode}\n{ctx}"
            else:
                assert wc.opcode == IBV_WC_RECV, f"recv #{i} opcode {wc.opcode}\n{ctx}"
            assert wc.byte_len == p.op.size, f"recv #{i} byte_len {wc.byte_len} != {p.op.size}\n{ctx}"
            if k in ("send_imm", "write_imm"):
                assert wc.wc_flags & IBV_WC_WITH_IMM and wc.imm_data == p.imm, f"recv #{i} imm\n{ctx}"
            else:
                assert not wc.wc_flags & IBV_WC_WITH_IMM, f"recv #{i} flags\n{ctx}"
            assert wc.src_qp == qa.qp_num
            pieces = self.recv_bufs[i]
            want = (p.payload if k != "write_imm" else b"") + sentinel(self.recv_len[i])
            got = get_pieces(mb_now, pieces, self.recv_len[i])
            want = want[:self.recv_len[i]]
            assert got == want, f"recv #{i} ({p.wr_id:#x}, {len(pieces)} SGEs) bytes differ at " \
                                f"{_first_diff(got, want)}\n{ctx}"
            for off, ln in pieces:
                assert mb_now[off + ln:off + ln + GUARD] == sentinel(GUARD), f"recv #{i} overran an SGE\n{ctx}"

        # --- requester side: READ results and ATOMIC originals
        ma_now = self.ma.read(self.local_len)
        for p in plan[:n_ok]:
            k = p.op.kind
            lo = p.local_off
            if k == "read":
                got = get_pieces(ma_now, p.local_pieces, p.op.size)
                assert got == p.expect, f"READ {p.wr_id:#x} ({p.op.size} B) returned wrong bytes " \
                                        f"(first diff at {_first_diff(got, p.expect)})\n{ctx}"
            elif k in ("fadd", "cas"):
                got = int.from_bytes(ma_now[lo:lo + 8], BYTEORDER)
                assert got == p.expect, f"{k} {p.wr_id:#x} returned {got:#x}, serial order says {p.expect:#x}\n{ctx}"
        if outcome == "ok":
            assert ma_now == self._local_expected(), f"requester memory differs outside results\n{ctx}"
            d = _first_diff(mb_now, self.model)
            assert d is None, f"responder memory differs from the model at offset {d} " \
                              f"({self.where(d)})\n{ctx}"
        else:
            self._check_partial(mb_now, n_ok, ctx)
        return outcome

    def _local_expected(self) -> bytes:
        local = bytearray(self.local0)
        for p in self.plan:
            if p.op.kind == "read":
                put_pieces(local, p.local_pieces, p.expect)
            elif p.op.kind in ("fadd", "cas"):
                local[p.local_off:p.local_off + 8] = p.expect.to_bytes(8, BYTEORDER)
        return bytes(local)

    def _check_partial(self, mb_now: bytes, n_ok: int, ctx: str) -> None:
        """After RETRY_EXC_ERR at op n_ok: completed WRITEs' bytes not touched
        by any later op are exact, the read-only area untouched, the atomic
        word equals the model after some prefix m >= n_ok."""
        ra_off, ra_len = self.read_area
        assert mb_now[ra_off:ra_off + ra_len] == self.model[ra_off:ra_off + ra_len], ctx
        writes = [(i, p) for i, p in enumerate(self.plan) if p.op.kind in ("write", "write_imm")]
        for i, p in writes:
            if i >= n_ok:
                break
            covered = bytearray(p.op.size)          # 1 where a later WRITE may have overwritten
            for j, q in writes:
                if j <= i:
                    continue
                lo = max(p.remote_off, q.remote_off)
                hi = min(p.remote_off + p.op.size, q.remote_off + q.op.size)
                if lo < hi:
                    covered[lo - p.remote_off:hi - p.remote_off] = b"\x01" * (hi - lo)
            for j in range(p.op.size):
                if not covered[j]:
                    assert mb_now[p.remote_off + j] == p.payload[j], \
                        f"completed WRITE {p.wr_id:#x} byte {j} wrong\n{ctx}"
        got = int.from_bytes(mb_now[0:8], BYTEORDER)
        prefix_vals = []
        atom = self.atomic0
        for i, p in enumerate(self.plan):
            if i >= n_ok:
                prefix_vals.append(atom)
            if p.op.kind == "fadd":
                atom = (atom + p.add) & U64
            elif p.op.kind == "cas" and atom == p.compare:
                atom = p.swap
        prefix_vals.append(atom)
        assert got in prefix_vals, f"atomic word {got:#x} matches no serial prefix >= {n_ok}\n{ctx}"

    # ------------------------------------------------------------ diagnostics
    def where(self, off: int | None) -> str:
        if off is None:
            return "-"
        if off < 8:
            return "atomic word"
        for i, pieces in enumerate(self.recv_bufs):
            for j, (o, ln) in enumerate(pieces):
                if o <= off < o + ln + GUARD:
                    return f"recv buffer {i} SGE {j} (+{off - o})"
        wa, wl = self.write_area
        if wa <= off < wa + wl + GUARD:
            hits = [hex(p.wr_id) for p in self.plan if p.op.kind in ("write", "write_imm")
                    and p.remote_off <= off < p.remote_off + p.op.size]
            return f"write area +{off - wa}, written by {hits}"
        return "read-only area"

    def describe(self, scq=None, rcq=None) -> str:
        pr = self.pair
        ops = " ".join(f"{p.op.kind}:{p.op.size}{'F' if p.fence else ''}" for p in self.plan)
        s = [f"mtu={self.mtu} ops=[{ops}]",
             f"t={pr.sim.now:.6f} links={[(k, l.stats) for k, l in pr.sim.links.items()]}",
             f"qa={pr.counters(pr.qa)} state={pr.qa.state!r}",
             f"qb={pr.counters(pr.qb)} state={pr.qb.state!r}"]
        if scq is not None:
            s.append(f"send cq={[(hex(w.wr_id), status_name(w.status)) for w in scq]}")
        if rcq is not None:
            s.append(f"recv cq={[(hex(w.wr_id), status_name(w.status), w.byte_len) for w in rcq]}")
        return "\n".join(s)


class UCWorkload:
    """SEND / SEND_WITH_IMM / RDMA_WRITE / RDMA_WRITE_WITH_IMM over UC, a -> b.

    UC loses whole messages (or, for an RDMA WRITE, a whole-packet tail: the
    packets before the loss were already placed), never retransmits.  Every
    message has its own payload; every WRITE its own region with guard bytes;
    imm_data is the message index.  Receive buffers all fit the largest
    message, since which WQE a message lands in depends on what was lost."""

    def __init__(self, pair: Pair, ops: list[Op], rng: random.Random):
        assert all(o.kind in ("send", "send_imm", "write", "write_imm") for o in ops)
        self.pair = pair
        self.ops = ops
        self.mtu = pair.qa.mtu
        maxsize = max([o.size for o in ops] + [1])
        self.payloads = [rng.randbytes(o.size) for o in ops]
        self.n_recv = sum(1 for o in ops if o.kind != "write")
        self.recv_len = maxsize
        loff = 0
        self.local_off = []
        for o in ops:
            self.local_off.append(loff)
            loff += o.size + GUARD
        self.local_len = max(loff, 64)
        roff = 0
        self.recv_off = []
        for _ in range(self.n_recv):
            self.recv_off.append(roff)
            roff += maxsize + GUARD
        self.write_off = []
        for o in ops:
            self.write_off.append(roff)
            roff += (o.size if o.kind.startswith("write") else 0) + GUARD
        self.remote_len = max(roff, 64)
        self.ma = pair.a.reg_mr(self.local_len, ACCESS_ALL)
        self.mb = pair.b.reg_mr(self.remote_len, ACCESS_ALL)
        local = bytearray(sentinel(self.local_len))
        for o, off, pl in zip(ops, self.local_off, self.payloads):
            local[off:off + o.size] = pl
        self.ma.write(bytes(local))
        self.mb.write(sentinel(self.remote_len))

    def post_recvs(self) -> None:
        mb = self.mb
        for i in range(self.n_recv):
            self.pair.qb.post_recv(RecvWQE(0x2000 + i, [(mb.addr + self.recv_off[i], self.recv_len, mb.lkey)]))

    def post_sends(self) -> None:
        ma, mb, qa = self.ma, self.mb, self.pair.qa
        for i, o in enumerate(self.ops):
            sge = [(ma.addr + self.local_off[i], o.size, ma.lkey)]
            op = {"send": IBV_WR_SEND, "send_imm": IBV_WR_SEND_WITH_IMM, "write": IBV_WR_RDMA_WRITE,
                  "write_imm": IBV_WR_RDMA_WRITE_WITH_IMM}[o.kind]
            qa.post_send(SendWQE(0x1000 + i, op, sge, imm_data=i if o.kind.endswith("imm") else 0,
                                 remote_addr=mb.addr + self.write_off[i],
                                 rkey=mb.rkey))

    def check(self, *, strict: bool = True) -> dict:
        """``strict`` (no duplication, no reordering on the wire): every
        delivered message exactly once and in posting order.  Always: every
        completion byte-exact, no byte outside a message's place touched."""
        qa, qb = self.pair.qa, self.pair.qb
        scq = qa.send_cq.poll(len(qa.send_cq) + 1)
        rcq = qb.recv_cq.poll(len(qb.recv_cq) + 1)
        ctx = (f"mtu={self.mtu} ops={[(o.kind, o.size) for o in self.ops]}\n"
               f"links={[(k, l.stats) for k, l in self.pair.sim.links.items()]}\n"
               f"qb={self.pair.counters(qb)}\nrecv={rcq}")
        assert [(w.wr_id, w.status) for w in scq] == [(0x1000 + i, IBV_WC_SUCCESS) for i in range(len(self.ops))], \
            f"UC send completions {scq}\n{ctx}"
        mb_now = self.mb.read(self.remote_len)
        delivered = []
        used_wqes = []
        for wc in rcq:
            assert wc.status == IBV_WC_SUCCESS, f"receive error {wc}\n{ctx}"
            widx = wc.wr_id - 0x2000
            assert 0 <= widx < self.n_recv, f"{wc}\n{ctx}"
            if wc.wc_flags & IBV_WC_WITH_IMM:
                i = wc.imm_data
                assert 0 <= i < len(self.ops) and self.ops[i].kind != "send", f"imm {i}\n{ctx}"
            else:
                # a plain SEND: identified by its bytes (the next match after the last delivered)
                off = self.recv_off[widx]
                cands = [j for j, o in enumerate(self.ops) if o.kind == "send" and o.size == wc.byte_len
                         and mb_now[off:off + o.size] == self.payloads[j]]
                assert cands, f"plain SEND in recv {widx} ({wc.byte_len} B) matches no message\n{ctx}"
                later = [j for j in cands if not delivered or j > delivered[-1]]
                i = (later or cands)[0]
            o = self.ops[i]
            assert wc.byte_len == o.size, f"message {i} byte_len {wc.byte_len} != {o.size}\n{ctx}"
            assert wc.src_qp == qa.qp_num
            if o.kind in ("send", "send_imm"):
                assert wc.opcode == IBV_WC_RECV, f"{wc}\n{ctx}"
                off = self.recv_off[widx]
                got = mb_now[off:off + o.size]
                assert got == self.payloads[i], f"message {i} (send {o.size} B) in recv {widx} not exact " \
                                                f"(first diff {_first_diff(got, self.payloads[i])})\n{ctx}"
            else:
                assert wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, f"{wc}\n{ctx}"
                off = self.write_off[i]
                assert mb_now[off:off + o.size] == self.payloads[i], f"write_imm {i} completed, data not exact\n{ctx}"
            delivered.append(i)
            used_wqes.append(widx)
        # receive WQEs are consumed in FIFO order (an abandoned one is reused)
        assert used_wqes == list(range(len(used_wqes))), f"receive WQEs used out of order {used_wqes}\n{ctx}"
        if strict:
            assert delivered == sorted(set(delivered)), f"UC delivered out of order/duplicated: {delivered}\n{ctx}"
        # RDMA WRITE regions: all of it, or a whole-packet prefix, never anything else
        mtu = self.mtu
        for i, o in enumerate(self.ops):
            if not o.kind.startswith("write"):
                continue
            off = self.write_off[i]
            region = mb_now[off:off + o.size]
            pl = self.payloads[i]
            k = 0
            while k < o.size and region[k] == pl[k]:
                k += 1
            if k < o.size:
                k -= k % mtu                       # placed data ends on a packet boundary
                assert region[:k] == pl[:k] and region[k:] == sentinel(o.size - k), \
                    f"write {i} ({o.size} B) region is neither complete nor a packet prefix\n{ctx}"
            assert mb_now[off + o.size:off + o.size + GUARD] == sentinel(GUARD), f"write {i} overran\n{ctx}"
        # no receive buffer overran (an abandoned SEND may have left packets inside one)
        for widx in range(self.n_recv):
            end = self.recv_off[widx] + self.recv_len
            assert mb_now[end:end + GUARD] == sentinel(GUARD), f"recv buffer {widx} overran\n{ctx}"
        return {"delivered": delivered, "n": len(self.ops)}


class UDWorkload:
    """SEND / SEND_WITH_IMM datagrams a -> b (each at most one MTU)."""

    def __init__(self, pair: Pair, sizes: list[int], imm: list[bool], rng: random.Random, qkey: int = 0x11111111):
        self.pair = pair
        self.sizes = sizes
        self.imm = imm
        self.qkey = qkey
        self.payloads = [rng.randbytes(n) for n in sizes]
        maxsize = max(sizes + [1])
        self.recv_len = GRH_BYTES + maxsize
        self.local_off = []
        loff = 0
        for n in sizes:
            self.local_off.append(loff)
            loff += n + GUARD
        self.ma = pair.a.reg_mr(max(loff, 64), ACCESS_ALL)
        for off, pl in zip(self.local_off, self.payloads):
            self.ma.write(pl, off)
        self.n_recv = 2 * len(sizes) + 1           # room for every duplicate
        self.mb = pair.b.reg_mr(self.n_recv * (self.recv_len + GUARD), ACCESS_ALL)
        self.mb.write(sentinel(self.mb.length))

    def post_recvs(self) -> None:
        mb = self.mb
        for i in range(self.n_recv):
            self.pair.qb.post_recv(RecvWQE(0x2000 + i, [(mb.addr + i * (self.recv_len + GUARD), self.recv_len,
                                                         mb.lkey)]))

    def post_sends(self) -> None:
        pr = self.pair
        av = pr.a.av_to(pr.b)
        ma = self.ma
        for i, n in enumerate(self.sizes):
            op = IBV_WR_SEND_WITH_IMM if self.imm[i] else IBV_WR_SEND
            pr.qa.post_send(SendWQE(0x1000 + i, op, [(ma.addr + self.local_off[i], n, ma.lkey)],
                                    imm_data=i if self.imm[i] else 0, ah=av, remote_qpn=pr.qb.qp_num,
                                    remote_qkey=self.qkey))

    def check(self, *, in_order_once: bool) -> list[int]:
        import ipaddress
        pr = self.pair
        qa, qb = pr.qa, pr.qb
        scq = qa.send_cq.poll(len(qa.send_cq) + 1)
        rcq = qb.recv_cq.poll(len(qb.recv_cq) + 1)
        ctx = f"sizes={self.sizes}\nlinks={[(k, l.stats) for k, l in pr.sim.links.items()]}\nrecv={rcq}"
        assert [(w.wr_id, w.status) for w in scq] == [(0x1000 + i, IBV_WC_SUCCESS) for i in range(len(self.sizes))], \
            f"UD send completions {scq}\n{ctx}"
        mb_now = self.mb.read(self.mb.length)
        src_ip = ipaddress.IPv4Address(pr.a.ip).packed
        dst_ip = ipaddress.IPv4Address(pr.b.ip).packed
        got = []
        by_size: dict[int, list[int]] = {}
        for i, n in enumerate(self.sizes):
            if not self.imm[i]:
                by_size.setdefault(n, []).append(i)
        for k, wc in enumerate(rcq):
            assert wc.status == IBV_WC_SUCCESS, f"{wc}\n{ctx}"
            assert wc.wr_id == 0x2000 + k, f"receive WQEs out of order: {wc}\n{ctx}"
            assert wc.opcode == IBV_WC_RECV and wc.wc_flags & IBV_WC_GRH, f"{wc}\n{ctx}"
            assert wc.src_qp == qa.qp_num, f"{wc}\n{ctx}"
            off = k * (self.recv_len + GUARD)
            buf = mb_now[off:off + self.recv_len + GUARD]
            grh = buf[:GRH_BYTES]
            ip = grh[20:40]
            assert ip[0] == 0x45 and ip[9] == 17 and ip[12:16] == src_ip and ip[16:20] == dst_ip, \
                f"GRH area does not hold the IPv4 header: {grh.hex()}\n{ctx}"
            n = wc.byte_len - GRH_BYTES
            data = buf[GRH_BYTES:GRH_BYTES + n]
            if wc.wc_flags & IBV_WC_WITH_IMM:
                i = wc.imm_data
                assert 0 <= i < len(self.sizes) and self.imm[i], f"{wc}\n{ctx}"
                assert n == self.sizes[i] and data == self.payloads[i], f"datagram {i} not exact\n{ctx}"
            else:
                cands = [i for i in by_size.get(n, []) if self.payloads[i] == data]
                assert cands, f"datagram in recv {k} ({n} B) matches no message sent\n{ctx}"
                i = cands[0]
            assert buf[GRH_BYTES + n:] == sentinel(self.recv_len - GRH_BYTES - n + GUARD), \
                f"datagram in recv {k} wrote past its end\n{ctx}"
            got.append(i)
        if in_order_once:
            # no dup/reorder on the wire: a subsequence of the sent order (payload-identified
            # tiny datagrams may be ambiguous, so compare sizes+imm where ids collide)
            assert len(got) <= len(self.sizes), ctx
            j = 0
            for i in got:
                while j < len(self.sizes) and not (self.sizes[j] == self.sizes[i] and self.payloads[j] ==
                                                   self.payloads[i] and self.imm[j] == self.imm[i]):
                    j += 1
                assert j < len(self.sizes), f"UD datagrams out of order: {got}\n{ctx}"
                j += 1
        return got


class DropFilter:
    """Deterministic fault injection at a node's receive side: the first
    ``count`` packets for which ``pred(opcode, psn)`` holds are dropped (test
    side only: wraps ``node.deliver``)."""

    def __init__(self, node, pred, count: int = 1):
        self.dropped = []
        self.pred = pred
        self.count = count
        inner = node.deliver

        def deliver(payload, ip_hdr, sport, now, _inner=inner):
            op = payload[0]
            psn = (payload[9] << 16) | (payload[10] << 8) | payload[11]
            if len(self.dropped) < self.count and self.pred(op, psn):
                self.dropped.append((now, op, psn))
                return
            _inner(payload, ip_hdr, sport, now)

        node.deliver = deliver


def split_sges(rng: random.Random, n: int, max_sge: int = 4) -> list[int]:
    """Split a buffer of n bytes into 1..max_sge SGE lengths (zero-length
    ones included now and then)."""
    if n < 2 or rng.random() < 0.5:
        return [n]
    k = rng.randint(2, max_sge)
    cuts = sorted(rng.randint(0, n) for _ in range(k - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [n])]


def _layout(off: int, lengths: list[int]) -> tuple[list[tuple[int, int]], int]:
    """Place SGEs of ``lengths`` from ``off``, each followed by guard bytes."""
    pieces = []
    for ln in lengths:
        pieces.append((off, ln))
        off += ln + GUARD
    return pieces, off


def put_pieces(buf: bytearray, pieces, data: bytes) -> None:
    pos = 0
    for off, ln in pieces:
        chunk = data[pos:pos + ln]
        buf[off:off + len(chunk)] = chunk
        pos += ln


def get_pieces(buf: bytes, pieces, n: int) -> bytes:
    return b"".join(bytes(buf[off:off + ln]) for off, ln in pieces)[:n]


def _first_diff(a: bytes, b: bytes):
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def random_ops(rng: random.Random, n: int, mtu: int, kinds=KINDS, large: int = 0) -> list[Op]:
    """n random ops; sizes 0 .. 3*MTU+1 with the interesting edges weighted
    in, and ``large`` of them 8..24 MTUs long (atomics are 8 bytes)."""
    edges = [0, 1, 3, 4, 5, mtu - 1, mtu, mtu + 1, 2 * mtu, 2 * mtu + 1, 3 * mtu, 3 * mtu + 1]
    ops = []
    for _ in range(n):
        k = rng.choice(kinds)
        if k in ("fadd", "cas"):
            size = 8
        elif rng.random() < 0.3:
            size = rng.choice(edges)
        else:
            size = rng.randrange(0, 3 * mtu + 2)
        ops.append(Op(k, size))
    for _ in range(large):
        k = rng.choice([k for k in kinds if k not in ("fadd", "cas")] or ["send"])
        n = rng.randrange(8 * mtu, 24 * mtu + 1) if rng.random() < 0.8 else rng.randrange(100 * mtu, 200 * mtu + 1)
        ops.insert(rng.randrange(len(ops) + 1), Op(k, n))
    return ops




# ----------------------------------------------------------------- soak
@dataclass
class SoakResult:
    packets: int = 0                 # sum of every link's ``sent`` (incl. retransmissions, ACKs, responses)
    virtual_time: float = 0.0        # seconds of simulated time
    wall_time: float = 0.0
    retransmissions: int = 0         # requester packets sent again (Counter.retransmitted_pkts)
    batches: int = 0
    ops: int = 0
    bytes_checked: int = 0           # payload bytes verified byte for byte
    retry_exc: int = 0               # batches that ended in the spec's RETRY_EXC_ERR (then: new QP pair)
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    byte_exact: bool = True
    failure: str = ""
    counters: dict = field(default_factory=dict)

    def summary(self) -> str:
        return (f"packets={self.packets} virtual_time={self.virtual_time:.3f}s wall={self.wall_time:.1f}s "
                f"({self.packets / max(self.wall_time, 1e-9):.0f} pkt/s) retransmissions={self.retransmissions} "
                f"lost={self.lost} duplicated={self.duplicated} reordered={self.reordered} "
                f"batches={self.batches} ops={self.ops} bytes_checked={self.bytes_checked} "
                f"retry_exc={self.retry_exc} byte_exact={self.byte_exact}")


def soak(target_packets: int, *, seed: int = 1, loss: float = 0.1, reorder: float = 0.1, dup: float = 0.05,
         corrupt: float = 0.0, mtu_enum: int = 3, batch_ops: int = 64, timeout: int = 10,
         psn_start: int = 0xFFFFFF - 20_000, progress=None, stop_on_failure: bool = True) -> SoakResult:
    """RC traffic a -> b through a lossy/reordering/duplicating link until
    ``target_packets`` packets crossed the wire, checking every batch of
    ``batch_ops`` random operations byte for byte (``RCWorkload.check``).
    The PSN starts just below 0xFFFFFF so the run wraps.  A batch that ends
    in RETRY_EXC_ERR (legal, rare) is checked as such and the run goes on
    with a fresh QP pair."""
    import time
    res = SoakResult()
    rng = random.Random(seed)
    cfg = LinkCfg(loss=loss, dup=dup, reorder=reorder, corrupt=corrupt)
    t0 = time.perf_counter()
    done_pkts = 0
    done_time = 0.0
    pair_no = 0

    def new_pair():
        nonlocal pair_no
        pair_no += 1
        return make_pair(seed * 1000 + pair_no, fwd=cfg, path_mtu=mtu_enum, psn_a=psn_start,
                         psn_b=psn_start, timeout=timeout, retry_cnt=7, rnr_retry=7)

    def account(pair):
        nonlocal done_pkts, done_time
        done_pkts += pair.packets_sent()
        done_time += pair.sim.now
        res.retransmissions += pair.qa.cnt[Counter.retransmitted_pkts]
        for link in pair.sim.links.values():
            res.lost += link.stats.lost
            res.duplicated += link.stats.duplicated
            res.reordered += link.stats.reordered
        for qp in (pair.qa, pair.qb):
            for c in Counter:
                if qp.cnt[c]:
                    res.counters[c.name] = res.counters.get(c.name, 0) + qp.cnt[c]

    pair = new_pair()
    mtu = pair.qa.mtu
    try:
        while done_pkts + pair.packets_sent() < target_packets:
            ops = random_ops(rng, batch_ops, mtu, large=1)
            w = RCWorkload(pair, ops, rng)
            w.post_recvs()
            w.post_sends()
            run_to_idle(pair, stop=w.done, max_events=20_000_000)
            outcome = w.check()
            res.batches += 1
            res.ops += len(ops)
            res.bytes_checked += sum(o.size for o in ops)
            pair.a.memory.dereg_mr(w.ma)
            pair.b.memory.dereg_mr(w.mb)
            if outcome != "ok":
                res.retry_exc += 1
                account(pair)
                pair = new_pair()
            if progress is not None:
                progress(done_pkts + pair.packets_sent(), res)
    except AssertionError as e:
        res.byte_exact = False
        res.failure = str(e)
        if stop_on_failure:
            raise
    finally:
        account(pair)
        res.packets = done_pkts
        res.virtual_time = done_time
        res.wall_time = time.perf_counter() - t0
    return res
