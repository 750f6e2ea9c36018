"""The control protocol's command table (uapi.commands): it names every
command the daemon implements, the library calls nothing else, and the
check both sides run refuses what the daemon's handlers refuse, with their
errnos and messages."""

from __future__ import annotations

import ast
import collections
import errno
import os
import threading

import pytest

from softrdma.device.commands import HANDLERS
from softrdma.errors import VerbsError
from softrdma.uapi import request as rq
from softrdma.uapi.commands import CMD, COMMANDS, COMMON_ERRNOS, FDS, HANDLE, Command, check_request, lookup
from softrdma.verbs.connection import Connection
from softrdma.verbs.errors import PyverbsRDMAError

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "softrdma")


def test_table_names_the_daemons_handlers():
    assert set(COMMANDS) == set(HANDLERS)


def test_table_entries_are_well_formed():
    for name, cmd in COMMANDS.items():
        assert cmd.name == name and getattr(CMD, name) is cmd
        names = [f.name for f in cmd.request if f.kind != FDS]
        assert len(names) == len(set(names)), name
        assert all(isinstance(e, int) and e not in COMMON_ERRNOS for e in cmd.errnos), name
    # every destroy names its object by its first field, a handle (verbs.base destroys that way)
    for name, cmd in COMMANDS.items():
        if name.startswith(("destroy_", "dealloc_", "dereg_")):
            assert cmd.request[0].kind == HANDLE, name


def _library_calls():
    """(file, line, the op argument) of every control call in the library,
    and of every ``destroy_cmd`` a verbs object's close sends (verbs.base)."""
    for sub in ("verbs", "pyverbs"):
        for f in sorted(os.listdir(os.path.join(SRC, sub))):
            if not f.endswith(".py"):
                continue
            path = os.path.join(SRC, sub, f)
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["destroy_cmd"]:
                    yield f"{sub}/{f}", node.lineno, node.value
                    continue
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                meth = node.func.attr
                if meth in ("call", "destroy") and node.args:
                    yield f"{sub}/{f}", node.lineno, node.args[0]
                elif meth == "_call" and len(node.args) > 1:            # CmId._call(what, cmd, ...)
                    yield f"{sub}/{f}", node.lineno, node.args[1]


def test_library_calls_only_table_commands():
    seen = set()
    for where, line, arg in _library_calls():
        if isinstance(arg, ast.Name) and arg.id == "cmd":              # a pass-through of a Command
            continue
        assert isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "CMD", \
            f"{where}:{line}: a control call not through the command table"
        assert arg.attr in COMMANDS, f"{where}:{line}: no command {arg.attr}"
        seen.add(arg.attr)
    assert {"open", "create_qp", "modify_qp", "destroy_cq", "dealloc_pd", "cm_create_id", "capture_start"} <= seen


def _refused(name, msg, nfds=None, has_device=True):
    with pytest.raises(VerbsError) as e:
        check_request(name, msg, nfds, has_device)
    return e.value.errno, e.value.strerror


def test_check_request_command_and_device():
    assert _refused("no_such", {}) == (errno.EOPNOTSUPP, "unknown command 'no_such'")
    assert _refused(None, {}) == (errno.EOPNOTSUPP, "unknown command None")
    assert _refused("alloc_pd", {}, has_device=False) == (errno.EINVAL, "no device opened on this connection")
    assert check_request("devices", {}, 0, False) == {}
    assert check_request("cm_create_id", {"ps": 0x106}, 0, False) == {"ps": 0x106, "qp_type": "RC"}
    assert lookup(CMD.open) is CMD.open


def test_check_request_fields_as_request_py():
    # the messages are uapi.request's, the errno EINVAL
    assert _refused("open", {}) == (errno.EINVAL, "missing field 'device'")
    assert _refused("open", {"device": 5}) == \
        (errno.EINVAL, "device: expected a string of at most 64 characters, got 5")
    assert _refused("cm_create_id", {"ps": 1 << 16}, has_device=False) == \
        (errno.EINVAL, f"ps: expected an integer in [0, {rq.U16:#x}], got 65536")
    assert _refused("capture_start", {"directions": -1}, 2) == \
        (errno.EINVAL, f"directions: expected an integer in [0, {rq.U32:#x}], got -1")
    assert _refused("cm_destroy_id", {"id": "x"}, has_device=False) == \
        (errno.EINVAL, f"id: expected an integer in [0, {rq.U32:#x}], got 'x'")
    # a handle as Client.get refuses it
    assert _refused("reg_mr", {"pd": "x"}) == (errno.EINVAL, "no pd with handle 'x'")
    assert _refused("dealloc_pd", {}) == (errno.EINVAL, "no pd with handle None")
    assert _refused("create_qp", {"pd": True}) == (errno.EINVAL, "no pd with handle True")
    # fds, with each command's own words
    assert _refused("create_cq", {}, 0) == (errno.EINVAL, "create_cq needs the ring fd")
    assert _refused("capture_start", {}, 1) == (errno.EINVAL, "capture_start needs the ring fd and the doorbell fd")
    assert _refused("create_cq", {"channel": "x"}, 1) == (errno.EINVAL, "no channel with handle 'x'")


def test_check_request_stops_where_the_handler_looks_at_state():
    # after a handle the handler looks the object up first: a bad length is its to find
    assert check_request("reg_mr", {"pd": 5, "length": "x"}, 0) == {"pd": 5}
    # an optional handle absent: the device's limits come next, then cqe
    assert check_request("create_cq", {"cqe": -1}, 1) == {"channel": None}
    # the admin check comes first: nothing is checked before it
    assert check_request("link_delete", {"name": 5}, 0, False) == {}
    assert check_request("stat_set", {"dev": "x"}, 0, False) == {}
    # fields the handler checks itself stop the walk too
    assert check_request("query_gid", {"index": "x", "port": "y"}) == {}


def _offline_connection(opened: bool) -> Connection:
    conn = Connection.__new__(Connection)
    conn.dead, conn.opened, conn._lock = False, opened, threading.RLock()
    conn._orphans = collections.deque()
    return conn


def test_library_checks_before_sending():
    conn = _offline_connection(opened=True)
    with pytest.raises(PyverbsRDMAError) as e:
        conn.call(CMD.create_cq, fds=[], cqe=1)
    assert e.value.error_code == errno.EINVAL
    assert str(e.value) == "Failed to create cq: create_cq needs the ring fd. Errno: 22, Invalid argument"
    with pytest.raises(PyverbsRDMAError) as e:
        conn.call("cm_create_id", ps=-1)
    assert e.value.error_code == errno.EINVAL and "ps: expected an integer" in str(e.value)
    with pytest.raises(TypeError, match="no field colour"):
        conn.call(CMD.alloc_pd, colour=1)
    assert isinstance(CMD.alloc_pd, Command)


_RQ_KIND = {"uint": "uint", "string": "string", "obj": "obj", "handle": "u32handle"}


def _handler_reads():
    """(command, field, kind, limit) of every ``rq.<check>(m, "field", ...)``
    a daemon handler (or the ``_cm_id`` helper, for its callers) makes."""
    helpers = {"_cm_id": [("id", "u32handle", rq.U32)]}
    cmd_dir = os.path.join(SRC, "device", "commands")
    for f in sorted(os.listdir(cmd_dir)):
        if not f.endswith(".py"):
            continue
        path = os.path.join(cmd_dir, f)
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for fn in ast.walk(tree):
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("cmd_")):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called in helpers:
                    for read in helpers[called]:
                        yield (fn.name[len("cmd_"):], *read)
                if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "rq"
                        and func.attr in _RQ_KIND and len(node.args) >= 2):
                    continue
                src, key = node.args[0], node.args[1]
                if not (isinstance(src, ast.Name) and src.id == "m" and isinstance(key, ast.Constant)):
                    continue
                limit = eval(compile(ast.Expression(node.args[2]), path, "eval"), {"rq": rq}) \
                    if len(node.args) > 2 and func.attr in ("uint", "string") else \
                    (rq.U32 if func.attr == "handle" else None)
                if func.attr == "string" and len(node.args) == 2:
                    limit = 64
                yield fn.name[len("cmd_"):], key.value, _RQ_KIND[func.attr], limit


def test_table_fields_are_the_fields_the_handlers_read():
    """One fact, two readers until the handlers take check_request's values:
    every field a handler checks is in its command's entry, of the kind and
    width the handler checks it with (fields the table leaves to the handler,
    ANY, may be read any way)."""
    reads = list(_handler_reads())
    assert len(reads) > 25
    for name, field, kind, limit in reads:
        spec = {f.name: f for f in COMMANDS[name].request}.get(field)
        assert spec is not None, f"{name}: the handler reads {field!r}, the table does not declare it"
        if spec.kind == "any":
            continue
        assert (spec.kind, spec.limit) == (kind, limit if limit is not None else spec.limit), (name, field)
