"""A daemon from another softrdma (left running across an upgrade, or
started from another installation) is refused by the library: its devices
are not listed, opening one fails with ENODEV, and one warning line says
why -- instead of the library misreading rings laid out by other code."""

import errno

import pytest

from daemon_helpers import default_daemon_in_shm
from softrdma.uapi import commands
from softrdma.verbs import device
from softrdma.verbs.errors import PyverbsRDMAError


@pytest.fixture(scope="module")
def daemon():
    with default_daemon_in_shm("abi") as d:
        yield d


def test_the_fingerprint_is_the_shared_packages_sources():
    assert len(commands.PROTOCOL_VERSION) == 16 and commands.PROTOCOL_VERSION == commands._abi_fingerprint()


def test_a_daemon_of_the_same_tree_is_used(daemon):
    names = [d.name.decode() for d in device.get_device_list()]
    assert names == ["rxe0"]
    with device.Context(name="rxe0") as ctx:
        assert ctx.query_device().max_qp > 0


def test_a_daemon_of_another_tree_is_refused(daemon, monkeypatch, capsys):
    # this library as if built from other sources than the running daemon
    monkeypatch.setattr(device, "PROTOCOL_VERSION", "0123456789abcdef")
    monkeypatch.setattr(device, "_abi_warned", set())
    assert device.get_device_list() == []
    with pytest.raises(PyverbsRDMAError) as ei:
        device.Context(name="rxe0")
    assert ei.value.error_code == errno.ENODEV and "another softrdma" in str(ei.value)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err                       # one warning, however often it is met
    assert err[0].startswith("libibverbs: Warning: softrdmad at ") and "restart it" in err[0]
    assert commands.PROTOCOL_VERSION in err[0]      # what the daemon speaks
