"""The PCI identity of a ConnectX-like device (``mlx5_*``): its sysfs
device/ directory, the attributes ibv_devinfo shows, mst's listing; an
rxe device beside it keeps rxe's (no PCI files)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("pci-id", devices=("mlx5_0:lo", "rxe0:lo")) as d:
        yield d


def _tool(d, *argv: str, input: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "SOFTRDMA_RUN": d.run_dir, "SOFTRDMA_AUTOSTART": "0"}
    return subprocess.run([sys.executable, "-m", "softrdma", *argv], env=env, capture_output=True, text=True,
                          input=input, timeout=60)


def _read(path) -> str:
    with open(path) as f:
        return f.read()


def test_device_attributes_are_mlx5s(daemon):
    ib = os.path.join(daemon.run_dir, "sys", "class", "infiniband")
    d = os.path.join(ib, "mlx5_0")
    assert _read(f"{d}/fw_ver") == "16.35.2000\n"
    assert _read(f"{d}/board_id") == "MT_0000000008\n"
    assert _read(f"{d}/hca_type") == "MT4119\n"
    assert _read(f"{d}/hw_rev") == "0\n"
    assert not os.path.exists(f"{d}/parent")                 # rxe's driver attribute, not mlx5's
    dev = f"{d}/device"
    assert {n: _read(f"{dev}/{n}") for n in ("vendor", "device", "subsystem_vendor", "subsystem_device", "class",
                                               "revision")} == {
        "vendor": "0x15b3\n", "device": "0x1017\n", "subsystem_vendor": "0x15b3\n", "subsystem_device": "0x0008\n",
        "class": "0x020000\n", "revision": "0x00\n"}
    uevent = dict(line.split("=", 1) for line in _read(f"{dev}/uevent").splitlines())
    assert uevent["PCI_SLOT_NAME"] == "0000:5e:00.0"
    assert uevent["PCI_ID"] == "15B3:1017" and uevent["DRIVER"] == "mlx5_core"
    assert os.listdir(f"{dev}/infiniband") == ["mlx5_0"]
    assert os.listdir(f"{dev}/net") == ["lo"]
    # SRIOV_EN is False out of the box: no SR-IOV capability, no sriov_* files
    assert not [n for n in os.listdir(dev) if n.startswith("sriov")]
    # rxe0 stays rxe: no PCI files, its parent attribute, no board id
    r = os.path.join(ib, "rxe0")
    assert sorted(os.listdir(f"{r}/device")) == ["net"]
    assert _read(f"{r}/parent") == "lo\n" and _read(f"{r}/board_id") == "\n" and _read(f"{r}/fw_ver") == "\n"
    # uverbs ABI versions: mlx5's 1, rxe's 2
    verbs = os.path.join(daemon.run_dir, "sys", "class", "infiniband_verbs")
    abi = {_read(f"{verbs}/{u}/ibdev").strip(): _read(f"{verbs}/{u}/abi_version").strip()
           for u in os.listdir(verbs) if u.startswith("uverbs")}
    assert abi == {"mlx5_0": "1", "rxe0": "2"}


def test_ibv_devinfo_shows_the_connectx_identity(daemon):
    r = _tool(daemon, "ibv_devinfo", "-d", "mlx5_0")
    assert r.returncode == 0, r.stderr
    lines = dict(re.findall(r"^\t(\w+):\t+(.*)$", r.stdout, re.M))
    assert lines["fw_ver"] == "16.35.2000"
    assert lines["vendor_id"] == "0x02c9"
    assert lines["vendor_part_id"] == "4119"
    assert lines["hw_ver"] == "0x0"
    assert lines["board_id"] == "MT_0000000008"
    r = _tool(daemon, "ibv_devinfo", "-d", "rxe0")
    assert "board_id" not in r.stdout and "0x02c9" not in r.stdout


def test_rdma_dev_shows_the_firmware(daemon):
    r = _tool(daemon, "rdma", "dev")
    assert r.returncode == 0, r.stderr
    lines = {ln.split(":")[1].strip(): ln for ln in r.stdout.splitlines()}
    assert " fw 16.35.2000 " in lines["mlx5_0"]
    assert " fw " not in lines["rxe0"]


def test_mst_lists_the_pf_by_bus_address(daemon):
    assert _tool(daemon, "mst", "start").returncode == 0
    try:
        r = _tool(daemon, "mst", "status", "-v")
        assert r.returncode == 0, r.stderr
        rows = [line.split() for line in r.stdout.splitlines() if line.startswith("ConnectX")]
        assert rows == [["ConnectX5(rev:0)", "/dev/mst/mt4119_pciconf0", "5e:00.0", "mlx5_0", "net-lo", "-1"]]
    finally:
        assert _tool(daemon, "mst", "stop").returncode == 0
