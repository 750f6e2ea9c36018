"""``ibdiagnet`` (NVIDIA ibutils2's ibdiagnet2): the fabric diagnosed in
stages from the own port, by directed-route SMPs and PMA queries.

Stages, in ibdiagnet2's order and with its stage names: Discovery
(libibnetdisc's discovery, ``discover``; duplicated port GUIDs), Lids Check
(zero and duplicated LIDs), Links Check (links not Active), Subnet Manager (SMInfo of every port whose
CapabilityMask has IsSM: one master expected), Port Counters (PortCounters
of every linked port, error counters against 0 or ``-P`` thresholds; ``-pc``
resets them after the read), Speed / Width checks (errors against
``-lw``/``-ls``, warnings below what both ends support), Routing (with ``-r``: every switch's LFT and
MFT, the LID route from each CA port to each other CA port's LIDs --
unreachable destinations and loops -- and the credit-loop search), then
the Summary table.  Every line also goes to ibdiagnet2.log; the report
files are ``ibdiagnet_files``'.

Exit status: 0 when no stage found an error (warnings allowed), 1 when one
did, 2 for a bad argument or a fabric that cannot be reached (a one-line
``-E-`` message on stderr).
"""

from __future__ import annotations

import os
import sys

from ...mgmt.umad import TransportError
from ...wire import smp
from ...wire.errors import WireError
from . import ibdiagnet_files as rep
from .discover import NODE_SWITCH, discover
from .ibdiagnet_checks import (ERR, PM_NAMES, SPEEDS, WARN, WIDTHS, Routes, duplicate_guids,
                               duplicate_node_desc, end_ports, lid_check, link_check, pm_check,
                               port_name, speed_width_check)
from .perfquery import PC_FIELDS
from .devport import SIM_CA, device_for
from .rpc import METHOD_SET, MadPort

VERSION = "2.1.1"
DEFAULT_OUT = "/var/tmp/ibdiagnet2"
USAGE = f"""Usage: ibdiagnet [-i|--device <dev-name>] [-p|--port <port-num>]
       [-o|--output_path <directory>] [-r|--routing] [-pc]
       [-P|--pm_threshold <PM counter>=<value>[,...]]
       [-lw|--lw <1x|2x|4x|8x|12x>] [-ls|--ls <2.5|5|10|14|25|50|100|200>]
       [-h|--help] [-V|--version]

  -i|--device <dev-name>      the local device: a softrdma IB device (default: the first
                              Active one), or ibsim0, the fabric node SIM_HOST names
  -p|--port <port-num>        the local port
  -o|--output_path <dir>      where the report files go (default={DEFAULT_OUT}/)
  -r|--routing                routing checks: LFT walk of every CA pair, credit loops
  -pc                         reset all the fabric PM counters after reading them
  -P|--pm_threshold <c>=<v>   error when PM counter <c> exceeds <v> (default 0)
  -lw|--lw <width>            expected link width
  -ls|--ls <speed>            expected link speed (Gb/s per lane)
  -h|--help                   this help
  -V|--version                the version
"""
SECTION = "-" * 45


class Usage(Exception):
    pass


def parse(argv):
    o = {"dev": None, "port": None, "out": DEFAULT_OUT, "routing": False, "pc": False,
         "pm": {}, "lw": None, "ls": None, "help": False, "version": False}
    i = 0

    def value(opt):
        nonlocal i
        i += 1
        if i >= len(argv):
            raise Usage(f"Option \"{opt}\" requires an argument")
        return argv[i]

    while i < len(argv):
        a = argv[i]
        key, eq, inline = a.partition("=") if a.startswith("--") else (a, "", "")
        if key in ("-h", "--help"):
            o["help"] = True
        elif key in ("-V", "--version"):
            o["version"] = True
        elif key in ("-r", "--routing"):
            o["routing"] = True
        elif key in ("-pc", "--pc"):
            o["pc"] = True
        elif key in ("-i", "--device", "-p", "--port", "-o", "--output_path", "-lw", "--lw",
                     "-ls", "--ls", "-P", "--pm_threshold"):
            v = inline if eq else value(key)
            if key in ("-i", "--device"):
                o["dev"] = v
            elif key in ("-p", "--port"):
                if not v.isdigit() or not 1 <= int(v) <= 254:
                    raise Usage(f"Invalid port number: {v}")
                o["port"] = int(v)
            elif key in ("-o", "--output_path"):
                o["out"] = v
            elif key in ("-lw", "--lw"):
                if v.lower() not in WIDTHS:
                    raise Usage(f"Invalid link width: {v} (one of 1x, 2x, 4x, 8x, 12x)")
                o["lw"] = WIDTHS[v.lower()]
            elif key in ("-ls", "--ls"):
                if v not in SPEEDS:
                    raise Usage(f"Invalid link speed: {v} (one of {', '.join(SPEEDS)})")
                o["ls"] = SPEEDS[v]
            else:
                for item in v.split(","):
                    name, eq2, num = item.partition("=")
                    canon = PM_NAMES.get(name.strip().lower())
                    if not eq2 or canon is None:
                        raise Usage(f"Invalid PM threshold: {item} (<PM counter>=<value>)")
                    try:
                        o["pm"][canon] = int(num, 0)
                    except ValueError:
                        raise Usage(f"Invalid PM threshold value: {item}") from None
                    if o["pm"][canon] < 0:
                        raise Usage(f"Invalid PM threshold value: {item}")
        else:
            raise Usage(f"Unknown option: {a}")
        i += 1
    return o


class Report:
    """stdout and ibdiagnet2.log at once; findings counted per stage."""

    def __init__(self, log):
        self.log = log
        self.stages: list = []      # (name, warnings, errors, comment)

    def line(self, text=""):
        sys.stdout.write(text + "\n")
        self.log.write(text + "\n")

    def stage(self, name):
        self.line(SECTION)
        self.line(name)
        self.stages.append([name, 0, 0, ""])

    def step(self, what, findings):
        st = self.stages[-1]
        w = sum(1 for s, _ in findings if s == WARN)
        e = sum(1 for s, _ in findings if s == ERR)
        st[1] += w
        st[2] += e
        if e:
            self.line(f"-E- {what} finished with errors")
        elif w:
            self.line(f"-W- {what} finished with warnings")
        else:
            self.line(f"-I- {what} finished successfully")
        for sev, text in findings:
            self.line(f"-{sev}- {text}")
        self.line()

    def info(self, text):
        self.line(f"-I- {text}")

    def summary(self, outdir):
        self.line(SECTION)
        self.line("Summary")
        self.line(f"-I- {'Stage':<30}{'Warnings':<11}{'Errors':<11}Comment")
        for name, w, e, c in self.stages:
            self.line(f"-I- {name:<30}{w:<11}{e:<11}{c}".rstrip())
        self.line()
        self.line(f"-I- You can find detailed errors/warnings in: "
                  f"{os.path.join(outdir, rep.PREFIX + '.log')}")
        self.line()

    @property
    def errors(self):
        return sum(s[2] for s in self.stages)


def _pm_decode(data) -> dict:
    vals = {}
    for name, off, width, _fmt in PC_FIELDS:
        if name in ("PortSelect", "CounterSelect", "CounterSelect2"):
            continue
        v = int.from_bytes(bytes(data[off // 8:(off + width + 7) // 8]), "big")
        shift = (8 - (off + width) % 8) % 8
        vals[name] = (v >> shift) & ((1 << width) - 1)
    return vals


def _port_lid(p):
    return p.node.ports[0].base_lid if p.node.type == NODE_SWITCH else p.base_lid


def read_counters(mad, fabric, reset: bool):
    ports = [p for n in fabric.nodes for p in n.ports[1:] if p is not None and p.remoteport]
    reqs = []
    for p in ports:
        data = bytearray(64)
        data[1] = p.portnum
        reqs.append(mad.perf_request(_port_lid(p), smp.PerfAttr.PORT_COUNTERS, 0, data))
    answers = mad.rpc_many(reqs)
    pm, missing = {}, []
    for p, a in zip(ports, answers):
        if a is None or int.from_bytes(a[4:6], "big"):
            missing.append((WARN, f"PortCounters of {port_name(p)} not answered"))
            continue
        pm[p] = _pm_decode(a[64:256])
    if reset:
        reqs = []
        for p in pm:
            data = bytearray(64)
            data[1] = p.portnum
            data[2:4] = b"\xff\xff"
            data[18] = 0xFF
            reqs.append(mad.perf_request(_port_lid(p), smp.PerfAttr.PORT_COUNTERS, 0, data, METHOD_SET))
        mad.rpc_many(reqs)
    return pm, missing


def read_lfts(mad, fabric):
    sws = [n for n in fabric.nodes if n.type == NODE_SWITCH and n.switchinfo]
    reqs, index = [], []
    for n in sws:
        top = smp.SWITCH_INFO.get(n.switchinfo, "LinearFdbTop")
        for blk in range(top // 64 + 1):
            reqs.append(mad.smp_request(n.path, smp.SmpAttr.LINEAR_FWD_TABLE, blk))
            index.append((n, blk, top))
    lfts, missing = {n: bytearray(b"\xff" * (smp.SWITCH_INFO.get(n.switchinfo, "LinearFdbTop") + 1))
                     for n in sws}, []
    for (n, blk, top), a in zip(index, mad.rpc_many(reqs)):
        if a is None or int.from_bytes(a[4:6], "big") & 0x7FFF:
            missing.append((ERR, f"LFT block {blk} of switch 0x{n.guid:016x} not answered"))
            continue
        chunk = a[64:128][:max(0, top + 1 - blk * 64)]
        lfts[n][blk * 64:blk * 64 + len(chunk)] = chunk
    return lfts, missing


def read_mfts(mad, fabric):
    mfts, reqs, index = {}, [], []
    for n in fabric.nodes:
        if n.type != NODE_SWITCH or not n.switchinfo:
            continue
        si = smp.SWITCH_INFO.decode(n.switchinfo)
        top = si["MulticastFDBTop"]
        mfts[n] = {}
        if not si["McastFdbCap"] or top < 0xC000:
            continue
        for blk in range((top - 0xC000) // 32 + 1):
            for pos in range(n.numports // 16 + 1):
                reqs.append(mad.smp_request(n.path, smp.SmpAttr.MCAST_FWD_TABLE, pos << 28 | blk))
                index.append((n, blk, pos))
    for (n, blk, pos), a in zip(index, mad.rpc_many(reqs)):
        if a is None or int.from_bytes(a[4:6], "big") & 0x7FFF:
            continue
        d = a[64:128]
        for i in range(32):
            mask = int.from_bytes(d[2 * i:2 * i + 2], "big")
            for bit in range(16):
                if mask >> bit & 1:
                    mfts[n].setdefault(0xC000 + blk * 32 + i, []).append(pos * 16 + bit)
    return mfts


def _dr(portid) -> str:
    return ",".join(str(x) for x in (0,) + tuple(portid.path or ()))


def probe_unlinked(mad, fabric) -> list:
    """Switch ports that are LinkUp but were left without a peer: the
    discovery merges a node whose GUID it already knows into the first one,
    so what answers behind such a port with a known GUID is a duplicated
    node GUID; what does not answer is an unresponsive node."""
    cands = [(n, p) for n in fabric.nodes if n.type == NODE_SWITCH for p in n.ports[1:]
             if p is not None and p.pi is not None and p.remoteport is None
             and p.pi["PhysLinkState"] == smp.PhysState.LINK_UP]
    paths = [n.path.extend(p.portnum, mad.lid) for n, p in cands]
    answers = mad.rpc_many([mad.smp_request(pid, smp.SmpAttr.NODE_INFO) for pid in paths])
    out = []
    for (_n, p), pid, a in zip(cands, paths, answers):
        if a is None or int.from_bytes(a[4:6], "big") & 0x7FFF:
            out.append((WARN, f"Unresponsive node behind {port_name(p)} (DR path {_dr(pid)})"))
            continue
        guid = smp.NODE_INFO.decode(a[64:128])["Guid"]
        first = fabric.by_guid.get(guid)
        if first is not None:
            out.append((ERR, f"Duplicated node GUID 0x{guid:016x} at DR paths {_dr(first.path)} "
                             f"and {_dr(pid)}"))
    return out


def read_sms(mad, fabric):
    cands = [p for p in end_ports(fabric)
             if p.pi is not None and p.pi["CapMask"] & smp.CAP_IS_SM]
    reqs = [mad.smp_request(p.node.path, smp.SmpAttr.SM_INFO, 0) for p in cands]
    sms = []
    for p, a in zip(cands, mad.rpc_many(reqs)):
        if a is not None and not int.from_bytes(a[4:6], "big") & 0x7FFF:
            sms.append((p, smp.SM_INFO.decode(a[64:128])))
    return sms


def diagnose(mad, o, r: Report):
    outdir = o["out"]
    paths = rep.files(outdir)
    r.stage("Discovery")
    f = discover(mad)
    sws = sum(1 for n in f.nodes if n.type == NODE_SWITCH)
    r.info(f"Discovering ... {len(f.nodes)} nodes ({sws} Switches & {len(f.nodes) - sws} CA-s) discovered.")
    r.step("Discovery", [])
    r.step("Duplicated GUIDs detection", probe_unlinked(mad, f) + duplicate_guids(f))
    r.step("Duplicated Node Description detection", duplicate_node_desc(f))
    r.step("Switch Info retrieving", [(ERR, f"SwitchInfo of 0x{n.guid:016x} not answered")
                                      for n in f.nodes if n.type == NODE_SWITCH and not n.switchinfo])
    r.stage("Lids Check")
    r.step("Lids Check", lid_check(f))
    r.stage("Links Check")
    r.step("Links Check", link_check(f))
    r.stage("Subnet Manager")
    sms = read_sms(mad, f)
    r.step("SM Info retrieving", [])
    masters = [s for s in sms if s[1]["SmState"] == 3]
    found = [] if len(masters) == 1 else \
        [(ERR, "Missing master SM in the discovered fabric")] if not masters else \
        [(ERR, f"Found {len(masters)} master SMs in the fabric")]
    r.step("Subnet Manager Check", found)
    rep.write_sm(paths["sm"], sms)
    r.stage("Port Counters")
    pm, missing = read_counters(mad, f, o["pc"])
    r.step("Ports counters retrieving", missing)
    r.step("Ports counters Check", pm_check(pm, o["pm"]))
    if o["pc"]:
        r.info("Ports counters reset")
        r.line()
    rep.write_pm(paths["pm"], pm)
    r.stage("Speed / Width checks")
    r.step("Link Speed and Width Check", speed_width_check(f, o["lw"], o["ls"]))
    lfts = {}
    if o["routing"]:
        r.stage("Routing")
        lfts, missing = read_lfts(mad, f)
        r.step("Unicast FDBS Info retrieving", missing)
        mfts = read_mfts(mad, f)
        r.step("Multicast FDBS Info retrieving", [])
        rt = Routes(f, lfts)
        r.step("Unicast routing check (all CA pairs)", rt.check())
        r.info(f"Checked {rt.paths} paths; hops histogram: "
               + " ".join(f"{h}:{c}" for h, c in sorted(rt.hops_hist.items())))
        r.line()
        r.step("Credit Loops Check", rt.credit_loops())
        rep.write_fdbs(paths["fdbs"], lfts)
        rep.write_mcfdbs(paths["mcfdbs"], mfts)
    else:
        rep.write_fdbs(paths["fdbs"], {})
        rep.write_mcfdbs(paths["mcfdbs"], {})
    rep.write_lst(paths["lst"], f)
    rep.write_db_csv(paths["db_csv"], f, pm, VERSION)
    r.summary(outdir)


def main(argv, prog="ibdiagnet") -> int:
    try:
        o = parse(argv)
    except Usage as e:
        sys.stderr.write(f"-E- {e}\n")
        return 2
    if o["help"]:
        sys.stdout.write(USAGE)
        return 0
    if o["version"]:
        sys.stdout.write(f"IBDIAGNET {VERSION} (softrdma)\n")
        return 0
    # the local port: a softrdma IB device (-i names it, or the first Active one
    # when no ibsim fabric is named in the environment), else ibsim0, the fabric
    # node SIM_HOST names
    device = device_for(None if o["dev"] == SIM_CA else o["dev"], o["port"] or 0)
    if device is None and o["dev"] not in (None, SIM_CA):
        sys.stderr.write(f"-E- Device {o['dev']} not found\n")
        return 2
    try:
        mad = MadPort(device=device, ca_port=o["port"] or 0)
    except (TransportError, WireError, OSError) as e:
        sys.stderr.write(f"-E- Cannot reach the fabric: {e}\n")
        return 2
    try:
        if o["port"] is not None and o["port"] != mad.portnum:
            sys.stderr.write(f"-E- Port {o['port']} not found (the local port is {mad.portnum})\n")
            return 2
        try:
            os.makedirs(o["out"], exist_ok=True)
            log = open(os.path.join(o["out"], rep.PREFIX + ".log"), "w")
        except OSError as e:
            sys.stderr.write(f"-E- Cannot use output directory {o['out']}: {e.strerror}\n")
            return 2
        with log:
            r = Report(log)
            r.line(f"Running: {' '.join([prog] + list(argv))}")
            r.line(f"Output path: {o['out']}")
            r.line()
            try:
                diagnose(mad, o, r)
            except (TransportError, WireError) as e:
                sys.stderr.write(f"-E- Fabric access failed: {e}\n")
                return 2
            except OSError as e:
                sys.stderr.write(f"-E- Cannot write the reports: {e.strerror or e}\n")
                return 2
    finally:
        mad.close()
    sys.stdout.flush()
    return 1 if r.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
