"""The QoS policy file (opensm's qos-policy.conf), sans-IO: what SL, MTU, rate and lifetime a path gets.

``parse(text, partitions)`` reads opensm's sections:

* ``port-groups``: ``port-group`` items with ``name``, ``use``, ``port-guid``
  (GUID ranges), ``port-name`` (``node description/Pnum``), ``pkey`` and
  ``partition`` (the members of those partitions), ``node-type`` (CA,
  SWITCH, ROUTER, SELF, ALL);
* ``qos-levels``: ``qos-level`` items with ``name``, ``use``, ``sl``,
  ``mtu-limit``, ``rate-limit``, ``packet-life``, ``path-bits`` (read, not
  used), ``pkey``;
* ``qos-match-rules``: ``qos-match-rule`` items with ``use``, ``qos-class``,
  ``qos-level-name``, ``source``, ``destination``, ``service-id``, ``pkey``;
* ``qos-setup``: read and not used, as opensm does;
* ``qos-ulps``, the simplified form (``default : SL``; ``sdp``, ``rds``,
  ``iser`` [``, port-num R``]; ``srp, target-port-guid R``; ``ipoib``
  [``, pkey R``]; ``any, service-id|pkey|target-port-guid|source-port-guid|
  source-target-port-guid R`` ``: SL``), made into one-SL levels and match
  rules after the others, as opensm's parser makes them: SDP is ServiceIDs
  0x10000 + port, RDS and iSER 0x1060000 + port (default ports 0x48CA and
  0x0CBC), IPoIB a P_Key rule checked against the partitions.

It validates as osm_qos_policy_validate: a default level (the qos-level
``default``, else the qos-ulps ``default``), every rule's level and port
groups.  ``Policy.level_for(src, dst, mask, fields, subnet)`` is
osm_qos_policy_get_qos_level_by_pr: the first rule whose groups hold the
ends and whose QoS classes, ServiceIDs and P_Keys hold the request's (which
must then be in the request's ComponentMask) gives the level, else the
default.  ``load`` logs what opensm logs for a file that is missing, does
not parse (ERR AC05, AC03) or does not validate (AC10..AC14, AC04).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT_QOS_POLICY_FILE = "/etc/opensm/qos-policy.conf"
SDP_SERVICE_ID = 0x0000000000010000
RDS_SERVICE_ID = ISER_SERVICE_ID = 0x0000000001060000
RDS_PORT, ISER_PORT = 0x48CA, 0x0CBC
PR_COMP_SERVICE_ID = 0x3                 # ServiceID's two ComponentMask bits
PR_COMP_PKEY = 1 << 13
PR_COMP_QOS_CLASS = 1 << 14


class PolicyError(Exception):
    """A syntax error (yyerror's): the line, and what is wrong."""

    def __init__(self, line: int, what: str) -> None:
        super().__init__(f"line {line}: {what}")
        self.line, self.what = line, what


class InvalidPolicy(Exception):
    """A policy that parsed but does not validate (osm_qos_policy_validate)."""


def _in(ranges, v: int) -> bool:
    return any(lo <= v <= hi for lo, hi in ranges)


@dataclass
class Level:
    """A qos-level: what a matched path gets (None: not set)."""
    name: str
    sl: int | None = None
    mtu_limit: int | None = None
    rate_limit: int | None = None
    pkt_life: int | None = None
    pkeys: list[tuple[int, int]] = field(default_factory=list)
    use: str = ""


@dataclass
class PortGroup:
    """A port-group: ports by GUID, by "node description/Pnum", by partition (P_Key or name),
    by node type (CA, SWITCH, ROUTER, SELF, ALL)."""
    name: str = ""
    guids: list[tuple[int, int]] = field(default_factory=list)
    port_names: set = field(default_factory=set)
    pkeys: list[tuple[int, int]] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    node_types: set = field(default_factory=set)

    def holds(self, p, subnet) -> bool:
        if _in(self.guids, p.guid) or f"{p.node.desc}/P{p.num}" in self.port_names:
            return True
        types = {1: "CA", 2: "SWITCH", 3: "ROUTER"}
        if "ALL" in self.node_types or types.get(p.node.type) in self.node_types:
            return True
        if "SELF" in self.node_types and p.guid == subnet.sm_port_guid:
            return True
        prtns = subnet.partitions
        if prtns is not None and (self.pkeys or self.partitions):
            for prtn in prtns.by_pkey.values():
                if (_in(self.pkeys, prtn.pkey) or prtn.name in self.partitions) and \
                        (p.guid in prtn.full or p.guid in prtn.part):
                    return True
        return False


@dataclass
class Rule:
    """A qos-match-rule (or one the qos-ulps section makes)."""
    level: Level
    service_ids: list[tuple[int, int]] = field(default_factory=list)
    pkeys: list[tuple[int, int]] = field(default_factory=list)
    qos_classes: list[tuple[int, int]] = field(default_factory=list)
    sources: list[PortGroup] = field(default_factory=list)
    targets: list[PortGroup] = field(default_factory=list)


@dataclass
class Policy:
    rules: list[Rule] = field(default_factory=list)
    default: Level | None = None
    levels: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    ulp_rules: list[Rule] = field(default_factory=list)
    ulp_default: Level | None = None

    @property
    def default_sl(self) -> int | None:
        return self.default.sl if self.default else None

    def level_for(self, src, dst, mask: int, f: dict, subnet) -> Level | None:
        """osm_qos_policy_get_qos_level_by_pr: the first rule's level, else the default."""
        for r in self.rules:
            if r.sources and not any(g.holds(src, subnet) for g in r.sources):
                continue
            if r.targets and not any(g.holds(dst, subnet) for g in r.targets):
                continue
            if r.qos_classes and (not mask & PR_COMP_QOS_CLASS or not _in(r.qos_classes, f["QosClass"])):
                continue
            if r.service_ids and (mask & PR_COMP_SERVICE_ID != PR_COMP_SERVICE_ID
                                  or not _in(r.service_ids, f["ServiceID"])):
                continue
            if r.pkeys and (not mask & PR_COMP_PKEY or not _in(r.pkeys, f["PKey"] & 0x7FFF)):
                continue
            return r.level
        return self.default


def _number(text: str, line: int) -> int:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        raise PolicyError(line, f"bad number '{text}'") from None


def _ranges(text: str, line: int) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = _number(lo.strip(), line), _number((hi or lo).strip(), line)
        out.append((min(a, b), max(a, b)))
    return out


_ULP = re.compile(r"^(?P<ulp>\w+)\s*(?:,\s*(?P<key>[\w-]+)\s+(?P<ranges>[^:]*?))?\s*,?\s*:\s*(?P<sl>\S+)$")


def _check_pkeys(ranges, partitions, ipoib: bool, line: int, log) -> None:
    """__validate_pkeys: an IPoIB P_Key needs its partition, with two full members at least;
    another P_Key without a partition is only logged."""
    for lo, hi in ranges:
        for pkey in range(lo, hi + 1):
            p = partitions.by_pkey.get(pkey & 0x7FFF) if partitions is not None else None
            if ipoib and p is None:
                raise PolicyError(line, f"IPoIB partition, pkey 0x{pkey & 0x7FFF:04X} - partition doesn't exist")
            if ipoib and len(p.full) < 2:
                raise PolicyError(line, f"IPoIB partition, pkey 0x{pkey & 0x7FFF:04X} - partition has less "
                                        "than two full members")
            if not ipoib and p is None and log is not None:
                log.error(f"__validate_pkeys: ERR AC02: pkey 0x{pkey & 0x7FFF:04X} - partition doesn't exist")


def _ulp(line: str, n: int, policy: Policy, partitions, log) -> None:
    """One qos-ulps line: the default SL, or a match rule with a one-SL level."""
    m = _ULP.match(line)
    if not m:
        raise PolicyError(n, f"syntax error: '{line}'")
    ulp, key, ranges = m["ulp"].lower(), (m["key"] or "").lower(), m["ranges"]
    sl = _number(m["sl"], n)
    if sl > 15:
        raise PolicyError(n, "illegal SL value")
    if ulp == "default" and not key:
        policy.ulp_default = Level("default", sl)
        return
    r = Rule(Level(f"SL{sl}", sl))
    rng = _ranges(ranges, n) if key else []
    if key and not rng:
        raise PolicyError(n, f"{ulp} ULP rule doesn't have {key} values")
    if ulp == "any" and key == "service-id":
        r.service_ids = rng
    elif ulp == "any" and key == "pkey":
        r.pkeys = [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in rng]
        _check_pkeys(r.pkeys, partitions, False, n, log)
    elif key == "target-port-guid" and ulp in ("any", "srp"):
        r.targets = [PortGroup(guids=rng)]
    elif ulp == "any" and key == "source-port-guid":
        r.sources = [PortGroup(guids=rng)]
    elif ulp == "any" and key == "source-target-port-guid":
        r.sources = r.targets = [PortGroup(guids=rng)]
    elif ulp == "sdp" and not key:
        r.service_ids = [(SDP_SERVICE_ID, SDP_SERVICE_ID + 0xFFFF)]
    elif ulp in ("sdp", "rds", "iser") and key == "port-num":
        base = SDP_SERVICE_ID if ulp == "sdp" else RDS_SERVICE_ID
        r.service_ids = [(lo + base, hi + base) for lo, hi in rng]
    elif ulp == "rds" and not key:
        r.service_ids = [(RDS_SERVICE_ID + RDS_PORT,) * 2]
    elif ulp == "iser" and not key:
        r.service_ids = [(ISER_SERVICE_ID + ISER_PORT,) * 2]
    elif ulp == "ipoib" and key in ("", "pkey"):
        r.pkeys = [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in rng] if key else [(0x7FFF, 0x7FFF)]
        if partitions is not None:
            _check_pkeys(r.pkeys, partitions, True, n, log)
    else:
        raise PolicyError(n, f"syntax error: '{line}'")
    policy.ulp_rules.append(r)


# the full format: section -> (its item's start, the item's end, the section's end)
_SECTIONS = {"port-groups": ("port-group", "end-port-group", "end-port-groups"),
             "qos-levels": ("qos-level", "end-qos-level", "end-qos-levels"),
             "qos-match-rules": ("qos-match-rule", "end-qos-match-rule", "end-qos-match-rules")}
_ENTRY = re.compile(r"^(?P<key>[a-z-]+)\s*:\s*(?P<val>.*)$", re.I)


def _item(kind: str, entries: list[tuple[int, str, str]], policy: Policy, partitions, log):
    def names(v):
        return [x.strip() for x in v.split(",") if x.strip()]
    if kind == "port-group":
        g = PortGroup()
        for n, k, v in entries:
            if k == "name":
                g.name = v
            elif k == "port-guid":
                g.guids += _ranges(v, n)
            elif k == "port-name":
                g.port_names |= set(names(v))
            elif k == "pkey":
                g.pkeys += [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in _ranges(v, n)]
            elif k == "partition":
                g.partitions += names(v)
            elif k == "node-type":
                for t in names(v):
                    if t.upper() not in ("CA", "SWITCH", "ROUTER", "SELF", "ALL"):
                        raise PolicyError(n, f"unknown node type: '{t}'")
                    g.node_types.add(t.upper())
            elif k != "use":
                raise PolicyError(n, f"syntax error: '{k}'")
        if not g.name:
            raise PolicyError(entries[-1][0] if entries else 0, "port-group has no name")
        policy.groups[g.name] = g
    elif kind == "qos-level":
        lv = Level("")
        for n, k, v in entries:
            if k == "name":
                lv.name = v
            elif k == "use":
                lv.use = v
            elif k in ("sl", "mtu-limit", "rate-limit", "packet-life"):
                x = _number(v, n)
                if k == "sl" and x > 15:
                    raise PolicyError(n, "illegal SL value")
                setattr(lv, {"sl": "sl", "mtu-limit": "mtu_limit", "rate-limit": "rate_limit",
                             "packet-life": "pkt_life"}[k], x)
            elif k == "pkey":
                lv.pkeys += [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in _ranges(v, n)]
            elif k != "path-bits":
                raise PolicyError(n, f"syntax error: '{k}'")
        if not lv.name:
            raise PolicyError(entries[-1][0] if entries else 0, "qos-level has no name")
        policy.levels[lv.name] = lv
    else:
        r = Rule(Level(""))
        r.level_name, r.source_names, r.target_names = None, [], []
        for n, k, v in entries:
            if k == "qos-level-name":
                r.level_name = v
            elif k == "source":
                r.source_names += names(v)
            elif k == "destination":
                r.target_names += names(v)
            elif k == "service-id":
                r.service_ids += _ranges(v, n)
            elif k == "qos-class":
                r.qos_classes += _ranges(v, n)
            elif k == "pkey":
                r.pkeys += [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in _ranges(v, n)]
            elif k != "use":
                raise PolicyError(n, f"syntax error: '{k}'")
        if r.level_name is None:
            raise PolicyError(entries[-1][0] if entries else 0, "qos-match-rule has no qos-level-name")
        policy.rules.append(r)


def _validate(policy: Policy, partitions, log) -> None:
    """osm_qos_policy_validate: the default level, and every rule's level and groups."""
    policy.default = policy.levels.get("default") or policy.ulp_default
    if policy.default is None:
        raise InvalidPolicy("ERR AC10: Default qos-level (default) not defined.")
    for i, r in enumerate(policy.rules, 1):
        if r.level_name not in policy.levels:
            raise InvalidPolicy(f"ERR AC11: qos-match-rule num {i}: qos-level '{r.level_name}' not found")
        r.level = policy.levels[r.level_name]
        for what, code, names, out in (("source", "AC12", r.source_names, r.sources),
                                       ("destination", "AC13", r.target_names, r.targets)):
            for name in names:
                if name not in policy.groups:
                    raise InvalidPolicy(f"ERR {code}: qos-match-rule num {i}: {what} port-group '{name}' not found")
                out.append(policy.groups[name])
        for lo, hi in r.pkeys:
            for pkey in range(lo, hi + 1):
                if partitions is not None and pkey not in partitions.by_pkey and log is not None:
                    log.error(f"osm_qos_policy_validate: ERR AC14: pkey 0x{pkey:04X} in match rule - "
                              "partition doesn't exist")
    policy.rules += policy.ulp_rules          # the qos-ulps rules come after the match rules


def parse(text: str, partitions=None, log=None) -> Policy:
    """The policy; PolicyError for a syntax error, InvalidPolicy if it does not validate.
    ``partitions`` (prtn_config.Partitions): what P_Keys are checked against (None: not checked)."""
    policy = Policy()
    section, item, entries = None, None, []
    n = 0
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        low = line.lower()
        if section is None:
            if low in ("qos-ulps", "qos-setup") or low in _SECTIONS:
                section = low
                continue
            raise PolicyError(n, f"syntax error: '{line}'")
        if section == "qos-ulps":
            if low == "end-qos-ulps":
                section = None
            else:
                _ulp(line, n, policy, partitions, log)
            continue
        if section == "qos-setup":          # parsed by opensm, and not used: nor here
            if low == "end-qos-setup":
                section = None
            continue
        start, end, section_end = _SECTIONS[section]
        if item is None:
            if low == start:
                item, entries = start, []
            elif low == section_end:
                section = None
            else:
                raise PolicyError(n, f"syntax error: '{line}'")
            continue
        if low == end:
            _item(item, entries, policy, partitions, log)
            item = None
            continue
        m = _ENTRY.match(line)
        if not m:
            raise PolicyError(n, f"syntax error: '{line}'")
        entries.append((n, m["key"].lower(), m["val"].strip()))
    if section is not None:
        raise PolicyError(n or 1, f"{section} without its end")
    _validate(policy, partitions, log)
    return policy


def load(path: str, log, partitions=None) -> Policy | None:
    """osm_qos_parse_policy_file: the policy, or None (no file at the default path, or an error)."""
    try:
        text = open(path).read()
    except OSError as e:
        if path != DEFAULT_QOS_POLICY_FILE:
            log.error(f"osm_qos_parse_policy_file: ERR AC01: Failed opening QoS policy file {path} - {e.strerror}")
        else:
            log.verbose(f"osm_qos_parse_policy_file: QoS policy file not found ({path})")
        return None
    import sys
    log.info(f"osm_qos_parse_policy_file: Loading QoS policy file ({path})")
    try:
        return parse(text, partitions, log)
    except PolicyError as e:
        # (opensm gives the column too; this parser reads by lines)
        log.error(f"yyerror: ERR AC05: Syntax error (line {e.line}:1): {e.what}")
        print(f"Error in QoS Policy File (line {e.line}:1): {e.what}.", file=sys.stderr)
        log.error(f"osm_qos_parse_policy_file: ERR AC03: Failed parsing QoS policy file ({path})")
    except InvalidPolicy as e:
        log.error(f"osm_qos_policy_validate: {e}")
        log.error(f"osm_qos_parse_policy_file: ERR AC04: Error(s) in QoS policy file ({path})")
        print(f"Error(s) in QoS policy file ({path})", file=sys.stderr)
    return None
