"""ftree: fat-tree routing (osm_ucast_ftree.c), with opensm's indexing and load counters.

The fabric is ranked (BFS from the root GUIDs when given, else from the
leaves up), every switch's links are grouped by remote node into DOWN, UP
and SIBLING port groups, and switches get *tuples* by a BFS from the first
leaf in GUID order (the groups of non-leaf switches are sorted by the remote
tuple).  Then, leaf by leaf in tuple order and CA by CA in port order:

* the leaf routes the CA's LID out of its port, and "goes up": the least
  loaded UP group (fewest down-going routes, then the less loaded remote,
  then the bigger remote port GUID; a bubble sort as opensm's, whose
  tie-breaks matter) and in it the least loaded port carries the main path;
  the other UP groups get secondary paths (first least loaded port, no
  counting);
* every switch reached "goes down" through all its DOWN groups but the one
  it came from, to set the up-going routes of the switches below (least
  loaded port by up-going count).

Leaves with fewer CAs than the fullest leaf route dummy CAs (counters only).
Switch LIDs are routed last as secondary paths.  Reverse hops, I/O nodes
and compute-node files are not implemented (opensm's defaults: none).
Not a fat tree (no CA, CAs on different ranks, ...), or an LMC > 0, →
``RoutingError`` and opensm's minhop fallback.
"""

from __future__ import annotations

import sys
from operator import attrgetter, itemgetter
from collections import deque

import numpy as np

from . import RoutingError
from ..subnet import NO_PATH, Node, Subnet, net_key

TUPLE_LEN = 8
DOWN, SAME, UP = -1, 0, 1


class _Port:
    __slots__ = ("num", "remote_num", "counter_up", "counter_down")

    def __init__(self, num, remote_num):
        self.num, self.remote_num = num, remote_num
        self.counter_up = self.counter_down = 0


class _Group:
    __slots__ = ("base_lid", "remote_base_lid", "remote_key", "owner", "remote", "remote_is_sw",
                 "ports", "counter_up", "counter_down")

    def __init__(self, base_lid, remote_base_lid, remote_port_guid, owner, remote, remote_is_sw):
        self.base_lid, self.remote_base_lid = base_lid, remote_base_lid
        # the last tie-break of the down-load comparison: opensm 3.3.23 compares the remote
        # port GUIDs as numbers (not their network-order bytes: that differs once a switch's
        # up groups differ in more than the GUID's last byte -- 256 and more switches)
        self.remote_key = remote_port_guid
        self.owner, self.remote, self.remote_is_sw = owner, remote, remote_is_sw
        self.ports: list[_Port] = []
        self.counter_up = self.counter_down = 0

    def add_port(self, num, remote_num):
        if all(p.num != num for p in self.ports):
            self.ports.append(_Port(num, remote_num))


class _Sw:
    def __init__(self, node: Node, max_lid: int):
        self.node = node
        self.rank = 0xFFFFFFFF
        self.tuple = (0xFF,) * TUPLE_LEN
        self.base_lid = node.base_lid()
        self.groups = {DOWN: [], SAME: [], UP: []}
        self.is_leaf = False
        self.i = 0                      # index in the LID's columns
        self.min_counter_down = 0
        # the UP groups' sort keys changed since they were last sorted (a bubble sort of a list
        # it has just sorted, on the same keys, changes nothing: it is skipped)
        self.ups_dirty = True
        self.below: list[_Sw] = []      # the switches whose UP groups lead here
        self.counter_up_changed = False
        self.sw_down = False            # a DOWN group leads to a switch (set once built)
        self.has_ca = False             # a DOWN group leads to a CA
        self.plain_leaf = False         # CAs only below, no siblings: going down ends here, routed
        self.quick = False              # switches below, no siblings: ``look`` tells if there is work
        self.look = None                # hop counts of the switches below and beside, from a column

    def add_port(self, num, rnum, rlid, rguid, remote, remote_is_sw, direction):
        groups = self.groups[direction]
        for g in groups:
            if g.remote_base_lid == rlid:
                break
        else:
            g = _Group(self.base_lid, rlid, rguid, self, remote, remote_is_sw)
            groups.append(g)
        g.add_port(num, rnum)


class _Hca:
    def __init__(self, node: Node):
        self.node = node
        self.up: list[_Group] = []
        self.cn_num = 0


class FatTree:
    def __init__(self, subnet: Subnet, roots: set[int]):
        self.subnet = subnet
        self.roots = roots
        self.max_lid = subnet.max_lid()
        self.sws = {n: _Sw(n, self.max_lid) for n in subnet.switches()}
        for i, sw in enumerate(self.sws.values()):
            sw.i = i
        # the LID being routed: every switch's hop count and exit to it (opensm keeps them per
        # switch, but one LID is routed at a time and only its entries are read)
        self.col_h = bytearray([NO_PATH]) * len(self.sws)
        self.col_l = bytearray([NO_PATH]) * len(self.sws)
        self.hcas = {n: _Hca(n) for n in sorted((n for n in subnet.nodes.values() if n.type == 1),
                                                key=lambda n: net_key(n.guid))}
        self.by_tuple: dict[tuple, _Sw] = {}
        self.leaf_rank = 0
        self.leaves: list[_Sw] = []
        self.max_cn_per_leaf = 0

    # -- construction (construct_fabric) --------------------------------------------------
    def build(self) -> None:
        if self.subnet.lmc > 0:
            # construct_fabric: "LMC > 0 is not supported by fat-tree routing"
            raise RoutingError("LMC > 0 is not supported by fat-tree routing")
        if len(self.sws) < 2 or len(self.hcas) < 2:
            raise RoutingError("not a fat tree: fewer than 2 switches or 2 CAs")
        self._rank()
        self._ports()
        if not any(h.cn_num for h in self.hcas.values()):
            raise RoutingError("no compute nodes")
        self._leaf_rank()
        if not 2 <= self.leaf_rank + 1 <= 8:
            raise RoutingError(f"fabric rank {self.leaf_rank + 1} (should be 2..8)")
        for h in self.hcas.values():
            for g in h.up:
                sw = g.remote
                if not sw.is_leaf:
                    sw.is_leaf = True
                    if sw.rank != self.leaf_rank:
                        raise RoutingError("CAs hang off switches of different ranks")
        self._index()
        at_leaf = sorted((s for s in self.sws.values() if s.rank == self.leaf_rank),
                         key=lambda s: s.tuple)
        idx = [i for i, s in enumerate(at_leaf) if s.is_leaf]
        if len(idx) < 2:
            raise RoutingError("fewer than two leaf switches")
        self.leaves = at_leaf[idx[0]:idx[-1] + 1]
        for sw in self.leaves:
            n = sum(g.remote.cn_num for g in sw.groups[DOWN] if not g.remote_is_sw)
            self.max_cn_per_leaf = max(self.max_cn_per_leaf, n)
        if not self.roots:
            self._validate()

    def _sw_links(self, node: Node):
        for n in range(1, node.num_ports + 1):
            ph = node.ports.get(n)
            if ph is not None and ph.remote is not None and ph.healthy():
                yield n, ph, ph.remote

    def _rank(self) -> None:
        q = deque()
        if self.roots:
            for guid in self.roots:
                node = self.subnet.nodes.get(guid)
                if node is not None and node in self.sws:
                    self.sws[node].rank = 0
                    q.append(self.sws[node])
            if not q:
                raise RoutingError("no valid roots supplied")
        else:
            for h in self.hcas.values():
                for n, ph in sorted(h.node.ports.items()):
                    r = ph.remote
                    if r is None:
                        continue
                    if r.node.type == 1:
                        raise RoutingError("CA connected directly to another CA")
                    if r.node.is_switch:
                        sw = self.sws[r.node]
                        if sw.rank == 0xFFFFFFFF or sw.rank > 0:
                            sw.rank = 0
                            q.append(sw)
        max_rank = 0
        while q:
            sw = q.popleft()
            for _, _, r in self._sw_links(sw.node):
                if r.node.is_switch:
                    rs = self.sws[r.node]
                    if rs.rank == 0xFFFFFFFF or rs.rank > sw.rank + 1:
                        rs.rank = sw.rank + 1
                        max_rank = rs.rank
                        q.append(rs)
        self.max_rank = max_rank
        if not self.roots:
            for sw in self.sws.values():
                sw.rank = max_rank - sw.rank

    def _ports(self) -> None:
        for h in self.hcas.values():
            for n, ph in sorted(h.node.ports.items()):
                r = ph.remote
                if r is None or not ph.healthy() or not r.node.is_switch:
                    continue
                h.cn_num += 1           # no cn_guid_file: every CA port is a compute node
                rsw = self.sws[r.node]
                for g in h.up:
                    if g.remote_base_lid == rsw.base_lid:
                        break
                else:
                    g = _Group(ph.lid, rsw.base_lid, r.guid, h, rsw, True)
                    h.up.append(g)
                g.add_port(n, r.num)
        for sw in self.sws.values():
            for n, ph, r in self._sw_links(sw.node):
                if r.node is sw.node:
                    continue
                if r.node.is_switch:
                    rs = self.sws[r.node]
                    d = UP if sw.rank > rs.rank else SAME if sw.rank == rs.rank else DOWN
                    sw.add_port(n, r.num, rs.base_lid, r.guid, rs, True, d)
                elif r.node.type == 1:
                    sw.add_port(n, r.num, r.lid, r.guid, self.hcas[r.node], False, DOWN)
            sw.sw_down = any(g.remote_is_sw for g in sw.groups[DOWN])
            sw.has_ca = any(not g.remote_is_sw for g in sw.groups[DOWN])
            sw.plain_leaf = bool(sw.groups[DOWN]) and not sw.sw_down and not sw.groups[SAME]
            sw.quick = sw.sw_down and not sw.groups[SAME]
        for sw in self.sws.values():
            for g in sw.groups[UP]:
                if sw not in g.remote.below:
                    g.remote.below.append(sw)
            near = [g.remote.i for g in sw.groups[DOWN] + sw.groups[SAME] if g.remote_is_sw]
            if len(near) > 1:
                sw.look = itemgetter(*near)
            elif near:
                sw.look = lambda col, i=near[0]: (col[i],)

    def _leaf_rank(self) -> None:
        if not self.roots:
            self.leaf_rank = self.max_rank
            return
        for h in self.hcas.values():
            if h.cn_num:
                self.leaf_rank = h.up[0].remote.rank
                return

    def _new_tuple(self, frm: tuple, direction: int) -> tuple:
        t = list(frm)
        if direction == DOWN:
            t[0] += 1
            var = frm[0] + 1
        else:
            t[0] -= 1
            var = frm[0]
        for i in range(0xFF):
            t[var] = i
            if tuple(t) not in self.by_tuple:
                return tuple(t)
        return (0xFF,) * TUPLE_LEN

    def _assign(self, sw: _Sw, t: tuple) -> None:
        sw.tuple = t
        self.by_tuple[t] = sw

    def _index(self) -> None:
        start = next(s for s in self.sws.values() if s.is_leaf)
        first = [0xFF] * TUPLE_LEN
        first[0] = start.rank
        for i in range(1, start.rank + 1):
            first[i] = 0
        self._assign(start, tuple(first))
        q = deque([start])
        while q:
            sw = q.popleft()
            if sw.rank < self.leaf_rank:
                for g in sw.groups[DOWN]:
                    if not g.remote_is_sw or g.remote.tuple[0] != 0xFF:
                        continue
                    self._assign(g.remote, self._new_tuple(sw.tuple, DOWN))
                    q.append(g.remote)
                sw.groups[DOWN].sort(key=lambda g: g.remote.tuple if g.remote_is_sw else (0xFF,) * 8)
            if sw.rank != 0:
                for g in sw.groups[UP]:
                    if g.remote.tuple[0] != 0xFF:
                        continue
                    self._assign(g.remote, self._new_tuple(sw.tuple, UP))
                    q.append(g.remote)
                sw.groups[UP].sort(key=lambda g: g.remote.tuple)

    def _validate(self) -> None:
        ref: dict[int, _Sw] = {}
        top = self.leaf_rank
        for sw in self.sws.values():
            r = ref.setdefault(sw.rank, sw)
            if r is sw:
                continue
            if len(r.groups[UP]) != len(sw.groups[UP]) or \
                    (sw.rank != top and len(r.groups[DOWN]) != len(sw.groups[DOWN])):
                raise RoutingError("not a fat tree: switches of one rank differ")

    # -- routing (do_routing) --------------------------------------------------------------
    def _up_by_down(self, sw: _Sw, prev: _Sw | None, real: bool, main: bool,
                    is_sw: bool, hops: int) -> bool:
        """fabric_route_upgoing_by_going_down for the LID whose column is ``col_h``/``col_l``."""
        down = sw.groups[DOWN]
        if not down:
            return False
        sibs = sw.groups[SAME]
        if not sibs and not sw.sw_down:
            return True                 # a leaf: only CA groups below, nothing to route or reorder
        if sw.counter_up_changed:
            _sort_up(sw)
        if sibs:
            sibs.sort(key=_COUNTER_UP)
        col_h = self.col_h
        h1 = hops + 1
        if real and max(sw.look(col_h)) <= h1:
            # every switch below and beside already has as short a route: the loop below would
            # skip them all (the one we came from too: it is closer still)
            return sw.has_ca
        created = False
        groups = down + sibs if real and sibs else down
        prev_lid = prev.base_lid if prev is not None else -1
        for g in groups:
            if not g.remote_is_sw:
                created = True
                continue
            if g.remote_base_lid == prev_lid:
                continue
            rsw = g.remote
            least = col_h[rsw.i]
            if least != NO_PATH and h1 >= least:
                continue                 # (before the port choice: most groups end here)
            pmin = None
            for p in g.ports:
                if pmin is None or p.counter_up < pmin.counter_up:
                    pmin = p
            if real:
                self.col_l[rsw.i] = pmin.remote_num
                col_h[rsw.i] = h1
            # _up_by_down's first answers, without the call: a leaf; a switch with nothing to do
            if rsw.plain_leaf:
                routed = True
            elif real and rsw.quick and max(rsw.look(col_h)) <= h1 + 1:
                if rsw.counter_up_changed:
                    _sort_up(rsw)
                routed = rsw.has_ca
            else:
                routed = self._up_by_down(rsw, None, real, main, is_sw, h1)
            if routed:
                created = True
                pmin.counter_up += 1
                g.counter_up += 1
                sw.counter_up_changed = True
        return created

    def _down_by_up(self, sw: _Sw, prev: _Sw | None, real: bool, main: bool,
                    is_sw: bool, hops: int) -> bool:
        """fabric_route_downgoing_by_going_up for the LID whose column is ``col_h``/``col_l``."""
        col_h, col_l = self.col_h, self.col_l
        h1 = hops + 1
        if real and sw.quick and max(sw.look(col_h)) <= h1:      # _up_by_down, nothing to do
            if sw.counter_up_changed:
                _sort_up(sw)
            created = sw.has_ca
        else:
            created = self._up_by_down(sw, prev, real, main, is_sw, hops)
        if sw.rank == 0:
            return created              # no reverse hops (max_reverse_hops 0)
        ups = sw.groups[UP]
        if sw.ups_dirty:
            sw.ups_dirty = not _bubble_down(ups)
        gmin = ups[0]
        pmin = None
        for p in gmin.ports:
            if pmin is None or p.counter_down < pmin.counter_down:
                pmin = p
        rsw = gmin.remote
        if main:
            gmin.counter_down += 1
            pmin.counter_down += 1
            sw.ups_dirty = True
            if gmin.counter_down == rsw.min_counter_down + 1:
                rsw.min_counter_down = min((g.counter_down for g in rsw.groups[DOWN]), default=1 << 30)
                for x in rsw.below:
                    x.ups_dirty = True
            if real and (col_l[rsw.i] == NO_PATH or h1 < col_h[rsw.i]):
                col_l[rsw.i] = pmin.remote_num
                col_h[rsw.i] = h1
                created |= self._down_by_up(rsw, sw, real, main, is_sw, h1)
        if not real:
            return created
        for g in ups[1 if main else 0:]:
            rsw = g.remote
            if col_l[rsw.i] != NO_PATH and h1 >= col_h[rsw.i]:
                continue
            p = None
            for q in g.ports:
                if p is None or q.counter_down < p.counter_down:
                    p = q
            col_l[rsw.i] = p.remote_num
            col_h[rsw.i] = h1
            if rsw.rank == 0 and rsw.quick and max(rsw.look(col_h)) <= h1 + 1:
                # _down_by_up of a root with nothing to do below, without the calls
                if rsw.counter_up_changed:
                    _sort_up(rsw)
                created |= rsw.has_ca
            else:
                created |= self._down_by_up(rsw, sw, True, False, is_sw, h1)
        sibs = sw.groups[SAME]
        if sibs:
            _bubble_down(sibs)
        for g in sibs:
            rsw = g.remote
            if col_l[rsw.i] != NO_PATH and h1 >= col_h[rsw.i]:
                continue
            p = None
            for q in g.ports:
                if p is None or q.counter_down < p.counter_down:
                    p = q
            col_l[rsw.i] = p.remote_num
            col_h[rsw.i] = h1
            routed = self._down_by_up(rsw, sw, True, False, is_sw, h1)
            created |= routed
            if routed:
                gmin.counter_down += 1
                pmin.counter_down += 1
                sw.ups_dirty = True
        return created

    def _new_lid(self, lft: np.ndarray, lid: int) -> None:
        """Store the finished LID's exits (``lid``: 0 for none) and start a fresh column."""
        if lid:
            lft[:, lid] = np.frombuffer(self.col_l, dtype=np.uint8)
        n = len(self.sws)
        self.col_h = bytearray([NO_PATH]) * n
        self.col_l = bytearray([NO_PATH]) * n

    def route(self) -> dict[Node, bytearray]:
        lft = np.full((len(self.sws), self.max_lid + 1), NO_PATH, dtype=np.uint8)
        for sw in self.leaves:
            routed = 0
            for g in sw.groups[DOWN]:
                if g.remote_is_sw or not g.remote.cn_num:
                    continue
                lid = g.remote_base_lid
                self.col_l[sw.i] = g.ports[0].num
                self.col_h[sw.i] = 1
                self._down_by_up(sw, None, True, True, False, 1)
                self._new_lid(lft, lid)
                routed += 1
            for _ in range(self.max_cn_per_leaf - routed):
                # a dummy CA (LID 0): counters only, nothing written, every hop count unset
                self._down_by_up(sw, None, False, True, False, 1)
        for sw in self.sws.values():
            self.col_l[sw.i] = 0
            self.col_h[sw.i] = 0
            self._down_by_up(sw, None, True, False, True, 0)
            self._new_lid(lft, sw.base_lid)
        # fabric_route_roots only fills hop tables unless connect_roots is set: no LFT change
        return {sw.node: bytearray(lft[sw.i].tobytes()) for sw in self.sws.values()}


_COUNTER_UP = attrgetter("counter_up")


def _sort_up(sw: _Sw) -> None:
    """opensm's bubble_sort_up of the down groups by up-going load: a stable sort gives the same
    order as its strict-'<' bubble sort."""
    sw.groups[DOWN].sort(key=_COUNTER_UP)
    sw.counter_up_changed = False


def _bubble_down(a: list) -> bool:
    """opensm's bubble sort of port groups by port_group_compare_load_down:
    swap neighbours while a[j] is 'less' than a[j-1] -- fewer down routes,
    or as many and a remote switch no more loaded (min_counter_down) with a
    remote key no larger.  That is not a total order, so the bubble sort
    itself is kept; the keys are read once per sort and compared inline
    (the counters stay far below 2^31, where the C code's uint32
    subtraction never wraps).

    True if the result is a fixed point -- no neighbours left to swap over the
    whole list, so that sorting it again on the same keys changes nothing
    (the sort's last pass need not have looked at the tail)."""
    n = len(a)
    if n < 2:
        return True
    ks = [(g.counter_down, g.remote.min_counter_down, g.remote_key) for g in a]
    i = 0
    swapped = True
    while swapped:
        swapped = False
        for j in range(1, n - i):
            c1, m1, r1 = ks[j]
            c0, m0, r0 = ks[j - 1]
            if c1 < c0 or (c1 == c0 and m1 <= m0 and r1 <= r0):
                a[j - 1], a[j] = a[j], a[j - 1]
                ks[j - 1], ks[j] = ks[j], ks[j - 1]
                swapped = True
        i += 1
    for j in range(max(1, n - i), n):
        c1, m1, r1 = ks[j]
        c0, m0, r0 = ks[j - 1]
        if c1 < c0 or (c1 == c0 and m1 <= m0 and r1 <= r0):
            return False
    return True


def route(subnet: Subnet, roots=None, existing=None) -> dict[Node, bytearray]:
    ft = FatTree(subnet, set(roots or ()))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10000))
    try:
        ft.build()
        return ft.route()
    finally:
        sys.setrecursionlimit(old)
