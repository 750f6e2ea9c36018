"""Partitions (opensm's osm_prtn.c and osm_prtn_config.c): partitions.conf, read against the subnet.

``make_partitions(subnet, state, opts, log)`` does what opensm's
osm_prtn_make_partitions does on every heavy sweep: the member tables of the
partitions kept from the last sweep are emptied, the default partition
(0x7fff "Default") gets every end port -- full members without a
configuration file, limited members with one, the SM's port always full --
then the file is parsed, and partitions left without members go.  A file
that does not parse is logged as opensm logs it, and the whole thing runs
again as if there were no file.

The file's syntax is opensm's::

    # comment
    Name=PKey[, ipoib][, mtu=N][, rate=N][, sl=N][, scope=N][, Q_Key=N]
         [, TClass=N][, FlowLabel=N][, defmember=full|limited|both][, indx0] :
         member[=full|limited|both], ... [, mgid=MGID[, flag=val ...]] ;

Members are port GUIDs, ``ALL``, ``ALL_CAS``, ``ALL_SWITCHES``,
``ALL_ROUTERS``, ``SELF`` (the SM's port) or ``NONE``; a definition runs
over lines until its ``;``.  As opensm's, keywords and flags match by
prefix (``m`` is ``mtu``, ``A`` is ``ALL``), numbers are C's ``strtoul``
with base 0, and odd values are warned about (verbose) and skipped.

Orders matter for the P_Key tables: opensm's partitions sit in a map keyed
by the P_Key in network byte order, their member tables in maps keyed by
the port GUID in network byte order -- ``PKEY_ORDER`` and ``subnet.net_key``.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field

from .subnet import NODE_CA, NODE_ROUTER, NODE_SWITCH, Physp, Subnet, net_key

DEFAULT_PARTITION_CONFIG_FILE = "/etc/opensm/partitions.conf"
DEFAULT_PKEY = 0xFFFF
DEFAULT_PARTIAL_PKEY = 0x7FFF
PKEY_FULL = 0x8000
DEFAULT_SL = 0                 # OSM_DEFAULT_SL
DEFAULT_MGRP_MTU = 4           # OSM_DEFAULT_MGRP_MTU: 2048
DEFAULT_MGRP_RATE = 3          # OSM_DEFAULT_MGRP_RATE: 10 Gb/s
DEFAULT_MGRP_SCOPE = 2         # link-local
IPOIB_BCAST_QKEY = 0x0B1B      # OSM_IPOIB_BROADCAST_MGRP_QKEY
IPOIB_BCAST_MGID = bytes.fromhex("ff12401bffff000000000000ffffffff")
LIMITED, FULL, BOTH = 0, 1, 2


def pkey_order(pkey: int) -> int:
    """opensm's prtn_pkey_tbl key: the P_Key's network-order bytes read as a host integer."""
    return ((pkey & 0xFF) << 8) | (pkey >> 8)


def strtoul(text: str) -> tuple[int, str]:
    """C's strtoul(text, &end, 0): the value of the leading number and what follows it."""
    s = text.lstrip(" \t\n\v\f\r")
    neg = False
    if s[:1] in "+-" and s:
        neg, s = s[0] == "-", s[1:]
    base = 10
    if s[:2].lower() == "0x" and len(s) > 2 and s[2] in "0123456789abcdefABCDEF":
        base, s = 16, s[2:]
    elif s[:1] == "0":
        base = 8
    digits = "0123456789abcdef"[:base]
    n = 0
    while n < len(s) and s[n].lower() in digits:
        n += 1
    if n == 0:
        return 0, text
    v = int(s[:n], base)
    return ((-v) & 0xFFFFFFFFFFFFFFFF) if neg else v, s[n:]


def _prefix(word: str, keyword: str) -> bool:
    """strncmp(word, keyword, strlen(word)) == 0: ``word`` is a prefix of ``keyword``."""
    return keyword.startswith(word)


@dataclass
class GroupFlags:
    """A group's flags (struct group_flags): MTU and rate codes, SL, the scopes asked for
    (a bit per scope), and Q_Key, TClass and FlowLabel (0: not given)."""
    mtu: int = DEFAULT_MGRP_MTU
    rate: int = DEFAULT_MGRP_RATE
    sl: int = DEFAULT_SL
    scope_mask: int = 0
    qkey: int = field(default=0)
    tclass: int = field(default=0)
    flow_label: int = field(default=0)


@dataclass
class McGroup:
    """A multicast group a partition creates (osm_prtn_add_mcgroup's arguments)."""
    mgid: bytes
    pkey: int                  # the partition's P_Key with the full bit
    mtu: int
    rate: int
    sl: int
    scope: int
    qkey: int
    tclass: int
    flow_label: int


@dataclass(eq=False)
class Partition:
    """osm_prtn_t: a P_Key (without the full bit), its name, SL and members."""
    name: str
    pkey: int
    sl: int = DEFAULT_SL
    full: dict[int, Physp] = field(default_factory=dict)       # port GUID -> physp
    part: dict[int, Physp] = field(default_factory=dict)
    mgroups: list[McGroup] = field(default_factory=list)

    def members(self, full: bool) -> list[Physp]:
        tbl = self.full if full else self.part
        return [tbl[g] for g in sorted(tbl, key=net_key)]


@dataclass
class PrtnOptions:
    config_file: str | None = DEFAULT_PARTITION_CONFIG_FILE
    allow_both_pkeys: bool = False
    keep_pkey_indexes: bool = True
    qos: bool = False
    subnet_timeout: int = 0x12


class Partitions:
    """opensm's prtn_pkey_tbl, kept across sweeps (``make`` rebuilds the members)."""

    def __init__(self) -> None:
        self.by_pkey: dict[int, Partition] = {}
        self.mgroups: list[McGroup] = []       # every partition's groups, in the order they were made
        self._counter = 0

    def ordered(self) -> list[Partition]:
        return [self.by_pkey[k] for k in sorted(self.by_pkey, key=pkey_order)]

    def find_by_name(self, name: str) -> Partition | None:
        for p in self.ordered():
            if p.name == name[:1023]:
                return p
        return None

    def _generate_pkey(self) -> int:
        while self._counter < DEFAULT_PARTIAL_PKEY - 1:
            self._counter += 1
            if self._counter not in self.by_pkey:
                return self._counter
        return 0

    def make_new(self, name: str | None, pkey: int, log) -> Partition | None:
        """osm_prtn_make_new: the partition of this P_Key (or name), made if need be."""
        pkey &= 0x7FFF
        if not pkey:
            if name and (p := self.find_by_name(name)):
                return p
            pkey = self._generate_pkey()
            if not pkey:
                return None
        have = self.by_pkey.get(pkey)
        if have is not None:
            log.verbose(f"osm_prtn_make_new: Duplicated partition definition: '{name}' (0x{pkey:04x}) "
                        f"prev name '{have.name}'.  Will use it")
            return have
        p = Partition(name if name else f"{pkey:04x}", pkey)
        self.by_pkey[pkey] = p
        return p


class _Ctx:
    """What parsing needs besides the text: the subnet, the options, the log."""

    def __init__(self, subnet: Subnet, prtns: Partitions, opts: PrtnOptions, log) -> None:
        self.subnet, self.prtns, self.opts, self.log = subnet, prtns, opts, log


def add_port(ctx: _Ctx, p: Partition, guid: int, full: bool, indx0: bool) -> None:
    """osm_prtn_add_port (indx0 is kept in ``Partition`` users' pkey tables: see pkey_mgr)."""
    port = ctx.subnet.ports.get(guid)
    if port is None:
        ctx.log.verbose(f"osm_prtn_add_port: port 0x{guid:x} not found")
        return
    tbls = getattr(ctx, "indx0", None)
    if tbls is not None:
        if indx0:
            ctx.log.verbose(f"osm_prtn_add_port: Setting pkey 0x{p.pkey:04x} at indx0 for port 0x{guid:x}")
            tbls[port] = p.pkey | (PKEY_FULL if full else 0)
        elif tbls.get(port, 0) & 0x7FFF == p.pkey:
            tbls[port] = 0
    tbl = p.full if full else p.part
    if ctx.opts.allow_both_pkeys:
        if tbl.pop(guid, None) is not None:
            ctx.log.verbose(f"osm_prtn_add_port: port 0x{guid:x} already in partition '{p.name}' "
                            f"(0x{p.pkey:04x}) full {int(full)}. Will overwrite")
    elif p.part.pop(guid, None) is not None or p.full.pop(guid, None) is not None:
        ctx.log.verbose(f"osm_prtn_add_port: port 0x{guid:x} already in partition '{p.name}' "
                        f"(0x{p.pkey:04x}). Will overwrite")
    tbl[guid] = port


def add_all(ctx: _Ctx, p: Partition, type_: int, full: bool, indx0: bool) -> None:
    for port in ctx.subnet.end_ports():
        if not type_ or port.node.type == type_:
            add_port(ctx, p, port.guid, full, indx0)


def add_mcgroup(ctx: _Ctx, p: Partition, flags: GroupFlags, scope: int, mgid: bytes) -> None:
    """osm_prtn_add_mcgroup: the group, its scope written into the MGID."""
    scope = scope or DEFAULT_MGRP_SCOPE
    mgid = bytes([mgid[0], (mgid[1] & 0xF0) | scope]) + mgid[2:]
    if any(g.mgid == mgid for g in p.mgroups):
        return
    g = McGroup(mgid, p.pkey | PKEY_FULL, flags.mtu, flags.rate, flags.sl, scope, flags.qkey, flags.tclass,
                flags.flow_label)
    p.mgroups.append(g)
    ctx.prtns.mgroups.append(g)


def _create_mgrp(ctx: _Ctx, p: Partition, flags: GroupFlags, mgid: bytes) -> None:
    if not flags.scope_mask:
        add_mcgroup(ctx, p, flags, 0, mgid)
    else:
        for scope in range(16):
            if flags.scope_mask & (1 << scope):
                add_mcgroup(ctx, p, flags, scope, mgid)


class _PartConf:
    """struct part_conf: the partition being defined and its flags."""

    def __init__(self) -> None:
        self.prtn: Partition | None = None
        self.is_ipoib = False
        self.flags = GroupFlags()
        self.membership = LIMITED
        self.indx0 = False


class ParseError(Exception):
    pass


def _verify_val(ctx, lineno: int, flag: str, val: str) -> int:
    v, rest = strtoul(val)
    if rest:
        ctx.log.verbose(f"verify_val: PARSE WARN: line {lineno}: suspicious val=({val}) detected. flag=({flag})")
    return v & 0xFFFFFFFFFFFFFFFF


# parse_group_flag's flags, in the order it tries them (a flag is any prefix of its name):
# number flags (attribute, mask, what the warning says), the scope, and bounded ones (attribute, limit)
_NUMBER_FLAGS = {"mtu": ("mtu", 0xFFFFFFFF, "skipped"), "rate": ("rate", 0xFFFFFFFF, "skipped"),
                 "Q_Key": ("qkey", 0xFFFFFFFF, "using '0'"), "TClass": ("tclass", 0xFF, "using '0'")}
_BOUNDED_FLAGS = {"sl": ("sl", 15), "FlowLabel": ("flow_label", 0xFFFFF)}
_GROUP_FLAGS = ("mtu", "rate", "scope", "Q_Key", "TClass", "sl", "FlowLabel")


def _group_flag(ctx, lineno: int, flags: GroupFlags, flag: str, val: str | None) -> bool:
    """parse_group_flag: True if ``flag`` is a group flag (whatever its value)."""
    def warn(what, how="skipped"):
        ctx.log.verbose(f"parse_group_flag: PARSE WARN: line {lineno}: flag '{what}' requires valid value - {how}")
    for kw in _GROUP_FLAGS:
        if not _prefix(flag, kw):
            continue
        if kw in _NUMBER_FLAGS:
            attr, mask, how = _NUMBER_FLAGS[kw]
            if val is None:
                warn(kw, how)
                return True
            setattr(flags, attr, _verify_val(ctx, lineno, flag, val) & mask)
            if not getattr(flags, attr):
                warn(kw, how)
        elif kw == "scope":
            scope = _verify_val(ctx, lineno, flag, val) & 0xFFFFFFFF if val is not None else 0
            if not scope or scope > 0xF:
                warn("scope")
            else:
                flags.scope_mask |= 1 << scope
        else:
            attr, limit = _BOUNDED_FLAGS[kw]
            v, rest = strtoul(val) if val else (0, "")
            if not val or v > limit or (rest and not rest[0].isspace()):
                warn(kw)
            else:
                setattr(flags, attr, v)
        return True
    return False


def _partition_flag(ctx, lineno: int, conf: _PartConf, flag: str, val: str | None) -> None:
    if _group_flag(ctx, lineno, conf.flags, flag, val):
        return
    if _prefix(flag, "ipoib"):
        conf.is_ipoib = True
    elif _prefix(flag, "defmember"):
        if val is None or not (_prefix(val, "limited") or _prefix(val, "both") or _prefix(val, "full")):
            ctx.log.verbose(f"partition_add_flag: PARSE WARN: line {lineno}: flag 'defmember' requires valid "
                            "value (limited or full or both) - skipped")
        else:
            conf.membership = FULL if _prefix(val, "full") else BOTH if _prefix(val, "both") else LIMITED
    elif flag == "indx0":
        conf.indx0 = True
    else:
        ctx.log.verbose(f"partition_add_flag: PARSE WARN: line {lineno}: unrecognized partition flag "
                        f"'{flag}' - ignored")


def _name_token(tok: str) -> tuple[str, str | None]:
    """parse_name_token: ``name[=value]``, both stripped of blanks."""
    name, eq, val = tok.partition("=")
    return name.strip(" \t\n"), (val.strip(" \t\n") if eq else None)


def _create(ctx, lineno: int, conf: _PartConf, name: str | None, pkey_text: str | None) -> None:
    """partition_create."""
    if pkey_text is None and name and name[0].isdigit():
        pkey_text, name = name, None
    if pkey_text is not None:
        v, rest = strtoul(pkey_text)
        if rest == pkey_text or rest:
            raise ParseError
        pkey = v & 0xFFFF
    else:
        pkey = 0
    p = ctx.prtns.make_new(name, pkey, ctx.log)
    if p is None:
        raise ParseError
    conf.prtn = p
    if not ctx.opts.qos and conf.flags.sl != DEFAULT_SL:
        ctx.log.debug(f"partition_create: Overriding SL {conf.flags.sl} to default SL {DEFAULT_SL} on "
                      f"partition {name} as QoS is not enabled.")
        conf.flags.sl = DEFAULT_SL
    p.sl = conf.flags.sl
    if conf.is_ipoib:
        f = conf.flags
        bflags = GroupFlags(f.mtu, f.rate, f.sl, f.scope_mask, f.qkey or IPOIB_BCAST_QKEY, f.tclass,
                            f.flow_label)
        mgid = IPOIB_BCAST_MGID[:4] + (PKEY_FULL | p.pkey).to_bytes(2, "big") + IPOIB_BCAST_MGID[6:]
        _create_mgrp(ctx, p, bflags, mgid)


def _manage_membership_change(ctx, p: Partition, type_: int | None, membership: int, guid: int = 0) -> None:
    """With allow_both_pkeys, a port made full (limited) leaves the limited (full) table."""
    if not ctx.opts.allow_both_pkeys or membership == BOTH:
        return
    tbl = p.full if membership == LIMITED else p.part
    if type_ == 0:
        tbl.clear()
    elif type_ is None:
        tbl.pop(guid, None)
    else:
        for g in [g for g, ph in tbl.items() if ph.node.type == type_]:
            del tbl[g]


def _add_members(ctx, conf: _PartConf, membership: int, type_: int | None, guid: int = 0) -> None:
    p = conf.prtn
    _manage_membership_change(ctx, p, type_, membership, guid)
    for full in (True, False):
        if full and membership == LIMITED:
            continue
        if not full and not (membership == LIMITED or membership == BOTH and ctx.opts.allow_both_pkeys):
            continue
        if type_ is None:
            add_port(ctx, p, guid, full, conf.indx0)
        else:
            add_all(ctx, p, type_, full, conf.indx0)


def _add_port(ctx, lineno: int, conf: _PartConf, name: str, flag: str | None) -> None:
    """partition_add_port; ParseError for a bad GUID."""
    if not name or _prefix(name, "NONE"):
        return
    membership = conf.membership
    if flag is not None:
        membership = LIMITED
        if _prefix(flag, "full"):
            membership = FULL
        elif _prefix(flag, "both"):
            membership = BOTH
        elif not _prefix(flag, "limited"):
            ctx.log.verbose(f"partition_add_port: PARSE WARN: line {lineno}: unrecognized port flag "
                            f"'{flag}'. Assume 'limited'")
    for kw, t in (("ALL", 0), ("ALL_CAS", NODE_CA), ("ALL_SWITCHES", NODE_SWITCH), ("ALL_ROUTERS", NODE_ROUTER)):
        if _prefix(name, kw):
            _add_members(ctx, conf, membership, t)
            return
    if _prefix(name, "SELF"):
        guid = ctx.subnet.sm_port_guid
    else:
        guid, rest = strtoul(name)
        if not guid or rest:
            raise ParseError
    _add_members(ctx, conf, membership, None, guid)


def _mgroup(ctx, lineno: int, conf: _PartConf, mgid_text: str | None, rest: list[str]) -> None:
    """mgroup_create: ``mgid=...`` and its flags (the rest of the statement)."""
    try:
        mgid = ipaddress.IPv6Address(mgid_text or "").packed
    except ValueError:
        mgid = b""
    if len(mgid) != 16 or mgid[0] != 0xFF:
        ctx.log.error(f"mgroup_create: PARSE ERROR partition conf file line {lineno}: mgid \"{mgid_text}\": "
                      "gid is not multicast")
        return
    f = conf.flags
    flags = GroupFlags(f.mtu, f.rate, f.sl, f.scope_mask, f.qkey, 0, f.flow_label)
    for tok in rest:
        flag, val = _name_token(tok)
        if not _group_flag(ctx, lineno, flags, flag, val):
            ctx.log.verbose(f"parse_mgroup_flags: PARSE WARN: line {lineno}: unrecognized mgroup flag "
                            f"'{flag}' - ignored")
    p = conf.prtn
    if mgid[2:4] in (b"\x40\x1b", b"\x60\x1b"):          # an IPoIB group: checked against the partition
        mpkey = int.from_bytes(mgid[4:6], "big")
        text = str(ipaddress.IPv6Address(mgid))
        if not (mgid == IPOIB_BCAST_MGID or mpkey == 0 or mpkey == p.pkey | PKEY_FULL):
            ctx.log.error(f"ip_mgroup_pkey_ok: IP MC group ({text}) specified with invalid pkey 0x{mpkey:04x} "
                          f"for partition pkey = 0x{p.pkey:04x} ({p.name})")
            return
        if flags.rate != f.rate:
            ctx.log.error(f"ip_mgroup_rate_ok: IP MC group ({text}) specified with invalid rate ({flags.rate}): "
                          f"partition pkey = 0x{p.pkey:04x} ({p.name}) [Partition broadcast group rate = {f.rate}]")
            return
        if flags.mtu != f.mtu:
            ctx.log.error(f"ip_mgroup_mtu_ok: IP MC group ({text}) specified with invalid mtu ({flags.mtu}): "
                          f"partition pkey = 0x{p.pkey:04x} ({p.name}) [Partition broadcast group mtu = {f.mtu}]")
            return
        mgid = mgid[:4] + (p.pkey | PKEY_FULL).to_bytes(2, "big") + mgid[6:]
        if not flags.qkey:
            flags.qkey = IPOIB_BCAST_QKEY
    if any(g.mgid == mgid for q in ctx.prtns.ordered() for g in q.mgroups):
        return                               # don't create multiple copies of the group
    _create_mgrp(ctx, p, flags, mgid)


def _fail(ctx, lineno: int, what: str, func: str = "parse_part_conf", nl: str = "\n") -> None:
    ctx.log.error(f"{func}: PARSE ERROR: line {lineno}: {what}")
    import sys
    print(f"{nl}PARSE ERROR: line {lineno}: {what}", file=sys.stderr)


def _statement(ctx, lineno: int, conf: _PartConf, text: str) -> bool:
    """parse_part_conf: a partition's header (if it has none yet) and members; False on an error."""
    body = text
    if conf.prtn is None:
        head, colon, body = text.partition(":")
        if not colon:
            _fail(ctx, lineno, "no partition definition found")
            return False
        toks = head.split(",")
        name, pkey_text = _name_token(toks[0])
        for tok in toks[1:]:
            flag, val = _name_token(tok)
            _partition_flag(ctx, lineno, conf, flag, val)
        try:
            _create(ctx, lineno, conf, name, pkey_text)
        except ParseError:
            _fail(ctx, lineno, "bad partition definition")
            return False
    toks = body.split(",")
    for i, tok in enumerate(toks):
        name, flag = _name_token(tok)
        if name == "mgid":
            _mgroup(ctx, lineno, conf, flag, toks[i + 1:])
            return True
        try:
            _add_port(ctx, lineno, conf, name, flag)
        except ParseError:
            _fail(ctx, lineno, "bad PortGUID", "parse_part_conf", "")
            return False
    return True


def parse_text(ctx: _Ctx, text: str) -> bool:
    """osm_prtn_config_parse_file's loop: True if the file parsed (and defined something)."""
    conf: _PartConf | None = None
    ok = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.split("#", 1)[0]
        while True:
            line = line.lstrip(" \t\n")
            if not line:
                break
            if conf is None:
                conf = _PartConf()
            stmt, semi, line = line.partition(";")
            if not _statement(ctx, lineno, conf, stmt):
                return False
            ok = 1
            if semi:
                conf = None
            else:
                break
    return ok == 1


def make_partitions(subnet: Subnet, prtns: Partitions, opts: PrtnOptions, log,
                    indx0: dict | None = None) -> bool:
    """osm_prtn_make_partitions; False if the file was in error (the default was used).
    ``indx0``: physp -> P_Key wanted at index 0 (the ``indx0`` flag), filled in."""
    path = opts.config_file or DEFAULT_PARTITION_CONFIG_FILE
    is_config = True
    try:
        os.stat(path)
    except OSError as e:
        log.verbose(f"osm_prtn_make_partitions: Partition configuration {path} is not accessible ({e.strerror})")
        is_config = False
    ctx = _Ctx(subnet, prtns, opts, log)
    ctx.indx0 = indx0
    wrong = False
    while True:
        for p in prtns.by_pkey.values():
            p.full.clear()
            p.part.clear()
            p.mgroups.clear()           # made again from the file (the SA keeps the groups' members)
        prtns.mgroups.clear()
        prtns._counter = 0
        # the default partition: everybody, full without a file, limited with one; the SM full
        d = prtns.make_new("Default", DEFAULT_PARTIAL_PKEY, log)
        add_all(ctx, d, 0, not is_config, False)
        d.part.pop(subnet.sm_port_guid, None)
        add_port(ctx, d, subnet.sm_port_guid, True, False)
        if not is_config:
            add_mcgroup(ctx, d, GroupFlags(DEFAULT_MGRP_MTU, DEFAULT_MGRP_RATE, DEFAULT_SL, 0, IPOIB_BCAST_QKEY),
                        0, IPOIB_BCAST_MGID)
        if is_config:
            try:
                text = open(path, errors="replace").read()
            except OSError:
                text = ""
            if not parse_text(ctx, text):
                log.verbose("osm_prtn_make_partitions: Partition configuration was not fully processed")
                wrong = True
        for k in [k for k, p in prtns.by_pkey.items() if not p.full and not p.part]:
            del prtns.by_pkey[k]
        if is_config and wrong:
            log.error("osm_prtn_make_partitions: Partition configuration in error; retrying with default config")
            is_config = False
            if indx0 is not None:
                indx0.clear()
            continue
        return not wrong
