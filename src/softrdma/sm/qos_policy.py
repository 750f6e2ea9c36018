"""The QoS policy file (opensm's qos-policy.conf), its simplified ``qos-ulps`` section, sans-IO.

``parse(text)`` reads::

    qos-ulps
        default                       : 0   # SL of a path no rule matches
        sdp, port-num 30000           : 1   # SDP to TCP port 30000
        sdp                           : 0   # any other SDP
        rds[, port-num N[-M],...]     : 2
        iser[, port-num ...]          : 4
        srp, target-port-guid G[-H]   : 5
        ipoib, pkey 0x0001            : 5   # IPoIB on that partition
        ipoib                         : 6   # IPoIB on the default partition
        any, service-id R             : 2
        any, pkey R                   : 3
        any, target-port-guid R       : 6
        any, source-port-guid R       : 7
        any, source-target-port-guid R: 8
    end-qos-ulps

as opensm's parser turns it into match rules (in file order) and
one-SL QoS levels: SDP is ServiceIDs 0x10000 + port, RDS and iSER
0x1060000 + port (default ports 0x48CA and 0x0CBC), IPoIB a P_Key rule.
``Policy.sl_for(src, dst, mask, fields)`` is osm_qos_policy_get_qos_level_by_pr
for a PathRecord request: the first rule whose port GUIDs hold the ends and
whose ServiceIDs / P_Keys hold the request's (which must then be in the
request's ComponentMask) gives the SL, else the ``default``, else None.

The full format's sections (port-groups, qos-setup, qos-levels,
qos-match-rules) are not supported: a file with them is refused as a
parse error, and the SM runs without a policy, as opensm does with a file
it cannot parse.
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
FULL_SECTIONS = ("port-groups", "qos-setup", "qos-levels", "qos-match-rules")


class PolicyError(Exception):
    """A syntax error (yyerror's): the line, and what is wrong."""

    def __init__(self, line: int, what: str) -> None:
        super().__init__(f"line {line}: {what}")
        self.line, self.what = line, what


class InvalidPolicy(Exception):
    """A policy that parsed but does not validate (osm_qos_policy_validate)."""


@dataclass
class Rule:
    sl: int
    service_ids: list[tuple[int, int]] = field(default_factory=list)
    pkeys: list[tuple[int, int]] = field(default_factory=list)
    sources: list[tuple[int, int]] = field(default_factory=list)       # port GUID ranges
    targets: list[tuple[int, int]] = field(default_factory=list)


def _in(ranges, v: int) -> bool:
    return any(lo <= v <= hi for lo, hi in ranges)


@dataclass
class Policy:
    rules: list[Rule] = field(default_factory=list)
    default_sl: int | None = None

    def sl_for(self, src_guid: int, dst_guid: int, mask: int, f: dict) -> int | None:
        for r in self.rules:
            if r.sources and not _in(r.sources, src_guid):
                continue
            if r.targets and not _in(r.targets, dst_guid):
                continue
            if r.service_ids and (mask & PR_COMP_SERVICE_ID != PR_COMP_SERVICE_ID
                                  or not _in(r.service_ids, f["ServiceID"])):
                continue
            if r.pkeys and (not mask & PR_COMP_PKEY or not _in(r.pkeys, f["PKey"] & 0x7FFF)):
                continue
            return r.sl
        return self.default_sl


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


def parse(text: str, partitions=None, log=None) -> Policy:
    """The policy; PolicyError for a syntax error, InvalidPolicy if it has no default SL.
    ``partitions`` (prtn_config.Partitions): what IPoIB and P_Key rules are checked against
    (None: not checked)."""
    policy = Policy()
    section = None
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        low = line.lower()
        if section is None:
            if low == "qos-ulps":
                section = "qos-ulps"
                continue
            if low in FULL_SECTIONS:
                raise PolicyError(n, f"section '{line}' is not supported (only qos-ulps is)")
            raise PolicyError(n, f"syntax error: '{line}'")
        if low == "end-qos-ulps":
            section = None
            continue
        m = _ULP.match(line)
        if not m:
            raise PolicyError(n, f"syntax error: '{line}'")
        ulp, key, ranges = m["ulp"].lower(), (m["key"] or "").lower(), m["ranges"]
        sl = _number(m["sl"], n)
        if sl > 15:
            raise PolicyError(n, "illegal SL value")
        if ulp == "default" and not key:
            policy.default_sl = sl
            continue
        r = Rule(sl)
        rng = _ranges(ranges, n) if key else []
        if key and not rng:
            raise PolicyError(n, f"{ulp} ULP rule doesn't have {key} values")
        if ulp == "any" and key == "service-id":
            r.service_ids = rng
        elif ulp == "any" and key == "pkey":
            r.pkeys = [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in rng]
            _check_pkeys(r.pkeys, partitions, False, n, log)
        elif ulp == "any" and key == "target-port-guid" or ulp == "srp" and key == "target-port-guid":
            r.targets = rng
        elif ulp == "any" and key == "source-port-guid":
            r.sources = rng
        elif ulp == "any" and key == "source-target-port-guid":
            r.sources, r.targets = rng, rng
        elif ulp == "sdp" and not key:
            r.service_ids = [(SDP_SERVICE_ID, SDP_SERVICE_ID + 0xFFFF)]
        elif ulp in ("sdp", "rds", "iser") and key == "port-num":
            base = SDP_SERVICE_ID if ulp == "sdp" else RDS_SERVICE_ID
            r.service_ids = [(lo + base, hi + base) for lo, hi in rng]
        elif ulp == "rds" and not key:
            r.service_ids = [(RDS_SERVICE_ID + RDS_PORT,) * 2]
        elif ulp == "iser" and not key:
            r.service_ids = [(ISER_SERVICE_ID + ISER_PORT,) * 2]
        elif ulp == "ipoib":
            r.pkeys = [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in rng] if key == "pkey" else [(0x7FFF, 0x7FFF)]
            if key not in ("", "pkey"):
                raise PolicyError(n, f"syntax error: '{line}'")
            if partitions is not None:
                _check_pkeys(r.pkeys, partitions, True, n, log)
        else:
            raise PolicyError(n, f"syntax error: '{line}'")
        policy.rules.append(r)
    if section is not None:
        raise PolicyError(n if text else 1, "qos-ulps without end-qos-ulps")
    if policy.default_sl is None:
        raise InvalidPolicy("Default qos-level (default) not defined.")
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
        log.error(f"osm_qos_policy_validate: ERR AC10: {e}")
        log.error(f"osm_qos_parse_policy_file: ERR AC04: Error(s) in QoS policy file ({path})")
        print(f"Error(s) in QoS policy file ({path})", file=sys.stderr)
    return None
