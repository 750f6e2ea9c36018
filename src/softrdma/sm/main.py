"""``softrdma opensm``: the subnet manager's command line, with opensm's main options.

Attaches to an ibsim-protocol fabric (the real ibsim or ``softrdma fabric
serve``; see ``softrdma.mgmt.umad``), runs heavy sweeps (``sweep``) and prints/logs what
opensm does ("Entering DISCOVERING state", "Entering MASTER state",
"SUBNET UP").  ``-o`` sweeps once and exits; otherwise it stays resident,
light-sweeping every ``-s`` seconds, heavy-sweeping on a change or a trap,
electing a master with other SMs and answering SMInfo and SA queries
(``run.SmLoop``).  Options opensm has
but this SM does not implement are refused with a message, never ignored.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ..mgmt.devport import DevicePort, ib_links, port_by_guid
from ..mgmt.umad import IbsimPort, TransportError
from . import log as L
from .guid2lid import Guid2Lid
from .routing import ENGINES

VERSION = "OpenSM 3.3.23 (softrdma)"

#: opensm.conf keys this SM reads (-F) and writes (-c), with opensm's defaults
CONF_KEYS = {
    "guid": "0x0000000000000000",
    "sm_priority": "0",
    "lmc": "0",
    "lmc_esp0": "FALSE",
    "sweep_interval": "10",
    "max_wire_smps": "4",
    "routing_engine": "(null)",
    "root_guid_file": "(null)",
    "log_flags": "0x03",
    "log_file": "/var/log/opensm.log",
    "log_max_size": "0",
    "log_prefix": "(null)",
    "dump_files_dir": "/var/log",
    "force_log_flush": "FALSE",
    "sm_key": "0x0000000000000001",
    "sminfo_polling_timeout": "10000",
    "polling_retry_number": "4",
    "partition_config_file": "/etc/opensm/partitions.conf",
    "no_partition_enforcement": "FALSE",
    "part_enforce": "both",
    "allow_both_pkeys": "FALSE",
    "keep_pkey_indexes": "TRUE",
    "qos": "FALSE",
    "use_optimized_slvl": "FALSE",
    "qos_policy_file": "/etc/opensm/qos-policy.conf",
    "virt_enabled": "0",                # NVIDIA opensm's: 0 ignore, 1 disable, 2 enable (sm.virt)
    **{f"qos{p}_{k}": v for p in ("", "_ca", "_sw0", "_swe", "_rtr")
       for k, v in (("max_vls", "0"), ("high_limit", "-1"), ("vlarb_high", "(null)"), ("vlarb_low", "(null)"),
                    ("sl2vl", "(null)"))},
}


class UsageError(Exception):
    pass


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None


def _bool(text: str, key: str) -> bool:
    # opensm's opts_parse_boolean: TRUE is "TRUE" (any case), everything else FALSE
    return text.strip() == "TRUE"


def build_parser(prog: str = "opensm") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="softrdma's subnet manager, opensm's options "
                                "(runs against an ibsim-protocol fabric: ibsim or softrdma fabric serve)")
    p.add_argument("-g", "--guid", type=_int, help="port GUID to bind to: a port of this host's IB devices (ibstat -p), or with ibsim the attached node's port")
    p.add_argument("-p", "--priority", type=_int, default=None, help="SM priority 0..15")
    p.add_argument("-R", "--routing_engine", help="routing engine: minhop, updn or ftree")
    p.add_argument("-a", "--root_guid_file", help="root switch GUIDs (updn, ftree)")
    p.add_argument("-u", "--cn_guid_file", help="compute node GUIDs (ftree): not supported")
    p.add_argument("-o", "--once", action="store_true", help="one heavy sweep, then exit")
    p.add_argument("-s", "--sweep", type=_int, default=None, help="sweep interval in seconds (0: none)")
    p.add_argument("-f", "--log_file", help="log file ('-' for stdout)")
    p.add_argument("-e", "--erase_log_file", action="store_true", help="truncate the log file first")
    p.add_argument("-L", "--log_limit", type=_int, default=None,
                   help="log file size limit in MB: truncated on reaching it (0: none)")
    p.add_argument("--log_prefix", help="prefix to the log's messages")
    p.add_argument("-B", "--daemon", action="store_true", help="run in the background")
    p.add_argument("-J", "--pidfile", help="with -B: the file the daemon's process ID is written to")
    p.add_argument("-d", "--debug", type=_int, action="append", default=[],
                   help="debug: 0 none, 1 ignore other SMs, 2 force log flushing")
    p.add_argument("-D", "--log_flags", type=_int, default=None, help="log flags (0x40: routing dumps)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log (-v: 0x07, -vv: 0x0f)")
    p.add_argument("-V", action="store_true", help="maximum log (0xff) and flushing")
    p.add_argument("-F", "--config", help="opensm.conf to read")
    p.add_argument("-c", "--create-config", metavar="FILE", help="write the configuration and exit")
    p.add_argument("-l", "--lmc", type=_int, default=None,
                   help="LMC 0..7: 2^LMC LIDs per CA port (switch port 0: one, unless lmc_esp0)")
    p.add_argument("--dump_files_dir", help="where -D 0x40 dumps go")
    p.add_argument("-P", "--Pconfig", help="partition configuration file (default /etc/opensm/partitions.conf)")
    p.add_argument("-N", "--no_part_enforce", action="store_true",
                   help="no partition enforcement on switch ports (deprecated: --part_enforce off)")
    p.add_argument("-Z", "--part_enforce", help="partition enforcement on switch ports: both, in, out or off")
    p.add_argument("-W", "--allow_both_pkeys", action="store_true",
                   help="a port may be a full and a limited member of one partition")
    p.add_argument("-Q", "--qos", action="store_true", help="QoS: program SL2VL and VLArb tables")
    p.add_argument("-Y", "--qos_policy_file", help="QoS policy file (default /etc/opensm/qos-policy.conf)")
    p.add_argument("--max_wire_smps", type=_int, default=None, help="SMPs in flight (default 32)")
    p.add_argument("--version", action="version", version=VERSION)
    return p


def read_config(path: str) -> dict[str, str]:
    conf = {}
    try:
        text = open(path).read()
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror}") from None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, val = line.partition(" ")
        val = val.strip()
        if key not in CONF_KEYS:
            raise UsageError(f"{path}:{n}: unsupported option {key!r} (supported: {', '.join(CONF_KEYS)})")
        conf[key] = val
    return conf


def write_config(path: str, conf: dict[str, str]) -> None:
    with open(path, "w") as f:
        f.write("#\n# DEVICE ATTRIBUTES OPTIONS\n# (softrdma opensm: the options it implements)\n#\n")
        for k, v in conf.items():
            f.write(f"{k} {v}\n\n")


def settings(a: argparse.Namespace) -> dict:
    conf = dict(CONF_KEYS)
    if a.config:
        conf.update(read_config(a.config))

    def pick(cli, key):
        return cli if cli is not None else conf[key]
    s = {
        "guid": a.guid if a.guid is not None else _int(conf["guid"]),
        "priority": pick(a.priority, "sm_priority"),
        "lmc": pick(a.lmc, "lmc"),
        "lmc_esp0": _bool(conf["lmc_esp0"], "lmc_esp0"),
        "sweep": pick(a.sweep, "sweep_interval"),
        "wire": a.max_wire_smps if a.max_wire_smps is not None else 32,
        "engine": a.routing_engine or (None if conf["routing_engine"] == "(null)" else conf["routing_engine"]),
        "roots": a.root_guid_file or (None if conf["root_guid_file"] == "(null)" else conf["root_guid_file"]),
        "flags": a.log_flags if a.log_flags is not None else _int(conf["log_flags"]),
        "log_file": a.log_file or conf["log_file"],
        "log_max_size": a.log_limit if a.log_limit is not None else _int(conf["log_max_size"]),
        "log_prefix": a.log_prefix if a.log_prefix is not None else
        (None if conf["log_prefix"] == "(null)" else conf["log_prefix"]),
        "dump_dir": a.dump_files_dir or os.environ.get("OSM_TMP_DIR") or conf["dump_files_dir"],
        "sm_key": _int(conf["sm_key"]),
        "poll_interval": _int(conf["sminfo_polling_timeout"]) / 1000.0,
        "poll_retries": _int(conf["polling_retry_number"]),
        "debug": tuple(a.debug),
        "partition_config_file": a.Pconfig or conf["partition_config_file"],
        "allow_both_pkeys": a.allow_both_pkeys or _bool(conf["allow_both_pkeys"], "allow_both_pkeys"),
        "part_enforce": conf["part_enforce"],
        "virt_enabled": _int(conf["virt_enabled"]),
    }
    if a.part_enforce is not None:
        if a.part_enforce in ("both", "in", "out", "off"):
            s["part_enforce"] = a.part_enforce
        else:
            print(f"-part_enforce {a.part_enforce} option not understood")
    if a.no_part_enforce or _bool(conf["no_partition_enforcement"], "no_partition_enforcement"):
        s["part_enforce"] = "off"
    elif s["part_enforce"] not in ("both", "in", "out", "off"):
        # osm_subn_verify_config
        print(f" Invalid Cached Option Value:part_enforce = {s['part_enforce']}:Using Default:both")
        s["part_enforce"] = "both"
    s["qos"] = a.qos or _bool(conf["qos"], "qos")
    s["qos_policy_file"] = a.qos_policy_file or conf["qos_policy_file"]
    s["qos_options"] = _qos_options(conf)
    s["keep_pkey_indexes"] = _bool(conf["keep_pkey_indexes"], "keep_pkey_indexes")
    s["use_optimized_slvl"] = _bool(conf["use_optimized_slvl"], "use_optimized_slvl")
    for k in ("priority", "lmc", "sweep"):
        s[k] = int(s[k], 0) if isinstance(s[k], str) else s[k]
    if a.V:
        s["flags"] = 0xFF
    elif a.verbose:
        s["flags"] |= 0x04 if a.verbose == 1 else 0x0C
    eng = (s["engine"] or "minhop").split(",")
    if len(eng) > 1:
        raise UsageError(f"routing engine chains ({s['engine']}) are not supported: give one engine")
    if eng[0] not in ENGINES:
        raise UsageError(f"unsupported routing engine {eng[0]!r} (supported: {', '.join(ENGINES)})")
    s["engine"] = eng[0]
    if not 0 <= s["priority"] <= 15:
        raise UsageError("SM priority must be 0..15")
    if a.lmc is not None and not 0 <= a.lmc <= 7:
        raise UsageError("LMC must be 7 or less.")
    if not 0 <= s["lmc"] <= 7:
        # osm_subn_verify_config: a bad cached value falls back to the default
        print(f" Invalid Cached Option Value:lmc = {s['lmc']}:Using Default:0")
        s["lmc"] = 0
    if a.cn_guid_file:
        raise UsageError("-u/--cn_guid_file is not supported (ftree treats every CA as a compute node)")
    for d in a.debug:
        if d not in (0, 1, 2):
            raise UsageError(f"-d {d} is not supported (0, 1 and 2 are)")
    if s["sweep"] < 0:
        raise UsageError("sweep interval must be >= 0")
    if s["wire"] < 1:
        raise UsageError("max_wire_smps must be >= 1")
    if not 0 <= s["log_max_size"] < 1 << 32:
        raise UsageError("log file size limit must be 0..4294967295 MB")
    return s


def _qos_options(conf: dict[str, str]) -> dict:
    """opensm.conf's QoS keys: {"" (qos_), "ca_", "sw0_", "swe_", "rtr_": QosOptions}."""
    from .qos import QosOptions, verify
    out = {}
    for prefix in ("", "ca_", "sw0_", "swe_", "rtr_"):
        key = "qos_" + prefix

        def text(k):
            v = conf[key + k]
            return None if v == "(null)" else v
        try:
            out[prefix] = QosOptions(int(conf[key + "max_vls"], 0), int(conf[key + "high_limit"], 0),
                                     text("vlarb_high"), text("vlarb_low"), text("sl2vl"))
        except ValueError as e:
            raise UsageError(f"bad QoS option value: {e}") from None
    verify(out, print)
    return out


def read_roots(path: str | None) -> set[int]:
    if not path:
        return set()
    try:
        text = open(path).read()
    except OSError as e:
        raise UsageError(f"cannot read root GUID file {path}: {e.strerror}") from None
    roots = set()
    for line in text.split("\n"):
        line = line.split("#")[0].strip()
        if line:
            try:
                roots.add(int(line, 16))
            except ValueError:
                raise UsageError(f"{path}: poorly formatted GUID {line!r}") from None
    return roots


def _daemonize(pidfile: str | None = None) -> None:
    """opensm's daemonize(): fork, setsid, fork; the pid file (``-J``)
    written by the daemon; standard I/O to /dev/null."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    if pidfile:
        try:
            with open(pidfile, "w") as f:
                f.write(f"{os.getpid()}\n")
        except OSError as e:
            print(f"fopen: {e.strerror}", file=sys.stderr)
            os._exit(1)
    fd = os.open(os.devnull, os.O_RDWR)
    for i in (0, 1, 2):
        os.dup2(fd, i)


def run(s: dict, log: L.Log, once: bool, out=sys.stdout) -> int:
    from .run import SmLoop
    cache = os.environ.get("OSM_CACHE_DIR", "/var/cache/opensm")
    g2l_path = os.path.join(cache, "guid2lid")
    try:
        g2l = Guid2Lid.loads(open(g2l_path).read())
    except OSError:
        g2l = Guid2Lid()
    roots = s["root_set"] if "root_set" in s else read_roots(s["roots"])
    try:
        port = open_port(s["guid"])
    except TransportError as e:
        log.error(f"ERR 3A0F: {e}")
        print(f"opensm: {e}", file=sys.stderr)
        return 1
    if isinstance(port, DevicePort):
        log.info(f"{VERSION}: bound to {port.name} port {port.port_num} (an issm umad file)")
    else:
        log.info(f"{VERSION}: attached to ibsim as client {port.client} at node \"{port.attached}\"")
    loop = SmLoop(s, log, out, port, g2l, g2l_path, roots, sa_factory=_sa_factory())

    def on_signal(signum, frame):
        loop.stop = True
    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return loop.run(once)
    except TransportError as e:
        log.error(f"ERR 3A11: {e}")
        print(f"opensm: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        port.close()


# what the SM takes from its port: SMPs (SMInfo, traps) and SA requests
SM_CLASSES = (0x01, 0x81, 0x03)


def open_port(guid: int):
    """The SM's port: with ``-g GUID`` naming a port of an IB device of this
    host's softrdmad (``ibstat -p``), that port -- an issm umad file, its
    SMPs through the device's QP0 -- else, and with the ibsim environment
    set, an ibsim client (``SIM_HOST``'s node)."""
    sim = bool(os.environ.get("IBSIM_SOCKNAME") or os.environ.get("IBSIM_SERVER_NAME"))
    if guid:
        found = port_by_guid(guid)
        if found is None and not sim:
            raise TransportError(f"no InfiniBand port with GUID 0x{guid:016x} on this host (ibstat -p lists them)")
    else:
        # no -g: the first IB port of the host, as opensm takes the first port it finds
        links = [] if sim else ib_links()
        found = (links[0]["ifname"], links[0]["port"]) if links else None
    if found is None:
        return IbsimPort(set_issm=False)       # IsSM once the SM knows its port GUID (SmLoop.run)
    return DevicePort(found[0], found[1], classes=SM_CLASSES, issm=True)


def _sa_factory():
    try:
        from .sa import SubnetAdmin
    except ImportError:
        return None
    return SubnetAdmin


def main(argv: list[str] | None = None, prog: str = "opensm") -> int:
    parser = build_parser(prog)
    a = parser.parse_args(argv)
    try:
        s = settings(a)
        s["root_set"] = read_roots(s["roots"])
    except UsageError as e:
        parser.error(str(e))
    if a.create_config:
        conf = dict(CONF_KEYS, guid="0x%016x" % s["guid"], sm_priority=str(s["priority"]),
                    lmc=str(s["lmc"]), lmc_esp0="TRUE" if s["lmc_esp0"] else "FALSE", sweep_interval=str(s["sweep"]), max_wire_smps=str(s["wire"]),
                    routing_engine=s["engine"], root_guid_file=s["roots"] or "(null)",
                    log_flags="0x%02x" % s["flags"], log_file=s["log_file"], dump_files_dir=s["dump_dir"],
                    log_max_size=str(s["log_max_size"]), log_prefix=s["log_prefix"] or "(null)",
                    sminfo_polling_timeout=str(int(s["poll_interval"] * 1000)),
                    polling_retry_number=str(s["poll_retries"]), sm_key="0x%016x" % s["sm_key"],
                    partition_config_file=s["partition_config_file"],
                    no_partition_enforcement="TRUE" if s["part_enforce"] == "off" else "FALSE",
                    part_enforce=s["part_enforce"],
                    allow_both_pkeys="TRUE" if s["allow_both_pkeys"] else "FALSE",
                    keep_pkey_indexes="TRUE" if s["keep_pkey_indexes"] else "FALSE",
                    use_optimized_slvl="TRUE" if s["use_optimized_slvl"] else "FALSE",
                    qos="TRUE" if s["qos"] else "FALSE", qos_policy_file=s["qos_policy_file"],
                    **{f"qos_{p}{k}": str(getattr(o, k)) if k in ("max_vls", "high_limit") else
                       getattr(o, k) or "(null)" for p, o in s["qos_options"].items()
                       for k in ("max_vls", "high_limit", "vlarb_high", "vlarb_low", "sl2vl")})
        write_config(a.create_config, conf)
        print(f"opensm: configuration written to {a.create_config}")
        return 0
    print("-------------------------------------------------\n" + VERSION +
          f"\nCommand Line Arguments:\n Log File: {s['log_file']}\n"
          "-------------------------------------------------", flush=True)
    try:
        log = L.Log(s["log_file"], s["flags"], append=not a.erase_log_file, prefix=s["log_prefix"],
                    max_size=s["log_max_size"] << 20)
    except OSError as e:
        parser.error(f"cannot open log file {s['log_file']}: {e.strerror}")
    if s["log_max_size"]:
        print(f" Log file max size is {s['log_max_size']} MBytes")
    if a.daemon:
        _daemonize(a.pidfile)
    try:
        return run(s, log, a.once)
    except UsageError as e:
        print(f"opensm: {e}", file=sys.stderr)
        return 2
    finally:
        log.close()
        if a.daemon and a.pidfile:
            try:
                os.unlink(a.pidfile)          # opensm's remove_pidfile at exit
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main())
