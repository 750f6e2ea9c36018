"""The QoS policy file (opensm's qos-policy.conf), sans-IO: what SL, MTU, rate and lifetime a path gets.

``parse(text, partitions)`` reads opensm's sections (the syntax, and the
errors with opensm's line and column, are ``qos_parser``'s):

* ``port-groups``: ``port-group`` items with ``name``, ``use``, ``port-guid``
  (GUID ranges), ``port-name`` (``node description/Pnum``), ``pkey`` and
  ``partition`` (the members of those partitions), ``node-type`` (CA,
  SWITCH, ROUTER, SELF, ALL);
* ``qos-levels``: ``qos-level`` items with ``name``, ``use``, ``sl``,
  ``mtu-limit``, ``rate-limit``, ``packet-life``, ``path-bits`` (read into
  the level and, as in opensm, used by nothing: a PathRecord of a port with an
  LMC gets every path whatever its bits), ``pkey``;
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
groups.  What it makes (``Policy``, whose ``level_for`` gives a PathRecord
its level) is ``qos_rules``'s.  ``load`` logs what opensm logs for a file
that is missing, does not parse (ERR AC05, AC03) or does not validate
(AC10..AC14, AC04).
"""

from __future__ import annotations

from .qos_parser import parse as parse_syntax
from .qos_rules import (DEFAULT_QOS_POLICY_FILE, ISER_PORT, ISER_SERVICE_ID, PR_COMP_PKEY, PR_COMP_QOS_CLASS,
                        PR_COMP_SERVICE_ID, RDS_PORT, RDS_SERVICE_ID, SDP_SERVICE_ID, InvalidPolicy, Level, Policy,
                        PolicyError, PortGroup, Rule)


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


def parse(text: str, partitions=None, log=None, subnet=None) -> Policy:
    """The policy; PolicyError for a syntax error, InvalidPolicy if it does not validate.
    ``partitions`` (prtn_config.Partitions): what IPoIB P_Keys are checked against (None: not checked)."""
    policy = Policy()
    parse_syntax(text, policy, partitions, subnet)
    _validate(policy, partitions, log)
    return policy


def load(path: str, log, partitions=None, subnet=None) -> Policy | None:
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
        return parse(text, partitions, log, subnet)
    except PolicyError as e:
        log.error(f"yyerror: ERR AC05: Syntax error (line {e.line}:{e.column}): {e.what}")
        print(f"Error in QoS Policy File (line {e.line}:{e.column}): {e.what}.", file=sys.stderr)
        log.error(f"osm_qos_parse_policy_file: ERR AC03: Failed parsing QoS policy file ({path})")
    except InvalidPolicy as e:
        log.error(f"osm_qos_policy_validate: {e}")
        log.error(f"osm_qos_parse_policy_file: ERR AC04: Error(s) in QoS policy file ({path})")
        print(f"Error(s) in QoS policy file ({path})", file=sys.stderr)
    return None


__all__ = ["DEFAULT_QOS_POLICY_FILE", "ISER_PORT", "ISER_SERVICE_ID", "PR_COMP_PKEY", "PR_COMP_QOS_CLASS",
           "PR_COMP_SERVICE_ID", "RDS_PORT", "RDS_SERVICE_ID", "SDP_SERVICE_ID", "InvalidPolicy", "Level", "Policy",
           "PolicyError", "PortGroup", "Rule", "load", "parse"]
