"""The partition phases of a heavy sweep: read the P_Key tables, make the partitions, program them.

``PkeySetup`` lives as long as the SM (opensm keeps its partitions and
every port's P_Key table state across sweeps).  ``phases(sweep)`` gives
``sweep.HeavySweep`` two phases to run after the LIDs: first a P_Key table
Get of every block of every port whose table it does not know yet (end
ports, and switch ports facing a CA, as pkey_mgr programs them; the
switch-to-switch ports opensm also reads come after SUBNET UP, ``deferred``), then
``prtn_config.make_partitions`` and ``pkey_mgr.process``, whose P_KeyTable
and PortInfo Sets go out through the sweep's MAD agent; each answer is
the port's table (or PortInfo) as it is now.
"""

from __future__ import annotations

from ..wire.mad import Method
from ..wire.smp import PKEYS_PER_BLOCK, PORT_INFO, SmpAttr, build_dr_smp, decode_pkey_table, encode_pkey_table, smp_data
from .discovery import dr_status
from .pkey_mgr import ENFORCE_BOTH, Tables, max_blocks, needs_table, process
from .prtn_config import Partitions, PrtnOptions, make_partitions
from .subnet import Physp


def pkey_attr_mod(p: Physp, block: int) -> int:
    """A P_KeyTable's attribute modifier: the block, and on a switch's external port the port."""
    return block | (p.num << 16 if p.node.is_switch and p.num else 0)


class PkeySetup:
    def __init__(self, opts: PrtnOptions | None = None, enforce: str = ENFORCE_BOTH) -> None:
        self.opts = opts or PrtnOptions()
        self.enforce = enforce
        self.prtns = Partitions()
        self.tables = Tables()
        self.indx0: dict = {}

    def phases(self, sweep) -> list:
        return [lambda: self._read(sweep), lambda: self._program(sweep)]

    def _ports(self, sub, between_switches: bool = False):
        """The ports whose tables the manager needs (or, ``between_switches``, the rest opensm
        reads: switch ports linked to switches, which only the SA's PKeyTableRecords show)."""
        for node in sub.nodes.values():
            for p in node.ports.values():
                if needs_table(p) and between_switches == (node.is_switch and p.num > 0
                                                            and p.remote.node.is_switch):
                    yield p

    def deferred(self, sub):
        """``light.Queries`` items (a generator): the P_KeyTable blocks of the switch-to-switch
        ports not read yet -- read after SUBNET UP (the P_Key manager never needs them)."""
        return (((p.node.guid, p.num, b), build_dr_smp(Method.GET, SmpAttr.PKEY_TABLE, p.node.dr_path,
                                                       pkey_attr_mod(p, b)))
                for p in self._ports(sub, True) if (p.node.guid, p.num) not in self.tables
                for b in range(max_blocks(p)))

    def store_deferred(self, key, data) -> None:
        """One answer of ``deferred`` (``light.Queries``' on_answer), stored as it comes: a
        table's keys are made again from all its blocks at each, so the order is the
        blocks' own (100,000s at 10,000s of nodes: not kept until the end)."""
        if data is not None:
            guid, num, b = key
            t = self.tables.get((guid, num))
            if t is None:
                from .pkey_mgr import PkeyTbl
                t = self.tables[(guid, num)] = PkeyTbl()
            t.set_block(b, decode_pkey_table(data), self.opts.allow_both_pkeys)

    def _read(self, sweep) -> None:
        sweep.phase = "pkey tables"
        sub = sweep.subnet
        ports = list(self._ports(sub))
        live = {(p.node.guid, p.num) for p in ports} | {(p.node.guid, p.num) for p in self._ports(sub, True)}
        for k in [k for k in self.tables if k not in live]:
            del self.tables[k]              # a port that went: its table is read again when it is back
        for p in ports:
            if (p.node.guid, p.num) in self.tables:
                continue
            t = self.tables.of(p)
            for b in range(max_blocks(p)):
                def cb(r, t=t, b=b, p=p):
                    if r is None or dr_status(r):
                        sweep.log.verbose(f"P_KeyTable block {b} of 0x{p.node.guid:016x} port {p.num}: no answer")
                        return
                    t.set_block(b, decode_pkey_table(smp_data(r)), self.opts.allow_both_pkeys)
                sweep.q.post_send(build_dr_smp(Method.GET, SmpAttr.PKEY_TABLE, p.node.dr_path,
                                               pkey_attr_mod(p, b)), cb)

    def _program(self, sweep) -> None:
        sweep.phase = "partitions"
        sub = sweep.subnet
        self.indx0.clear()
        make_partitions(sub, self.prtns, self.opts, sweep.log, self.indx0)
        sub.partitions = self.prtns
        sub.pkey_tables = self.tables
        sub.allow_both_pkeys = self.opts.allow_both_pkeys
        for op in process(sub, self.prtns, self.tables, sweep.log, self.opts.allow_both_pkeys,
                          self.enforce, dict(self.indx0), self.opts.keep_pkey_indexes):
            if op[0] == "pkey":
                _, p, b, entries = op
                t = self.tables.of(p)

                def cb(r, t=t, b=b, p=p):
                    if r is None or dr_status(r):
                        sweep.failed += 1
                        sweep.log.error(f"pkey_mgr_update_pkey_entry: ERR 0506: failed to update pkey table "
                                        f"block {b} for node 0x{p.node.guid:016x} port {p.num} ({p.node.desc})")
                        return
                    t.set_block(b, decode_pkey_table(smp_data(r)), self.opts.allow_both_pkeys)
                sweep.q.post_send(build_dr_smp(Method.SET, SmpAttr.PKEY_TABLE, p.node.dr_path, pkey_attr_mod(p, b),
                                               encode_pkey_table(entries)), cb)
            else:
                _, p, data = op

                def cb(r, p=p):
                    if r is None or dr_status(r):
                        sweep.failed += 1
                        sweep.log.error(f"pkey_mgr_enforce_partition: ERR 0511: Failed to set PortInfo for node "
                                        f"0x{p.node.guid:016x} port {p.num} ({p.node.desc})")
                        return
                    p.port_info = bytes(smp_data(r)[:PORT_INFO.size])
                sweep.q.post_send(build_dr_smp(Method.SET, SmpAttr.PORT_INFO, p.node.dr_path, p.num, data), cb)


__all__ = ["PkeySetup", "PKEYS_PER_BLOCK", "pkey_attr_mod"]
