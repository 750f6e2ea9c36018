"""softrdma's SM bound to a host's InfiniBand device port (``opensm -g
<port GUID>``, no ibsim environment): its SMPs leave from the device's
QP0 and the other SMs' SMInfo and the SA requests come to it through the
device's issm umad file.  A fabric with no SM attached to it as an ibsim
client: the SMs on the hosts sweep it, and of two the higher priority is
master."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from ib_helpers import IbHosts, link
from ibfabric_helpers import NET_2SW
from sm_helpers import have_ibsim
from wait_helpers import stop, wait_for


def tool(d, *args):
    r = subprocess.run([sys.executable, "-m", "softrdma", *args], env=d.env, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout, r.stderr


def port_guid(d) -> str:
    rc, out, err = tool(d, "ibstat", "-p")
    assert rc == 0, err
    return out.split()[0]


def start_sm(hosts, tmp, h: str, *args, tag: str | None = None, **env_extra):
    """``softrdma opensm ARGS`` on host ``h`` (its daemon's run directory, no ibsim environment); its log."""
    d = hosts.daemons[h]
    tag = tag or h
    log = tmp / f"osm-{tag}.log"
    env = {k: v for k, v in d.env.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env.update(OSM_CACHE_DIR=str(tmp / tag), OSM_TMP_DIR=str(tmp / tag), **env_extra)
    p = subprocess.Popen([sys.executable, "-m", "softrdma", "opensm", "-s", "1", "-f", str(log), *args], env=env,
                         stdout=open(tmp / f"sm-{tag}.out", "w"), stderr=subprocess.STDOUT)
    hosts.fabric.procs.append(p)
    return p, log


def sminfo(d):
    rc, out, err = tool(d, "sminfo", "-C", "mlx5_0")
    return out if rc == 0 else ""


@pytest.fixture
def hosts(tmp_path, shm_path):
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    h = IbHosts(tmp_path, shm_path, NET_2SW, ("h1", "h2", "h4"), sm=None)
    yield h
    h.close()


@pytest.mark.slow
def test_e2e_opensm_bound_to_a_host_port_sweeps_the_subnet(hosts, tmp_path):
    d1 = hosts.daemons["h1"]
    assert link(d1.run_dir, "mlx5_0")["port_attr"]["state"] == 2          # Initialize: no SM yet
    guid = port_guid(d1)
    sm, log = start_sm(hosts, tmp_path, "h1", "-g", guid)
    wait_for(lambda: log.exists() and "SUBNET UP" in log.read_text(), 90, "SUBNET UP", proc=sm)
    lids = {h: hosts.fabric.wait_active(d.run_dir) for h, d in hosts.daemons.items()}
    assert len(set(lids.values())) == 3 and 0 not in lids.values()
    for h, d in hosts.daemons.items():
        rc, out, err = tool(d, "ibstat", "mlx5_0", "1")
        assert rc == 0 and "State: Active\n" in out and f"Base lid: {lids[h]}\n" in out, out + err
        assert f"SM lid: {lids['h1']}\n" in out, out
    # the SM's port holds IsSM; sminfo from another host finds it master
    assert link(d1.run_dir, "mlx5_0")["ib"]["umad_files"] == 1
    out = wait_for(lambda: sminfo(hosts.daemons["h4"]), 30, "sminfo")
    assert re.match(rf"sminfo: sm lid {lids['h1']} sm guid 0x{int(guid, 16):x}, activity count \d+ priority 0 "
                    r"state 3 SMINFO_MASTER\n", out), out
    # the SA answers through the device's QP1: a PathRecord by GUID (ibping -G) resolves
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", "ibping", "-S", "-C", "mlx5_0"],
                           env=hosts.daemons["h2"].env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: link(hosts.daemons["h2"].run_dir, "mlx5_0")["ib"]["umad_files"] == 1, 60, "ibping -S",
                 proc=srv)
        rc, out, err = tool(hosts.daemons["h4"], "ibping", "-C", "mlx5_0", "-c", "2", "-f", "-G",
                            port_guid(hosts.daemons["h2"]))
        assert rc == 0 and f"(Lid {lids['h2']}) ibping statistics ---\n2 packets transmitted, 2 received" in out, \
            out + err
    finally:
        stop(srv)
    stop(sm)
    assert sm.returncode == 0
    wait_for(lambda: link(d1.run_dir, "mlx5_0")["ib"]["umad_files"] == 0, 30, "the issm file closed")


@pytest.mark.slow
def test_e2e_two_sms_on_two_hosts_the_higher_priority_is_master(hosts, tmp_path):
    guid1 = port_guid(hosts.daemons["h1"])
    high, log_high = start_sm(hosts, tmp_path, "h1", "-g", guid1, "-p", "15")
    wait_for(lambda: log_high.exists() and "SUBNET UP" in log_high.read_text(), 90, "SUBNET UP", proc=high)
    # the standby polls every second and takes over after two misses (opensm's
    # defaults, 10 s and 4, would make the takeover below take 50 s)
    conf = tmp_path / "poll.conf"
    conf.write_text("sminfo_polling_timeout 1000\npolling_retry_number 2\n")
    low, log_low = start_sm(hosts, tmp_path, "h4", "-g", port_guid(hosts.daemons["h4"]), "-p", "5",
                            "-F", str(conf))
    wait_for(lambda: log_low.exists() and "standby: master SM" in log_low.read_text(), 90, "h4's SM standby",
             proc=low)
    assert f"standby: master SM 0x{int(guid1, 16):016x} priority 15\n" in log_low.read_text()
    lid1 = hosts.fabric.wait_active(hosts.daemons["h1"].run_dir)
    want = re.compile(rf"sminfo: sm lid {lid1} sm guid 0x{int(guid1, 16):x}, activity count \d+ priority 15 "
                      r"state 3 SMINFO_MASTER\n")
    assert wait_for(lambda: want.match(sminfo(hosts.daemons["h2"])), 30, "sminfo")
    # the standby's SMInfo as seen from another host: priority 5, STANDBY
    lid4 = hosts.fabric.wait_active(hosts.daemons["h4"].run_dir)
    rc, out, err = tool(hosts.daemons["h2"], "sminfo", "-C", "mlx5_0", str(lid4))
    assert rc == 0 and re.match(rf"sminfo: sm lid {lid4} sm guid 0x[0-9a-f]+, activity count \d+ priority 5 "
                                r"state 2 SMINFO_STANDBY\n", out), out + err
    for d in hosts.daemons.values():
        assert link(d.run_dir, "mlx5_0")["port_attr"]["sm_lid"] == lid1
    # the master goes: the standby takes over after its polls fail
    stop(high)
    want4 = re.compile(rf"sminfo: sm lid {lid4} sm guid 0x[0-9a-f]+, activity count \d+ priority 5 "
                       r"state 3 SMINFO_MASTER\n")
    wait_for(lambda: want4.match(sminfo(hosts.daemons["h2"])), 90, "h4's SM master", proc=low)


# two subnets: NET_2SW without the link between its switches (sw1 with h1, h2; sw2 with h3, h4)
NET_TWO_SUBNETS = NET_2SW.replace('[3] "sw2"[3]\n', "").replace('[3] "sw1"[3]\n', "")


@pytest.mark.slow
def test_e2e_one_sm_per_port_guid_on_two_subnets(tmp_path, shm_path):
    """The per-port opensm script: a host with a port on each of two subnets
    (mlx5_0 on h1, mlx5_1 on h3) starts one SM per port GUID of ``ibstat
    -p``; each subnet comes up with its own SM."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    hosts = IbHosts(tmp_path, shm_path, NET_TWO_SUBNETS, ("h1", "h2", "h4"), sm=None)
    try:
        d = hosts.daemons["h1"]
        hosts.fabric.attach(d.run_dir, "h3", name="mlx5_1")
        guids = [port_guid_of(d, ca) for ca in ("mlx5_0", "mlx5_1")]
        sms = [start_sm(hosts, tmp_path, "h1", "-g", g, tag=g) for g in guids]
        for sm, log in sms:
            wait_for(lambda: log.exists() and "SUBNET UP" in log.read_text(), 90, "SUBNET UP", proc=sm)
        lid = {ca: hosts.fabric.wait_active(d.run_dir, ca) for ca in ("mlx5_0", "mlx5_1")}
        # each subnet's ports have their own SM: the host's port on that subnet
        for h, ca, master in (("h1", "mlx5_0", 0), ("h2", "mlx5_0", 0), ("h1", "mlx5_1", 1), ("h4", "mlx5_0", 1)):
            run_dir = hosts.daemons[h].run_dir
            hosts.fabric.wait_active(run_dir, ca)
            sm_lid = lid[("mlx5_0", "mlx5_1")[master]]
            wait_for(lambda: link(run_dir, ca)["port_attr"]["sm_lid"] == sm_lid, 60, f"{h} {ca}'s SM lid")
        for h, master in (("h2", 0), ("h4", 1)):
            out = wait_for(lambda: sminfo(hosts.daemons[h]), 30, "sminfo")
            assert f" sm guid 0x{int(guids[master], 16):x}, " in out and "SMINFO_MASTER" in out, out
    finally:
        hosts.close()


def port_guid_of(d, ca: str) -> str:
    rc, out, err = tool(d, "ibstat", "-p", ca)
    assert rc == 0 and len(out.split()) == 1, out + err
    return out.split()[0]


def test_opensm_g_with_no_such_port_fails(hosts, tmp_path):
    sm, log = start_sm(hosts, tmp_path, "h1", "-g", "0x1234", "-o")
    assert sm.wait(60) == 1
    assert "opensm: no InfiniBand port with GUID 0x0000000000001234 on this host" in \
        (tmp_path / "sm-h1.out").read_text()


def test_opensm_g_of_a_device_port_binds_to_it_with_the_ibsim_environment_set(hosts, tmp_path):
    """A port GUID of one of the host's devices wins over the ibsim
    environment: the SM binds to that port (a sweep, ``-o``, and out)."""
    sm, log = start_sm(hosts, tmp_path, "h2", "-o", "-g", port_guid(hosts.daemons["h2"]),
                       IBSIM_SOCKNAME=hosts.fabric.base, SIM_HOST="sw1")
    assert sm.wait(90) == 0, (tmp_path / "sm-h2.out").read_text()
    text = log.read_text()
    assert "bound to mlx5_0 port 1 (an issm umad file)" in text and "SUBNET UP" in text, text
    hosts.fabric.wait_active(hosts.daemons["h4"].run_dir)
