"""The daemon's table of control commands (``device.commands``) and its one
dispatch point (``Daemon.run_command``), without a daemon running."""

from __future__ import annotations

import errno
import importlib

from softrdma.device.commands import FREE, HANDLERS
from softrdma.uapi.commands import COMMANDS
from softrdma.device.daemon import Daemon

#: what a connection may ask before it opened a device: the management
#: commands and rdma_cm's event channels
NO_DEVICE = {"devices", "open", "links", "link_add", "link_set", "link_delete", "umad_open", "resources",
             "stat_get", "stat_dump", "stat_set", "stat_del", "stat_get_status", "stat_snapshot", "ecn",
             "pci_functions", "nvconfig", "fw_reset", "fw_burn", "sriov_numvfs", "vf_set",
             "devm_show", "devm_port_add", "devm_port_set", "devm_port_del", "ipoib"}


def test_every_handler_is_named_after_its_op():
    for op, handler in HANDLERS.items():
        assert handler.__name__ == f"cmd_{op}", op
        mod = importlib.import_module(handler.__module__)
        assert mod.__name__.startswith("softrdma.device.commands.")
        assert getattr(mod, handler.__name__) is handler


def test_a_handler_for_every_command_of_the_table():
    assert set(HANDLERS) == set(COMMANDS)


def test_which_commands_need_an_open_device():
    nodev = {op for op, cmd in COMMANDS.items() if not cmd.device}
    assert nodev == NO_DEVICE | {op for op in COMMANDS if op.startswith("cm_")}
    assert len(COMMANDS) == 97         # (64 + reg_user_mr, advise_mr + 8 raw packet/WQ/flow commands + query_pd/mr/dm
                                       #  + create_tm_srq, post_srq_ops + 4 XRC commands + ecn + query_pkey, umad_open
                                       #  + 6 PCI function commands + 4 sub-function commands + ipoib)


def test_freeing_covers_every_kind_that_holds_something():
    assert set(FREE) == {"qp", "srq", "cq", "mr", "mw", "dm", "channel", "capture", "cm_id", "flow", "wq",
                         "rwq_ind_table", "xrcd"}


class _Client:
    device = None
    pid = 1


def _run(msg):
    d = Daemon.__new__(Daemon)          # run_command needs no socket, device or loop
    return d.run_command(_Client(), msg, [])


def test_unknown_and_malformed_ops():
    for op in ("no_such_op", "", None, 7, ["open"], {"op": 1}, "__init__"):
        reply, fds = _run({"op": op, "seq": 3})
        assert reply["errno"] == errno.EOPNOTSUPP and reply["seq"] == 3 and fds == [], op


def test_a_command_on_a_connection_without_a_device():
    reply, _ = _run({"op": "alloc_pd", "seq": 4})
    assert (reply["errno"], reply["msg"]) == (errno.EINVAL, "no device opened on this connection")


def test_a_bad_seq_is_refused_before_dispatch():
    reply, _ = _run({"op": "devices", "seq": 1.5})
    assert reply == {"seq": None, "errno": errno.EINVAL, "msg": "bad request: seq must be an integer"}
