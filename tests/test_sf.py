"""Sub-functions of a ConnectX-like PF through ``softrdma mlxdevm``, end to
end (root: an SF's netdev is a macvlan, in the SR-IOV tests' namespace):
SF ports need PF_TOTAL_SF and a firmware reset; ``port add`` / ``port
show`` / ``dev show`` in devlink's text and JSON; mlx5's errors; an active
SF is an RDMA device of its own (auxiliary device ``mlx5_core.sf.N``, its
netdev) carrying RC traffic to and from the PF; deactivating or deleting
an SF in use is EBUSY; deleted, it is gone with its netdev."""

from __future__ import annotations

import json
import os

import pytest

from netns_helpers import sh
from test_sriov import NS, NET, PF, exchanges, host  # noqa: F401 -- host: the module's namespace and daemon

from softrdma.verbs.device import Context

DEV = "pci/0000:5e:00.0"
PORT = f"{DEV}/32768"            # mlx5_0's first SF: vhca 0, vport 0x8000
UPLINK = f"{DEV}/65535: type eth netdev {PF} flavour physical port 0 splittable false\n"


def failed(r, status: int = 1) -> str:
    assert r.returncode == status and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    return r.stderr


def test_sf_ports_need_pf_total_sf_and_a_reset(host):
    add = ("mlxdevm", "port", "add", DEV, "flavour", "pcisf", "pfnum", "0", "sfnum", "88")
    msg = "Error: mlx5_core: SF ports are not supported.\nkernel answers: Operation not supported\n"
    assert failed(host.tool(*add)) == msg
    host.ok("mlxconfig", "-d", "mlx5_0", "-y", "set", "PF_TOTAL_SF=2")
    assert failed(host.tool(*add)) == msg                  # next boot only
    host.ok("mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    assert host.ok("mlxdevm", "dev", "show") == f"{DEV}\n"
    assert host.ok("mlxdevm", "port", "show") == UPLINK


def test_port_add_and_show_as_devlink_prints_them(host):
    out = host.ok("mlxdevm", "port", "add", DEV, "flavour", "pcisf", "pfnum", "0", "sfnum", "88")
    line = f"{PORT}: type eth flavour pcisf controller 0 pfnum 0 sfnum 88 external false splittable false\n"
    fn = "  function:\n    hw_addr 00:00:00:00:00:00 state inactive opstate detached\n"
    assert out == line + fn
    assert host.ok("mlxdevm", "port", "show") == line + fn + UPLINK
    assert host.ok("mlxdevm", "port", "show", PORT) == line + fn
    j = host.ok("mlxdevm", "-j", "port", "show", PORT)
    assert j == ('{"port":{"pci/0000:5e:00.0/32768":{"type":"eth","flavour":"pcisf","controller":0,"pfnum":0,'
                 '"sfnum":88,"external":false,"splittable":false,"function":{"hw_addr":"00:00:00:00:00:00",'
                 '"state":"inactive","opstate":"detached"}}}}\n')
    pretty = host.ok("mlxdevm", "-jp", "port", "show")
    assert json.loads(pretty) == json.loads(host.ok("mlxdevm", "-j", "port", "show"))
    assert pretty.startswith('{\n    "port": {\n        "pci/0000:5e:00.0/32768": {\n            "type": "eth",\n')
    assert json.loads(host.ok("mlxdevm", "-j", "dev", "show")) == {"dev": {DEV: {}}}


@pytest.mark.parametrize("argv,status,err", [
    (("sfnum", "88"), 1, "Error: mlx5_core: SF already exist. Choose different sfnum.\nkernel answers: File exists\n"),
    (("sfnum", "89", "controller", "1"), 1,
     "Error: mlx5_core: External controller is unsupported.\nkernel answers: Operation not supported\n"),
    ((), 1, "Error: mlx5_core: User must provide unique sfnum. Driver does not support auto assignment.\n"
            "kernel answers: Operation not supported\n"),
])
def test_port_add_refusals(host, argv, status, err):
    r = host.tool("mlxdevm", "port", "add", DEV, "flavour", "pcisf", "pfnum", "0", *argv)
    assert failed(r, status) == err


def test_port_add_argument_errors(host):
    def add(*argv):
        return host.tool("mlxdevm", "port", "add", *argv)
    assert failed(add(DEV, "flavour", "pcivf", "pfnum", "0")) == (
        "Error: mlx5_core: Driver supports only SF port addition.\nkernel answers: Operation not supported\n")
    assert failed(add(DEV, "flavour", "pcisf", "pfnum", "1", "sfnum", "7")) == (
        "Error: mlx5_core: Invalid pfnum supplied.\nkernel answers: Operation not supported\n")
    assert failed(add(DEV, "flavour", "sf", "pfnum", "0"), 255) == 'Error: argument "sf" is wrong: unknown flavour\n'
    assert failed(add(DEV, "pfnum", "0", "sfnum", "7")) == "Port flavour is expected.\n"
    assert failed(add(DEV, "flavour", "pcisf", "pfnum", "x")) == '"x" is not a number or not within range\n'
    assert failed(add("pci/0000:99:00.0", "flavour", "pcisf", "pfnum", "0", "sfnum", "7")) == (
        "kernel answers: No such device\n")
    assert failed(host.tool("mlxdevm", "port", "del", f"{DEV}/32770")) == "kernel answers: No such device\n"
    assert failed(host.tool("mlxdevm", "port", "del", f"{DEV}/65535")) == (
        "Error: Port deletion is not supported.\nkernel answers: Operation not supported\n")
    # the table holds PF_TOTAL_SF (2) SFs
    host.ok("mlxdevm", "port", "add", DEV, "flavour", "pcisf", "pfnum", "0", "sfnum", "89")
    assert failed(add(DEV, "flavour", "pcisf", "pfnum", "0", "sfnum", "90")) == (
        "kernel answers: No space left on device\n")
    host.ok("mlxdevm", "port", "del", f"{DEV}/32769")
    assert "sfnum 89" not in host.ok("mlxdevm", "port", "show")


def test_an_active_sf_is_a_device_of_its_own(host):
    host.ok("mlxdevm", "port", "function", "set", PORT, "hw_addr", "02:25:f2:8d:a2:4c", "state", "active")
    netdev = f"{PF}s88"
    assert host.ok("mlxdevm", "port", "show", PORT) == (
        f"{PORT}: type eth netdev {netdev} flavour pcisf controller 0 pfnum 0 sfnum 88 external false"
        " splittable false\n  function:\n    hw_addr 02:25:f2:8d:a2:4c state active opstate attached\n")
    assert host.ok("mlxdevm", "dev", "show") == f"{DEV}\nauxiliary/mlx5_core.sf.1\n"
    assert [ln.split()[0] for ln in host.ok("ibv_devices").splitlines()[2:]] == ["mlx5_0", "mlx5_1"]
    assert os.readlink(host.path("mlx5_0", "device", "mlx5_core.sf.1")) == "../../mlx5_1/device"
    assert host.read("mlx5_1", "device", "sfnum") == "88\n"
    assert "DRIVER=mlx5_core.sf\n" in host.read("mlx5_1", "device", "uevent")
    assert os.listdir(host.path("mlx5_1", "device", "net")) == [netdev]
    assert host.read("mlx5_1", "fw_ver") == host.read("mlx5_0", "fw_ver")
    link = sh("ip", "-n", NS, "-o", "link", "show", netdev).stdout
    assert "link/ether 02:25:f2:8d:a2:4c" in link
    sh("ip", "-n", NS, "addr", "add", f"{NET}.31/24", "dev", netdev)
    r = host.tool("rdma", "link", "delete", "mlx5_1")          # only through its port
    assert r.returncode != 0 and os.path.isdir(host.path("mlx5_1")), (r.stdout, r.stderr)
    # the netdev by name is a port handle too
    assert host.ok("mlxdevm", "port", "show", netdev).startswith(f"{PORT}: type eth netdev {netdev}")


def test_rc_between_the_sf_and_the_pf(host):
    exchanges((("mlx5_1", "mlx5_0"), ("mlx5_0", "mlx5_1")))


def test_an_sf_in_use_cannot_go(host):
    ctx = Context(name="mlx5_1")
    try:
        busy = "kernel answers: Device or resource busy\n"
        assert failed(host.tool("mlxdevm", "port", "function", "set", PORT, "state", "inactive")).endswith(busy)
        assert failed(host.tool("mlxdevm", "port", "del", PORT)).endswith(busy)
        assert "state active opstate attached" in host.ok("mlxdevm", "port", "show", PORT)
        r = host.tool("mlxfwreset", "-d", "mlx5_0", "-y", "reset")          # SF ports exist
        assert r.returncode == 1 and "Device or resource busy" in r.stderr, r.stderr
    finally:
        ctx.close()
    host.ok("mlxdevm", "port", "function", "set", PORT, "state", "inactive")
    assert not os.path.exists(host.path("mlx5_1"))
    assert not os.path.lexists(host.path("mlx5_0", "device", "mlx5_core.sf.1"))
    assert "state inactive opstate detached" in host.ok("mlxdevm", "port", "show", PORT)
    host.ok("mlxdevm", "port", "function", "set", PORT, "state", "active")     # again, then deleted while active
    assert os.path.isdir(host.path("mlx5_1"))
    host.ok("mlxdevm", "port", "del", PORT)
    assert host.ok("mlxdevm", "port", "show") == UPLINK
    assert [ln.split()[0] for ln in host.ok("ibv_devices").splitlines()[2:]] == ["mlx5_0"]
    assert sh("ip", "-n", NS, "-o", "link", "show", "type", "macvlan").stdout == ""
    host.ok("mlxconfig", "-d", "mlx5_0", "-y", "set", "PF_TOTAL_SF=0")
    host.ok("mlxfwreset", "-d", "mlx5_0", "-y", "reset")
