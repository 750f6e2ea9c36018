"""The QoS policy file's syntax as opensm's flex lexer and bison grammar read it (osm_qos_parser_l.l, _y.y).

``parse(text, policy, partitions)`` fills a ``qos_rules.Policy`` with the
port groups, qos-levels, match rules and qos-ulps of ``text``, or raises
``qos_rules.PolicyError`` with the line, the column and the text of
opensm's yyerror.

The lexer is the flex one: longest match, the first rule on a tie, the
keywords with their ``: `` (``name:``, ``sl:``...) as one token, the ULP
names and node types in any case, numbers, ``-``, ``:``, ``,`` and ``*``
turned into text inside strings (``name:``, ``use:``, ``port-name:``...), the
modes reset at each end of line; its position (``save_pos``) is the line and
column after the last character it read.  The parser is the grammar's,
reading a token ahead only where bison does (after a list or a string, which
a next token could extend; never after a lone number or an end keyword), so
that an error's position is the one opensm prints: a syntax error after the
token that does not fit, a semantic one (an SL over 15, a second ``name``, a
port-group without one...) after the last token bison had read.
"""

from __future__ import annotations

import re

from .qos_rules import (ISER_PORT, ISER_SERVICE_ID, RDS_PORT, RDS_SERVICE_ID, SDP_SERVICE_ID, Level, Policy,
                         PolicyError, PortGroup, Rule)

MAX_PORTS_ON_SWITCH = 128
MIN_MTU, MAX_MTU = 1, 5                  # IB_MTU_LEN_256 .. IB_MTU_LEN_4096
MIN_RATE, MAX_RATE = 2, 22               # 2.5 .. 600 Gb/s (opensm 3.3.23's IB_MAX_RATE)

# flex's rules in their order: (token, pattern, what it starts); "" is no token (white space)
_WS = r"[ \t]*:[ \t]*"
_WC = r"[ \t]*,[ \t]*"


def _ci(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


_KEYWORDS = ["qos-ulps", "end-qos-ulps", "port-groups", "end-port-groups", "port-group", "end-port-group",
             "qos-setup", "end-qos-setup", "vlarb-tables", "end-vlarb-tables", "vlarb-scope", "end-vlarb-scope",
             "sl2vl-tables", "end-sl2vl-tables", "sl2vl-scope", "end-sl2vl-scope", "qos-levels", "end-qos-levels",
             "qos-level", "end-qos-level", "qos-match-rules", "end-qos-match-rules", "qos-match-rule",
             "end-qos-match-rule"]
# keyword + ":" -> the mode its value is read in
_TAGS = [("port-guid", "ranges"), ("port-name", "strings"), ("partition", "single"), ("node-type", "node_type"),
         ("name", "single"), ("use", "description"), ("group", "strings"), ("vlarb-high", "pairs"),
         ("vlarb-low", "pairs"), ("vl-high-limit", "number"), ("to", "asterisk"), ("from", "asterisk"),
         ("across-to", "strings"), ("across-from", "strings"), ("across", "strings"), ("sl2vl-table", "numbers"),
         ("sl", "number"), ("mtu-limit", "number"), ("rate-limit", "number"), ("packet-life", "number"),
         ("path-bits", "ranges"), ("qos-class", "ranges"), ("source", "strings"), ("destination", "strings"),
         ("service-id", "ranges"), ("pkey", "ranges"), ("qos-level-name", "single")]
_NODE_TYPES = ["router", "ca", "switch", "self", "all"]
_ULPS = [("ulp-default", _ci("default") + _WS, "number"),
         ("ulp-any-service-id", _ci("any") + _WC + "service-id", "ranges"),
         ("ulp-any-pkey", _ci("any") + _WC + "pkey", "ranges"),
         ("ulp-any-target-port-guid", _ci("any") + _WC + "target-port-guid", "ranges"),
         ("ulp-any-source-port-guid", _ci("any") + _WC + "source-port-guid", "ranges"),
         ("ulp-any-source-target-port-guid", _ci("any") + _WC + "source-target-port-guid", "ranges"),
         ("ulp-sdp-default", _ci("sdp") + _WS, "number"), ("ulp-sdp-port", _ci("sdp") + _WC + "port-num", "ranges"),
         ("ulp-rds-default", _ci("rds") + _WS, "number"), ("ulp-rds-port", _ci("rds") + _WC + "port-num", "ranges"),
         ("ulp-iser-default", _ci("iser") + _WS, "number"),
         ("ulp-iser-port", _ci("iser") + _WC + "port-num", "ranges"),
         ("ulp-srp-guid", _ci("srp") + _WC + "target-port-guid", "ranges"),
         ("ulp-ipoib-default", _ci("ipoib") + _WS, "number"),
         ("ulp-ipoib-pkey", _ci("ipoib") + _WC + "pkey", "ranges")]

_RULES: list[tuple[str, re.Pattern, str | None]] = (
    [("comment", re.compile(r"#.*\n"), None), ("white-nl", re.compile(r"[ \t]+\n"), None),
     ("white", re.compile(r"[ \t]+"), None), ("nl", re.compile(r"\n"), None)]
    + [(k, re.compile(re.escape(k)), None) for k in _KEYWORDS]
    + [(k + ":", re.compile(re.escape(k) + _WS), mode) for k, mode in _TAGS]
    + [("type-" + t, re.compile(_ci(t)), None) for t in _NODE_TYPES]
    + [(k, re.compile(p), mode) for k, p, mode in _ULPS]
    + [("number", re.compile(r"0[xX][0-9a-fA-F]+"), None), ("number", re.compile(r"[0-9]+"), None),
       ("-", re.compile(r"-"), None), (":", re.compile(r":"), None), (",", re.compile(r","), None),
       ("*", re.compile(r"\*"), None), ("quoted", re.compile(r'"[^"]*"'), None), ("text", re.compile(r"."), None)])
_STRINGS = {"description", "strings", "single"}       # where numbers, '-', ':' and '*' are text
EOF = ("eof", "")


class Lexer:
    """yylex: the next token (kind, text); ``line``, ``column`` as save_pos leaves them."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line, self.column = text, 0, 1, 1
        self.flags: set[str] = set()        # the lexer's in_* flags the tags set, until the end of the line

    def _save(self, s: str) -> None:
        for c in s:
            if c == "\n":
                self.line, self.column = self.line + 1, 1
            else:
                self.column += 1

    def next(self) -> tuple[str, str]:
        while self.pos < len(self.text):
            best, best_len = None, 0
            for rule in _RULES:
                m = rule[1].match(self.text, self.pos)
                if m and len(m.group()) > best_len:
                    best, best_len = rule, len(m.group())
            kind, _, mode = best
            s = self.text[self.pos:self.pos + best_len]
            self.pos += best_len
            self._save(s)
            desc = "description" in self.flags
            if kind in ("comment", "white-nl", "nl"):
                self.flags.clear()
                continue
            if kind == "white":
                if desc:
                    return ("text", s)
                continue
            if kind.startswith("type-"):
                return (kind, s) if "node_type" in self.flags else ("text", s)
            if kind in ("number", "-", ":", "*"):
                return ("text", s) if self.flags & _STRINGS else (kind, s)
            if kind == ",":
                return ("text", s) if desc else (kind, s)
            if kind == "quoted":
                return ("text", s[1:-1])
            if kind == "text":
                return (kind, s)
            if desc:
                return ("text", s)
            if mode is not None:
                self.flags.add(mode)
            return (kind, s)
        return EOF


def strtoull(s: str) -> int:
    """strtoull(s, NULL, 0): white space and a sign, then hex, octal with a leading 0, else
    decimal, up to the first character that is not a digit."""
    s = s.lstrip(" \t\n\r\f\v")
    if s[:1] in ("+", "-"):
        v = strtoull(s[1:]) if s[1:2] not in ("+", "-", " ") else 0
        return (-v) % (1 << 64) if s[0] == "-" else v
    base, digits = 10, s
    if s[:2].lower() == "0x":
        base, digits = 16, s[2:]
    elif s.startswith("0"):
        base = 8
    n = 0
    for c in digits:
        d = int(c, 16) if c in "0123456789abcdefABCDEF" else 99
        if d >= base:
            break
        n = n * base + d
    return min(n, (1 << 64) - 1)


def _c_int(v: int) -> int:
    """A uint64 printed with %d: its low 32 bits, signed."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


class _Parser:
    def __init__(self, text: str, policy: Policy, partitions, subnet=None) -> None:
        self.lex, self.la = Lexer(text), None
        self.policy, self.partitions, self.subnet = policy, partitions, subnet
        self._by_desc = None

    def nodes_by_desc(self) -> dict:
        """The policy's node hash: description -> the first node (by GUID) that has it."""
        if self._by_desc is None:
            self._by_desc = {}
            for guid in sorted(self.subnet.nodes):
                self._by_desc.setdefault(self.subnet.nodes[guid].desc, self.subnet.nodes[guid])
        return self._by_desc

    # tokens ---------------------------------------------------------------------------------
    def peek(self) -> str:
        if self.la is None:
            self.la = self.lex.next()
        return self.la[0]

    def take(self, *kinds: str) -> str:
        if self.peek() not in kinds:
            self.error("syntax error")
        tok, self.la = self.la, None
        return tok[1]

    def error(self, what: str):
        raise PolicyError(self.lex.line, what, self.lex.column)

    # the common part ------------------------------------------------------------------------
    def number(self) -> int:
        return strtoull(self.take("number"))

    def single_string(self) -> str:
        parts = [self.take("text")]
        while self.peek() == "text":
            parts.append(self.take("text"))
        return "".join(parts).strip(" \t\n\r\f\v")

    def string_list(self) -> list[str]:
        return self._list(self.single_string)

    def _list(self, item) -> list:
        """item (',' item)*: a token ahead after each item, to see whether a comma follows."""
        out = [item()]
        while self.peek() == ",":
            self.take(",")
            out.append(item())
        return out

    def once(self, seen: set, tag: str, what: str, store):
        """The reader of a string tag that may come once: its text to ``store``; a second one is
        an error (``what``: opensm's text for it), found after the token that ends the text."""
        def read(_):
            v = self.single_string()
            if tag in seen:
                self.error(what)
            seen.add(tag)
            store(v)
        return read

    def list_of_ranges(self) -> list[tuple[int, int]]:
        def item():
            a = self.number()
            if self.peek() != "-":
                return (a, a)
            self.take("-")
            b = self.number()
            return (min(a, b), max(a, b))
        return self._list(item)

    def num_pairs(self) -> list[tuple[int, int]]:
        def item():
            a = self.number()
            self.take(":")
            return (a, self.number())
        return self._list(item)

    # the file --------------------------------------------------------------------------------
    def parse(self) -> None:
        sections = {"qos-ulps": self.qos_ulps, "port-groups": self.port_groups, "qos-setup": self.qos_setup,
                    "qos-levels": self.qos_levels, "qos-match-rules": self.qos_match_rules}
        while self.peek() != "eof":
            if self.peek() not in sections:
                self.error("syntax error")
            sections[self.la[0]]()

    def _items(self, start: str, end: str, item, at_least_one: bool = False) -> None:
        """``start`` items ``end``: the section's list of items."""
        self.take(start)
        n = 0
        while True:
            k = self.peek()
            if k == end and (n or not at_least_one):
                self.take(end)
                return
            item()
            n += 1

    def _entries(self, start: str, end: str, entries: dict, done) -> None:
        """An item: ``start`` then its tags (``entries``: tag -> reader) to ``end``, then ``done``."""
        self.take(start)
        while self.peek() != end:
            if self.la[0] not in entries:
                self.error("syntax error")
            entries[self.la[0]](self.take(self.la[0]))
        self.take(end)
        done()

    # qos-ulps
    def qos_ulps(self) -> None:
        self._items("qos-ulps", "end-qos-ulps", self.qos_ulp, at_least_one=True)

    def ulp_sl(self, rule: Rule) -> None:
        sl = self.number()
        if sl > 15:
            self.error("illegal SL value")
        rule.level = Level(f"SL{sl}", sl)
        self.policy.ulp_rules.append(rule)

    def qos_ulp(self) -> None:
        kind = self.peek()
        if not kind.startswith("ulp-"):
            self.error("syntax error")
        self.take(kind)
        if kind == "ulp-default":
            sl = self.number()
            if sl > 15:
                self.error("illegal SL value")
            self.policy.ulp_default = Level("default", sl)
            return
        r = Rule(Level(""))
        if kind.endswith("-default"):                  # sdp, rds, iser, ipoib: the colon is in the token
            if kind == "ulp-sdp-default":
                r.service_ids = [(SDP_SERVICE_ID, SDP_SERVICE_ID + 0xFFFF)]
            elif kind == "ulp-rds-default":
                r.service_ids = [(RDS_SERVICE_ID + RDS_PORT,) * 2]
            elif kind == "ulp-iser-default":
                r.service_ids = [(ISER_SERVICE_ID + ISER_PORT,) * 2]
            else:
                r.pkeys = [(0x7FFF, 0x7FFF)]
                self.validate_ipoib(r.pkeys)
            self.ulp_sl(r)
            return
        rng = self.list_of_ranges()
        self.take(":")
        if kind == "ulp-any-service-id":
            r.service_ids = rng
        elif kind in ("ulp-any-pkey", "ulp-ipoib-pkey"):
            r.pkeys = [(lo & 0x7FFF, hi & 0x7FFF) for lo, hi in rng]
            if kind == "ulp-ipoib-pkey":
                self.validate_ipoib(r.pkeys)
        elif kind in ("ulp-any-target-port-guid", "ulp-srp-guid"):
            r.targets = [PortGroup(guids=rng)]
        elif kind == "ulp-any-source-port-guid":
            r.sources = [PortGroup(guids=rng)]
        elif kind == "ulp-any-source-target-port-guid":
            r.sources = r.targets = [PortGroup(guids=rng)]
        else:                                                   # sdp, rds, iser port-num
            if any(lo > 0xFFFF or hi > 0xFFFF for lo, hi in rng):
                self.error("SDP port number out of range")     # (opensm says SDP for all three)
            base = SDP_SERVICE_ID if kind == "ulp-sdp-port" else RDS_SERVICE_ID
            r.service_ids = [(lo + base, hi + base) for lo, hi in rng]
        self.ulp_sl(r)

    def validate_ipoib(self, ranges) -> None:
        """__validate_pkeys for IPoIB: the partition must exist and have two full members."""
        if self.partitions is None:
            return
        for lo, hi in ranges:
            for pkey in range(lo, hi + 1):
                p = self.partitions.by_pkey.get(pkey & 0x7FFF)
                if p is None:
                    self.error(f"IPoIB partition, pkey 0x{pkey & 0x7FFF:04X} - partition doesn't exist")
                if len(p.full) < 2:
                    self.error(f"IPoIB partition, pkey 0x{pkey & 0x7FFF:04X} - partition has less than two "
                               "full members")

    # port-groups
    def port_groups(self) -> None:
        self._items("port-groups", "end-port-groups", self.port_group, at_least_one=True)

    def port_group(self) -> None:
        g, seen = PortGroup(), set()

        def port_names(_):
            for s in self.string_list():
                slash = s.rfind("/")
                port = s[slash:] if slash >= 0 else ""
                if len(port) < 3 or port[1] not in "pP":
                    self.error(f"'{s}' - illegal port name")
                num = strtoull(port[2:])
                if not num:
                    self.error(f"'{s}' - illegal port number in port name")
                desc = s[:slash]
                if self.subnet is None:
                    g.port_names.add(f"{desc}/P{num}")
                    continue
                node = self.nodes_by_desc().get(desc)
                if node is None:
                    continue                            # no such node: nobody
                # opensm's physp table: every port of a switch, the ports found of a CA
                if num > node.num_ports or not node.is_switch and num not in node.ports:
                    self.error(f"'{desc}' - port number out of range in port name")
                g.ports.add((node.guid, num))

        def node_types(_):
            def item():
                k = self.take("type-ca", "type-switch", "type-router", "type-all", "type-self")
                g.node_types.add(k.upper())
            self._list(item)

        def done():
            if not g.name:
                self.error("port-group validation failed - no port group name specified")
            self.policy.groups.setdefault(g.name, g)         # opensm looks names up first to last
        self._entries("port-group", "end-port-group", {
            "name:": self.once(seen, "name", "port-group has multiple 'name' tags", lambda v: setattr(g, "name", v)),
            "use:": self.once(seen, "use", "port-group has multiple 'use' tags", lambda v: None),
            "port-guid:": lambda _: g.guids.extend(self.list_of_ranges()),
            "port-name:": port_names,
            "pkey:": lambda _: g.pkeys.extend((lo & 0x7FFF, hi & 0x7FFF) for lo, hi in self.list_of_ranges()),
            "partition:": lambda _: g.partitions.extend(self.string_list()),
            "node-type:": node_types}, done)

    # qos-setup: read, and not used (as opensm)
    def qos_setup(self) -> None:
        def tables(start, end, scope):
            self._items(start, end, scope)

        def item():
            if self.peek() == "vlarb-tables":
                tables("vlarb-tables", "end-vlarb-tables", vlarb_scope)
            elif self.peek() == "sl2vl-tables":
                tables("sl2vl-tables", "end-sl2vl-tables", sl2vl_scope)
            else:
                self.error("syntax error")

        def vlarb_scope():
            s = {"groups": 0}

            def groups(_):
                s["groups"] += len(self.string_list())

            def done():
                if not s["groups"]:
                    self.error("vlarb-scope validation failed - no port groups specified by 'group' or by 'across'")
            self._entries("vlarb-scope", "end-vlarb-scope", {
                "group:": groups, "across:": groups, "vlarb-high:": lambda _: self.num_pairs(),
                "vlarb-low:": lambda _: self.num_pairs(), "vl-high-limit:": lambda _: self.number()}, done)

        def sl2vl_scope():
            s = {"groups": 0, "table": False}

            def groups(_):
                s["groups"] += len(self.string_list())

            def ports(which):
                def read(_):
                    if self.peek() == "*":
                        self.take("*")
                        return
                    if any(hi >= MAX_PORTS_ON_SWITCH for _, hi in self.list_of_ranges()):
                        self.error(f"port number out of range '{which}' list")
                return read

            def table(_):
                vls = self._list(self.number)
                if s["table"]:
                    self.error("sl2vl-scope has more than one sl2vl-table")
                if len(vls) != 16:
                    self.error("wrong number of values in 'sl2vl-table' (should be 16)")
                if any(vl >= 16 for vl in vls):
                    self.error("wrong VL value in 'sl2vl-table' (should be 0 to 15)")
                s["table"] = True

            def done():
                if not s["table"]:
                    self.error("sl2vl-scope validation failed - no sl2vl table specified")
                if not s["groups"]:
                    self.error("sl2vl-scope validation failed - no port groups specified by 'group', 'across-to' "
                               "or 'across-from'")
            self._entries("sl2vl-scope", "end-sl2vl-scope", {
                "group:": groups, "across:": groups, "across-from:": groups, "across-to:": groups,
                "from:": ports("from"), "to:": ports("to"), "sl2vl-table:": table}, done)
        self._items("qos-setup", "end-qos-setup", item)

    # qos-levels
    def qos_levels(self) -> None:
        self._items("qos-levels", "end-qos-levels", self.qos_level)

    def qos_level(self) -> None:
        lv, seen = Level(""), set()

        def string(tag):
            return self.once(seen, tag, f"qos-level has multiple '{tag}' tags", lambda v: setattr(lv, tag, v))

        def number(tag, attr, limits=None):
            def read(_):
                v = self.number()
                if tag in seen:
                    self.error(f"'qos-level' has multiple '{tag}' tags")
                if limits and not limits[0] <= v <= limits[1]:
                    self.error(f"{tag.replace('-', ' ')} is out of range, value: {_c_int(v)}")
                seen.add(tag)
                setattr(lv, attr, v & 0xFF)
            return read

        def done():
            if lv.sl is None:
                self.error("qos-level validation failed - no 'sl' specified")
            if not lv.name:
                self.error("qos-level validation failed - no 'name' specified")
            self.policy.levels.setdefault(lv.name, lv)
        self._entries("qos-level", "end-qos-level", {
            "name:": string("name"), "use:": string("use"), "sl:": number("sl", "sl"),
            "mtu-limit:": number("mtu-limit", "mtu_limit", (MIN_MTU, MAX_MTU)),
            "rate-limit:": number("rate-limit", "rate_limit", (MIN_RATE, MAX_RATE)),
            "packet-life:": number("packet-life", "pkt_life"),
            "path-bits:": lambda _: lv.path_bits.extend(self.list_of_ranges()),
            "pkey:": lambda _: lv.pkeys.extend((lo & 0x7FFF, hi & 0x7FFF) for lo, hi in self.list_of_ranges())},
            done)

    # qos-match-rules
    def qos_match_rules(self) -> None:
        self._items("qos-match-rules", "end-qos-match-rules", self.qos_match_rule)

    def qos_match_rule(self) -> None:
        r, seen = Rule(Level("")), set()
        r.level_name, r.source_names, r.target_names = None, [], []

        def done():
            if r.level_name is None:
                self.error("match-rule validation failed - no 'qos-level-name' specified")
            self.policy.rules.append(r)
        self._entries("qos-match-rule", "end-qos-match-rule", {
            "use:": self.once(seen, "use", "'qos-match-rule' has multiple 'use' tags", lambda v: None),
            "qos-level-name:": self.once(seen, "qos-level-name", "qos-match-rule has multiple 'qos-level-name' tags",
                                         lambda v: setattr(r, "level_name", v)),
            "qos-class:": lambda _: r.qos_classes.extend(self.list_of_ranges()),
            "source:": lambda _: r.source_names.extend(self.string_list()),
            "destination:": lambda _: r.target_names.extend(self.string_list()),
            "service-id:": lambda _: r.service_ids.extend(self.list_of_ranges()),
            "pkey:": lambda _: r.pkeys.extend((lo & 0x7FFF, hi & 0x7FFF) for lo, hi in self.list_of_ranges())},
            done)


def parse(text: str, policy: Policy, partitions=None, subnet=None) -> None:
    """Fill ``policy`` from ``text``; PolicyError (line, column, yyerror's text) at the first error.
    With ``subnet``, port names are looked up in it as opensm does (the first node by GUID with
    the description; a port it does not have is an error); without, kept as text."""
    _Parser(text, policy, partitions, subnet).parse()
