"""``rdma resource show mr``/``pd``: the MR keys (rkey, lkey, iova) and the
PD's local_dma_lkey go only to a process with CAP_NET_ADMIN, as the
kernel's nldev sends them (fill_res_mr_entry, fill_res_pd_entry: ``if
(has_cap_net_admin)``).  The daemon leaves them out of what it sends --
the tool cannot print what it never got, and neither can any other client
of the control socket.  The unprivileged side is the same root user with
CAP_NET_ADMIN dropped from its capability sets (``setpriv``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm
from netns_helpers import need_root
from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE
from softrdma.verbs import device, mr, pd

DROP = ["setpriv", "--inh-caps=-net_admin", "--bounding-set=-net_admin", "--"]
RAW = ("import json, os, socket\n"
       "from softrdma.uapi.control import recv_msg, send_msg\n"
       "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
       "s.connect(os.path.join(os.environ['SOFTRDMA_RUN'], 'softrdmad.sock'))\n"
       "send_msg(s, {'op': 'resources', 'seq': 1})\n"
       "print(json.dumps(recv_msg(s)[0]['resources']))\n")


@pytest.fixture
def world(monkeypatch):
    need_root()
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to drop CAP_NET_ADMIN")
    with daemon_in_shm("reskeys") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        ctx = device.Context(name="rxe0")
        try:
            p = pd.PD(ctx)
            m = mr.MR(p, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
            yield d, m
        finally:
            ctx.close()


def run(d, *args: str, admin: bool) -> str:
    cmd = ([] if admin else DROP) + [sys.executable, *args]
    out = subprocess.run(cmd, env=d.env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stderr) == (0, ""), (cmd, out)
    return out.stdout


def test_the_process_really_lacks_cap_net_admin(world):
    d, _ = world
    check = "from softrdma.tools.rdma.utils import _cap_net_admin; print(_cap_net_admin(), __import__('os').geteuid())"
    assert run(d, "-c", check, admin=True).split() == ["True", "0"]
    assert run(d, "-c", check, admin=False).split() == ["False", "0"]


def test_keys_only_for_cap_net_admin(world):
    d, m = world
    keys = f"rkey 0x{m.rkey:x} lkey 0x{m.lkey:x} "
    root = run(d, "-m", "softrdma", "rdma", "res", "show", "mr", admin=True)
    assert root.startswith(f"dev rxe0 mrn 0 {keys}mrlen 8192 pdn 0 pid {os.getpid()} ")
    plain = run(d, "-m", "softrdma", "rdma", "res", "show", "mr", admin=False)
    assert plain == root.replace(keys, "")
    assert "rkey" not in plain and "lkey" not in plain

    jroot = json.loads(run(d, "-m", "softrdma", "rdma", "-j", "res", "show", "mr", admin=True))
    jplain = json.loads(run(d, "-m", "softrdma", "rdma", "-j", "res", "show", "mr", admin=False))
    assert (jroot[0]["rkey"], jroot[0]["lkey"]) == (format(m.rkey, "x"), format(m.lkey, "x"))
    assert jplain == [{k: v for k, v in jroot[0].items() if k not in ("rkey", "lkey")}]

    pd_root = run(d, "-m", "softrdma", "rdma", "res", "show", "pd", admin=True)
    pd_plain = run(d, "-m", "softrdma", "rdma", "res", "show", "pd", admin=False)
    assert "local_dma_lkey 0x0 " in pd_root and pd_plain == pd_root.replace("local_dma_lkey 0x0 ", "")


def test_the_daemon_does_not_send_them(world):
    """Not the tool hiding them: the control socket's own answer."""
    d, m = world
    mine = [r for r in json.loads(run(d, "-c", RAW, admin=True)) if r["kind"] in ("mr", "pd")]
    theirs = [r for r in json.loads(run(d, "-c", RAW, admin=False)) if r["kind"] in ("mr", "pd")]
    mr_root = next(r for r in mine if r["kind"] == "mr")
    assert (mr_root["rkey"], mr_root["lkey"], mr_root["iova"]) == (m.rkey, m.lkey, m.buf)
    hidden = ("rkey", "lkey", "iova", "local_dma_lkey")
    assert theirs == [{k: v for k, v in r.items() if k not in hidden} for r in mine]
