"""LMC 0 port selection on numpy arrays: ``lfts.build_lfts``'s choices, whole runs at a time.

The engines that only shape hop tables (minhop, updn) hand over, per switch
*s* and target switch *t*, the *candidate mask* -- the ports of *s* whose hop
count to *t* is the least one, healthy and linked -- as packed bits
(``masks[s, t]``, numpy ``packbits`` order), and whether *t* is reachable
from *s* at all (``reach[s, t]``).  The LFTs come out byte for byte as
``lfts.build_lfts`` makes them (opensm's ucast_mgr_build_lfts), because the
greedy choice has a closed form:

* picking, target after target, the candidate with the fewest paths (lowest
  port on a tie) and counting the path against it, picks the smallest keys
  (count + j, port) of all candidates in increasing order -- so a run of CA
  targets with one candidate set gets its ports level by level, then in
  port order round and round once the counts are even;
* switch targets count against no port, so a block of them is one argmin
  over the counts of the moment;
* an entry of ``existing`` that is still a candidate is kept whatever the
  counts say, so kept entries split the runs and count as they stand.

The runs are the targets in opensm's port order whose candidate masks are
the same (on a fat tree: every CA beyond the switch's own subtree is one
run), so a switch costs some dozens of numpy operations, not one Python
step per LID.
"""

from __future__ import annotations

import numpy as np

from ..subnet import NO_PATH, Node, Subnet
from .lfts import port_order


class Layout:
    """Switch indices (``subnet.switches()`` order), the port width and every switch's usable ports."""

    def __init__(self, subnet: Subnet):
        self.sws = subnet.switches()
        self.index = {sw: i for i, sw in enumerate(self.sws)}
        self.width = max((sw.num_ports for sw in self.sws), default=0) + 1
        self.nbytes = (self.width + 7) // 8
        # linked[s, p]: port p of switch s is healthy and has a remote end (a candidate if least-hop)
        self.linked = np.zeros((len(self.sws), self.width), dtype=bool)
        for i, sw in enumerate(self.sws):
            for n in range(1, sw.num_ports + 1):
                ph = sw.ports.get(n)
                if ph is not None and ph.remote is not None and ph.healthy():
                    self.linked[i, n] = True


def build_lfts(subnet: Subnet, lay: Layout, masks: np.ndarray, reach: np.ndarray,
               existing: dict[Node, bytes] | None = None) -> dict[Node, bytearray]:
    """``masks``: (switches, switches, nbytes) packed candidate ports; ``reach``: (switches, switches)."""
    max_lid = subnet.max_lid()
    width = lay.width
    # the targets in port order, cut into blocks of CA targets (that count) and switch targets
    blocks: list[list] = []
    for p in port_order(subnet):
        if not p.lid:
            continue
        if p.node.is_switch:
            kind, t, port = False, lay.index[p.node], 0
        else:
            r = p.remote
            if r is None or not r.node.is_switch:
                continue
            kind, t, port = True, lay.index[r.node], r.num
        if not blocks or blocks[-1][0] is not kind:
            blocks.append([kind, [], [], []])
        blocks[-1][1].append(p.lid)
        blocks[-1][2].append(t)
        blocks[-1][3].append(port)
    blocks = [(kind, np.array(lids, dtype=np.int64), np.array(ts, dtype=np.int64),
               np.array(ports, dtype=np.uint8)) for kind, lids, ts, ports in blocks]
    ports_w = np.arange(width, dtype=np.int64)
    lfts = {}
    for s, sw in enumerate(lay.sws):
        lft = np.full(max_lid + 1, NO_PATH, dtype=np.uint8)
        counts = np.zeros(width, dtype=np.int64)
        old = existing.get(sw) if existing else None
        old_arr = None
        if old is not None:
            old_arr = np.full(max_lid + 1, NO_PATH, dtype=np.uint8)
            n = min(len(old), max_lid + 1)
            old_arr[:n] = np.frombuffer(bytes(old[:n]), dtype=np.uint8)
        ms, rs = masks[s], reach[s]
        for is_ca, lids, ts, tports in blocks:
            local = ts == s
            if local.any():
                lft[lids[local]] = tports[local]
                if is_ca:
                    np.add.at(counts, tports[local].astype(np.int64), 1)
            rem = np.flatnonzero(~local & rs[ts])
            if not len(rem):
                continue
            rlids, rts = lids[rem], ts[rem]
            rows = ms[rts]                                   # (k, nbytes) packed candidates
            keep = None
            if old_arr is not None:
                e = old_arr[rlids].astype(np.int64)
                ok = (e >= 1) & (e < width)
                ec = np.where(ok, e, 0)
                bit = (rows[np.arange(len(rem)), ec >> 3] >> (7 - (ec & 7))) & 1
                keep = ok & (bit == 1)          # masks hold linked ports only
            if not is_ca:
                bits = np.unpackbits(rows, axis=1, count=width).astype(bool)
                key = np.where(bits, counts[None, :] * 256 + ports_w[None, :], np.iinfo(np.int64).max)
                best = key.min(axis=1)
                has = best != np.iinfo(np.int64).max
                port = (best & 255).astype(np.uint8)
                if keep is not None:
                    lft[rlids[keep]] = old_arr[rlids[keep]]
                    has &= ~keep
                lft[rlids[has]] = port[has]
                continue
            _ca_runs(lft, counts, rlids, rows, keep, old_arr, width)
        lfts[sw] = bytearray(lft.tobytes())
    return lfts


def _ca_runs(lft, counts, rlids, rows, keep, old_arr, width) -> None:
    """The CA targets of one block, run by run (one candidate mask and keep-state per run)."""
    k = len(rlids)
    if k > 1:
        cut = np.any(rows[1:] != rows[:-1], axis=1)
        if keep is not None:
            cut |= keep[1:] != keep[:-1]
        starts = np.concatenate(([0], np.flatnonzero(cut) + 1, [k]))
    else:
        starts = np.array([0, k])
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()):
        lids = rlids[a:b]
        if keep is not None and keep[a]:
            e = old_arr[lids]
            lft[lids] = e
            np.add.at(counts, e.astype(np.int64), 1)
            continue
        cand = np.flatnonzero(np.unpackbits(rows[a], count=width))
        if not len(cand):
            continue                    # reachable, but no healthy linked least-hop exit
        n = b - a
        if len(cand) == 1:
            lft[lids] = cand[0]
            counts[cand[0]] += n
            continue
        c = counts[cand]
        v, vmax = int(c.min()), int(c.max())
        parts = []
        need = n
        while need and v < vmax:
            part = cand[c <= v][:need]
            parts.append(part)
            need -= len(part)
            v += 1
        if need:
            parts.append(np.resize(cand, need))
        seq = np.concatenate(parts) if len(parts) > 1 else parts[0]
        lft[lids] = seq
        counts += np.bincount(seq, minlength=width)
