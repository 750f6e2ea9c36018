"""mst, mlxconfig, flint and mlxfwreset against a daemon's ConnectX-like
device: their output in the formats docs/formats/{mst,mlxconfig,flint}.md
describe, the NV store's next-boot rule (a set applies at a firmware reset
or a daemon restart, not at once), burns of good and corrupt images."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from daemon_helpers import RunningDaemon
from shm_helpers import shm_dir

MST = "/dev/mst/mt4119_pciconf0"


@pytest.fixture(scope="module")
def run_dir():
    run = shm_dir(f"softrdma-fwtools-{os.getpid()}")
    os.makedirs(run, exist_ok=True)
    yield run
    shutil.rmtree(run, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(run_dir):
    d = RunningDaemon(run_dir, devices=("mlx5_0:lo",))
    yield d
    d.stop()


def tool(run_dir, *argv: str, input: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "SOFTRDMA_RUN": run_dir, "SOFTRDMA_AUTOSTART": "0"}
    return subprocess.run([sys.executable, "-m", "softrdma", *argv], env=env, capture_output=True, text=True,
                          input=input, timeout=60)


def ok(run_dir, *argv, input: str = "") -> str:
    r = tool(run_dir, *argv, input=input)
    assert r.returncode == 0, (argv, r.stdout, r.stderr)
    return r.stdout


def config_rows(text: str) -> dict[str, list[str]]:
    """The Configurations block: NAME -> its columns (and "*" as the first
    column of a starred -e row)."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^([ *]) {8}([A-Z0-9_]+) +(.*?)\s*$", line)
        if m:
            rows[m[2]] = ([m[1]] if m[1] == "*" else []) + m[3].split()
    return rows


def test_mst_start_status_stop(daemon, run_dir):
    r = tool(run_dir, "mst", "status")
    assert r.returncode == 1
    assert "MST PCI configuration module is not loaded" in r.stdout
    assert "You may need to run 'mst start' to load MST modules." in r.stdout
    out = ok(run_dir, "mst", "start")
    assert out.splitlines()[0] == "Starting MST (Mellanox Software Tools) driver set"
    assert "Loading MST PCI configuration module - Success" in out
    out = ok(run_dir, "mst", "status")
    assert out.startswith("MST modules:\n------------\n    MST PCI module is not loaded\n"
                          "    MST PCI configuration module loaded\n")
    assert re.search(r"^/dev/mst/mt4119_pciconf0 +- PCI configuration cycles access\.\n"
                     r" {35}domain:bus:dev\.fn=0000:5e:00\.0 addr\.reg=88 data\.reg=92 cr_bar\.gw_offset=-1\n"
                     r" {35}Chip revision is: 00$", out, re.M), out
    out = ok(run_dir, "mst", "status", "-v")
    header = next(line for line in out.splitlines() if line.startswith("DEVICE_TYPE"))
    assert header.split() == ["DEVICE_TYPE", "MST", "PCI", "RDMA", "NET", "NUMA"]
    assert "Unloading MST PCI configuration module - Success" in ok(run_dir, "mst", "stop")
    r = tool(run_dir, "mlxconfig", "-d", MST, "q")
    assert r.returncode != 0 and f"-E- Failed to open device: {MST}, No such file or directory" in r.stderr
    ok(run_dir, "mst", "start")


def test_mlxconfig_query_format(daemon, run_dir):
    out = ok(run_dir, "mlxconfig", "-d", MST, "q")
    assert out.startswith("\nDevice #1:\n----------\n\nDevice type:    ConnectX5       \n"
                          "Name:           MCX556A-ECA_Ax  \nDescription:    ConnectX-5 VPI adapter card;")
    assert f"\nDevice:         {MST}" in out
    assert re.search(r"^Configurations: +Next Boot$", out, re.M)
    assert config_rows(out) == {"NUM_OF_VFS": ["0"], "SRIOV_EN": ["False(0)"], "LINK_TYPE_P1": ["ETH(2)"],
                                "LINK_TYPE_P2": ["ETH(2)"], "PF_TOTAL_SF": ["0"],
                                "RDMA_RESOURCE_PROFILE": ["PF_HEAVY(0)"]}
    # one parameter, by its name; the bus address and the RDMA name open the same device
    assert config_rows(ok(run_dir, "mlxconfig", "-d", "5e:00.0", "q", "SRIOV_EN")) == {"SRIOV_EN": ["False(0)"]}
    assert "Device:         mlx5_0" in ok(run_dir, "mlxconfig", "-d", "mlx5_0", "query")
    r = tool(run_dir, "mlxconfig", "-d", MST, "q", "NUM_VFS")
    assert r.returncode == 1 and "-E- The Device doesn't support NUM_VFS parameter" in r.stderr


def test_set_waits_for_the_next_boot(daemon, run_dir):
    # answered "n": nothing stored
    r = tool(run_dir, "mlxconfig", "-d", MST, "set", "SRIOV_EN=1", input="n\n")
    assert r.returncode == 1 and "Apply new Configuration? (y/n) [n] : " in r.stdout
    assert config_rows(ok(run_dir, "mlxconfig", "-d", MST, "q"))["SRIOV_EN"] == ["False(0)"]
    out = ok(run_dir, "mlxconfig", "-d", MST, "set", "SRIOV_EN=1", "NUM_OF_VFS=4", input="y\n")
    assert re.search(r"^Configurations: +Next Boot +New$", out, re.M)
    assert config_rows(out) == {"SRIOV_EN": ["False(0)", "True(1)"], "NUM_OF_VFS": ["0", "4"]}
    assert out.endswith("Applying... Done!\n-I- Please reboot machine to load new configurations.\n")
    rows = config_rows(ok(run_dir, "mlxconfig", "-d", MST, "-e", "q"))
    assert rows["SRIOV_EN"] == ["*", "False(0)", "False(0)", "True(1)"]
    assert rows["NUM_OF_VFS"] == ["*", "0", "0", "4"]
    assert rows["LINK_TYPE_P1"] == ["ETH(2)", "ETH(2)", "ETH(2)"]
    # not applied yet: no SR-IOV capability
    dev = os.path.join(run_dir, "sys", "class", "infiniband", "mlx5_0", "device")
    assert not os.path.exists(f"{dev}/sriov_totalvfs")
    # the store is the run directory's, per device
    with open(os.path.join(run_dir, "nvconfig", "mlx5_0.json")) as f:
        assert json.load(f)["next"] == {"NUM_OF_VFS": 4, "SRIOV_EN": 1}
    out = ok(run_dir, "mlxfwreset", "-d", MST, "-y", "reset")
    assert out.splitlines()[:3] == [f"Requested reset level for device, {MST}:", "", "3: Driver restart and PCI reset"]
    assert out.endswith("-I- FW was loaded successfully.\n")
    with open(f"{dev}/sriov_totalvfs") as f:
        assert f.read() == "4\n"
    rows = config_rows(ok(run_dir, "mlxconfig", "-d", MST, "-e", "q"))
    assert rows["SRIOV_EN"] == ["*", "False(0)", "True(1)", "True(1)"]


def test_bad_values_and_link_type(daemon, run_dir):
    r = tool(run_dir, "mlxconfig", "-d", MST, "-y", "set", "NUM_OF_VFS=500")
    assert r.returncode == 1 and "out of range" in r.stderr
    r = tool(run_dir, "mlxconfig", "-d", MST, "-y", "set", "LINK_TYPE_P1=VPI")
    assert r.returncode == 1 and "LINK_TYPE_P1=VPI(3) is not supported" in r.stderr
    assert config_rows(ok(run_dir, "mlxconfig", "-d", MST, "q"))["LINK_TYPE_P1"] == ["ETH(2)"]
    # names and numbers both
    ok(run_dir, "mlxconfig", "-d", MST, "-y", "set", "LINK_TYPE_P2=ETH")
    assert config_rows(ok(run_dir, "mlxconfig", "-d", MST, "q"))["LINK_TYPE_P2"] == ["ETH(2)"]


def test_flint_query_burn_and_corrupt_images(daemon, run_dir, tmp_path):
    out = ok(run_dir, "flint", "-d", MST, "q")
    fields = dict(re.findall(r"^([A-Za-z ()]+):\s+(.*)$", out, re.M))
    assert fields["Image type"] == "FS4" and fields["FW Version"] == "16.35.2000"
    assert fields["PSID"] == "MT_0000000008"
    assert re.fullmatch(r"[0-9a-f]{16} +4", fields["Base GUID"]) and re.fullmatch(r"[0-9a-f]{12} +4",
                                                                                    fields["Base MAC"])
    assert "FW Version(Running)" not in fields
    img = str(tmp_path / "fw.bin")
    ok(run_dir, "flint", "--make-image", img, "--fw-version", "16.36.1010")
    assert dict(re.findall(r"^([A-Za-z ()]+):\s+(.*)$", ok(run_dir, "flint", "-i", img, "q"), re.M))[
        "FW Version"] == "16.36.1010"
    # corrupt: one payload-or-header byte flipped -> bad CRC, refused, flash unchanged
    bad = tmp_path / "bad.bin"
    data = bytearray(open(img, "rb").read())
    data[30] ^= 0x40
    bad.write_bytes(bytes(data))
    r = tool(run_dir, "flint", "-d", MST, "-i", str(bad), "-y", "burn")
    assert r.returncode == 1 and r.stderr.startswith("-E- Bad CRC") and "corrupted" in r.stderr
    truncated = tmp_path / "short.bin"
    truncated.write_bytes(bytes(data[:-9]))
    r = tool(run_dir, "flint", "-d", MST, "-i", str(truncated), "-y", "burn")
    assert r.returncode == 1 and "-E- Cannot open" in r.stderr
    other = str(tmp_path / "other.bin")
    ok(run_dir, "flint", "--make-image", other, "--fw-version", "16.36.1010", "--psid", "MT_0000000012")
    r = tool(run_dir, "flint", "-d", MST, "-i", other, "-y", "burn")
    assert r.returncode == 1 and "-E- PSID mismatch" in r.stderr
    assert "FW Version:            16.35.2000" in ok(run_dir, "flint", "-d", MST, "q")
    # the good one: on the flash, running after the reset
    out = ok(run_dir, "flint", "-d", MST, "-i", img, "-y", "burn")
    assert "    Current FW version on flash:  16.35.2000\n    New FW version:               16.36.1010\n" in out
    assert out.endswith("-I- To load new FW run mlxfwreset or reboot machine.\n")
    out = ok(run_dir, "flint", "-d", MST, "q")
    assert "FW Version:            16.36.1010\nFW Version(Running):   16.35.2000\n" in out
    fw_ver = os.path.join(run_dir, "sys", "class", "infiniband", "mlx5_0", "fw_ver")
    assert open(fw_ver).read() == "16.35.2000\n"
    ok(run_dir, "mlxfwreset", "-d", MST, "-y", "reset")
    assert "FW Version(Running)" not in ok(run_dir, "flint", "-d", MST, "q")
    assert open(fw_ver).read() == "16.36.1010\n"


def test_a_daemon_restart_is_a_boot(daemon, run_dir):
    ok(run_dir, "mlxconfig", "-d", MST, "-y", "set", "NUM_OF_VFS=2")
    daemon.stop()
    d2 = RunningDaemon(run_dir, devices=("mlx5_0:lo",))
    try:
        rows = config_rows(ok(run_dir, "mlxconfig", "-d", MST, "-e", "q"))
        assert rows["NUM_OF_VFS"] == ["*", "0", "2", "2"]
        with open(os.path.join(run_dir, "sys", "class", "infiniband", "mlx5_0", "device", "sriov_totalvfs")) as f:
            assert f.read() == "2\n"
        assert "FW Version:            16.36.1010\n" in ok(run_dir, "flint", "-d", MST, "q")
        out = ok(run_dir, "mlxconfig", "-d", MST, "-y", "reset")
        assert f"Reset configuration for device {MST}? (y/n) [n] : y\nApplying... Done!" in out
        rows = config_rows(ok(run_dir, "mlxconfig", "-d", MST, "-e", "q"))
        assert rows["NUM_OF_VFS"] == ["0", "2", "0"] and rows["SRIOV_EN"] == ["False(0)", "True(1)", "False(0)"]
    finally:
        d2.stop()
