"""What a QoS policy is made of (opensm's osm_qos_policy.h): port groups, qos-levels, match rules.

``PortGroup.holds`` says whether a port is in a group (by GUID, by
``node description/Pnum``, by partition, by node type); ``Policy.level_for``
is osm_qos_policy_get_qos_level_by_pr: the first rule whose groups hold the
ends and whose QoS classes, ServiceIDs and P_Keys hold the request's (which
must then be in the request's ComponentMask) gives the level, else the
default.  ``PolicyError`` is a syntax error at opensm's line and column,
``InvalidPolicy`` a policy that parses and does not validate.  The file is
read by ``qos_parser`` and checked and loaded by ``qos_policy``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_QOS_POLICY_FILE = "/etc/opensm/qos-policy.conf"
SDP_SERVICE_ID = 0x0000000000010000
RDS_SERVICE_ID = ISER_SERVICE_ID = 0x0000000001060000
RDS_PORT, ISER_PORT = 0x48CA, 0x0CBC
PR_COMP_SERVICE_ID = 0x3                 # ServiceID's two ComponentMask bits
PR_COMP_PKEY = 1 << 13
PR_COMP_QOS_CLASS = 1 << 14


class PolicyError(Exception):
    """A syntax error (yyerror's): the line and column, and what is wrong."""

    def __init__(self, line: int, what: str, column: int = 1) -> None:
        super().__init__(f"line {line}:{column}: {what}")
        self.line, self.column, self.what = line, column, what


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
    path_bits: list[tuple[int, int]] = field(default_factory=list)     # read, and unused (as opensm)


@dataclass
class PortGroup:
    """A port-group: ports by GUID, by "node description/Pnum", by partition (P_Key or name),
    by node type (CA, SWITCH, ROUTER, SELF, ALL)."""
    name: str = ""
    guids: list[tuple[int, int]] = field(default_factory=list)
    port_names: set = field(default_factory=set)       # "description/Pnum", read without a subnet
    ports: set = field(default_factory=set)            # (node GUID, port number), read with one
    pkeys: list[tuple[int, int]] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    node_types: set = field(default_factory=set)

    def holds(self, p, subnet) -> bool:
        if _in(self.guids, p.guid) or self.ports and (p.node.guid, p.num) in self.ports or \
                f"{p.node.desc}/P{p.num}" in self.port_names:
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
