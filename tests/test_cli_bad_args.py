"""Bad arguments get an error, never a traceback.

One sweep over every numeric option of every command softrdma ships (the
tools of ``softrdma.tools.TOOLS``, ``demo``, ``daemon``, ``fabric``,
``opensm``, the diags) with a negative, a huge and a non-numeric value:
each run must exit non-zero, quickly, with a short message and no Python
traceback.  Where a real tool accepts the value (perftest's ``-n -3`` is
just a number to it), the run goes on and fails for want of a device --
nothing autostarts (SOFTRDMA_AUTOSTART=0, a private, empty run
directory) -- which is still an error, still no traceback.

Next to the sweep, the exact messages the real tools (and argparse, for
softrdma's own commands) give for the cases users meet first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from softrdma.tools import TOOLS

VALUES = ("-5", "99999999999999999999", "x1")

PERFTEST_NUMERIC = ("-p", "-i", "-m", "-s", "-n", "-t", "-u", "-S", "-x", "-q", "-I", "-o", "-r", "-Q",
                    "-l", "-D", "-f", "-T", "-L", "-w", "-y", "-K", "-k", "--pkey_index", "--burst_size",
                    "--typical_pkt_size", "--rate_limit", "--latency_gap", "--flow_label", "--retry_count",
                    "--dlid", "--tclass", "--wait_destroy", "--flows", "--flows_burst", "--reply_every",
                    "--vlan_pcp", "--recv_post_list")
DIAG_COMMON = ("-P", "-t")

# command -> argv templates ("{}" is the value); every tool of TOOLS is here
# (test_every_tool_is_swept checks it), each with its options that take a number
CASES: dict[str, list[list[str]]] = {
    "daemon": [["--port", "{}"]],
    "demo": [[o, "{}", "--sim-only"] for o in ("-s", "-n", "--loss", "--dup", "--reorder", "--corrupt",
                                                "--pp-iters", "-m")],
    "fabric": [["serve", "--no-console", "-l", "{}"], ["gen", "-o", "OUT", "--hosts", "{}"],
               ["gen", "-o", "OUT", "--radix", "{}"], ["gen", "-o", "OUT", "--levels", "{}"],
               ["error", "sw0", "1", "{}"], ["link", "down", "sw0", "{}"]],
    "opensm": [[o, "{}"] for o in ("-p", "-s", "-d", "-D", "-l", "--max_wire_smps", "-g")],
    "ibv_devices": [],                  # no options (the real one ignores its arguments)
    "ibv_devinfo": [["-i", "{}"]],
    "ibstat": [["rxe0", "{}"]],
    "ibdump": [[o, "{}"] for o in ("-i", "-b", "-M", "-p")],
    "ibv_rc_pingpong": [[o, "{}"] for o in ("-p", "-i", "-s", "-m", "-r", "-n", "-l", "-g")],
    "ibv_ud_pingpong": [[o, "{}"] for o in ("-p", "-i", "-s", "-r", "-n", "-l", "-g")],
    "rdma": [["-b", "{}"], ["resource", "show", "qp", "lqpn", "{}"]],
    "top": [["--once", o, "{}"] for o in ("-i", "-q")],
    "ecn": [["rxe0", "roce_rp", "rpg_gd", "{}"], ["rxe0", "roce_np", "enable", "{}", "1"], ["rxe0", "traffic_class", "{}"]],
    "ecn-switch": [["rules", o, "{}"] for o in ("--senders", "--mark-rate", "--drop-rate", "--burst", "--mtu")],
    "rping": [[side, "-a", "127.0.0.1", o, "{}"] for side in ("-s", "-c") for o in ("-S", "-C", "-p")],
    "ucmatose": [[o, "{}"] for o in ("-c", "-C", "-S", "-t", "-p", "-a")],
    "udaddy": [[o, "{}"] for o in ("-c", "-C", "-S", "-t")],
    "mckey": [[o, "{}"] for o in ("-c", "-C", "-S", "-p")],
    "ib_write_bw": [[o, "{}"] for o in PERFTEST_NUMERIC],
    **{t: [[o, "{}"] for o in ("-s", "-n", "-p", "-D")]
       for t in ("ib_send_bw", "ib_read_bw", "ib_atomic_bw", "ib_send_lat", "ib_write_lat", "ib_read_lat",
                 "ib_atomic_lat")},
    "ibnetdiscover": [[o, "{}"] for o in (*DIAG_COMMON, "-o")],
    "ibhosts": [[o, "{}"] for o in DIAG_COMMON],
    "ibswitches": [[o, "{}"] for o in DIAG_COMMON],
    "ibnodes": [[o, "{}"] for o in DIAG_COMMON],
    "iblinkinfo": [[o, "{}"] for o in (*DIAG_COMMON, "-n", "-o")],
    "ibroute": [[o, "{}"] for o in DIAG_COMMON] + [["1", "{}"], ["1", "1", "{}"]],
    "ibtracert": [[o, "{}", "1", "2"] for o in (*DIAG_COMMON, "-m")] + [["{}", "2"]],
    "smpquery": [[o, "{}", "nodeinfo", "1"] for o in DIAG_COMMON] + [["nodeinfo", "{}"],
                                                                      ["portinfo", "1", "{}"]],
    "perfquery": [[o, "{}"] for o in DIAG_COMMON] + [["{}"], ["1", "{}"], ["1", "1", "{}"]],
    "sminfo": [[o, "{}"] for o in (*DIAG_COMMON, "-s", "-p", "-a")] + [["{}"]],
    "saquery": [[o, "{}"] for o in (*DIAG_COMMON, "--slid", "--dlid", "--mlid", "--smkey")],
    "ibqueryerrors": [[o, "{}"] for o in DIAG_COMMON],
    "ibping": [[o, "{}", "1"] for o in (*DIAG_COMMON, "-c", "-o")] + [["{}"]],
    "rstream": [[o, "{}"] for o in ("-B", "-i", "-I", "-C", "-S", "-k")],
    "ibdiagnet": [["-p", "{}"], ["-ls", "{}"], ["-lw", "{}"], ["-P", "port_rcv_errors={}"]],
    "mst": [],                          # no numeric options
    "mlxconfig": [["-d", "mlx5_0", "-y", "set", "NUM_OF_VFS={}"]],
    "flint": [["--make-image", "OUT", "--fw-version", "{}"]],
    "mlxfwreset": [["-d", "mlx5_0", "-l", "{}", "reset"]],
    "mlxdevm": [["port", "add", "pci/0000:5e:00.0", "flavour", "pcisf", "pfnum", "{}", "sfnum", "1"],
                ["port", "del", "pci/0000:5e:00.0/{}"]],
    "ip": [["link", "set", "eth0", "vf", "{}", "trust", "on"], ["link", "set", "eth0", "vf", "0", "vlan", "{}"]],
    "sysfs-write": [["/sys/class/infiniband/mlx5_0/device/sriov_numvfs", "{}"]],
}

#: a message users read, not a dump: usage texts of the real tools included
MAX_OUTPUT = 6000


def _env(tmp_path) -> dict:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    return {**os.environ, "SOFTRDMA_AUTOSTART": "0", "SOFTRDMA_RUN": str(run),
            # the diags and opensm: a simulator socket that does not exist
            "IBSIM_SOCKNAME": f"softrdma-bad-args-{os.getpid()}", "SIM_HOST": "127.0.0.1"}


def _softrdma(args: list[str], env: dict, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "softrdma", *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def test_every_tool_is_swept():
    assert set(TOOLS) <= set(CASES), sorted(set(TOOLS) - set(CASES))


@pytest.mark.slow
@pytest.mark.parametrize("command,template", [(c, t) for c, ts in CASES.items() for t in ts],
                         ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_bad_numeric_values(command, template, tmp_path):
    env = _env(tmp_path)
    for value in VALUES:
        argv = [command] + [value if a == "{}" else str(tmp_path / "out") if a == "OUT" else a for a in template]
        t0 = time.monotonic()
        r = _softrdma(argv, env)
        out = r.stdout + r.stderr
        what = f"softrdma {' '.join(argv)} -> {r.returncode}:\n{out}"
        assert "Traceback" not in out, what
        assert r.returncode != 0, what
        assert out.strip(), what
        assert len(out) < MAX_OUTPUT, what
        assert time.monotonic() - t0 < 20, what


# -- the exact messages


def test_version_and_no_arguments(tmp_path):
    from softrdma import __version__
    env = _env(tmp_path)
    r = _softrdma(["--version"], env)
    assert (r.returncode, r.stdout.strip()) == (0, f"softrdma {__version__}")
    r = _softrdma([], env)
    assert r.returncode == 2
    assert r.stderr.startswith("usage: softrdma"), r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("argv,message", [
    (["daemon", "--port", "99999"], "softrdma daemon: error: argument --port: invalid port: 99999 (0-65535)"),
    (["demo", "-s", "-5"], "softrdma demo: error: argument -s/--size: -5 is out of range (1-16777216)"),
    (["demo", "-n", "-3"], "softrdma demo: error: argument -n/--iters: -3 is out of range (1-100000)"),
    (["demo", "--loss", "150%"], "softrdma demo: error: argument --loss: invalid rate: 150% (0-100%)"),
    (["demo", "--loss", "-1"], "softrdma demo: error: argument --loss: invalid rate: -1 (0-100%)"),
])
def test_own_commands_refuse_in_one_line(argv, message, tmp_path):
    t0 = time.monotonic()
    r = _softrdma(argv, _env(tmp_path))
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr == message + "\n"
    assert time.monotonic() - t0 < 20


def test_rdma_unknown_object(tmp_path):
    """iproute2's rd_exec_cmd: "Unknown object 'bogus'." -- and, as rdma
    does, exit status 0 (rd_exec_cmd returns 0 after the message)."""
    from daemon_helpers import daemon_in_shm
    with daemon_in_shm("badargs") as d:
        r = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "bogus"], env=d.env, capture_output=True,
                           text=True, timeout=30)
    assert r.stderr == "Unknown object 'bogus'.\n"
    assert r.returncode == 0
