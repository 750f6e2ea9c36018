"""softrdma rdma: iproute2 6.1's rdma tool over a real softrdmad.

Objects are made with the verbs library in this process and in a second
process; the expected lines are iproute2's formats (docs/formats/
rdma_tool.md) written out, with the values that vary (QPNs, keys, pids,
comm) substituted.  Every text line ends with a space, as iproute2's
"<key> <value> " formats make it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest

from softrdma.enums import IBV_MTU_1024, IBV_QPS_INIT, IBV_QPS_RESET, IBV_QPS_RTS, IBV_QPT_RC, IBV_QPT_UD
from softrdma.tools import rdma as tool
from softrdma.tools.rdma.utils import _cap_net_admin
from shm_helpers import shm_mkdtemp

ACC = 15
IPV4_GID = 1                       # on lo: fe80::(MAC) at 0, ::ffff:127.0.0.1 at 1
USAGE = ("Usage: rdma [ OPTIONS ] OBJECT { COMMAND | help }\n"
         "       rdma [ -f[orce] ] -b[atch] filename\n"
         "where  OBJECT := { dev | link | resource | system | statistic | help }\n"
         "       OPTIONS := { -V[ersion] | -d[etails] | -j[son] | -p[retty] -r[aw]}\n")
LINK_USAGE = ("Usage: rdma link show [DEV/PORT_INDEX]\n"
              "Usage: rdma link add NAME type TYPE netdev NETDEV\n"
              "Usage: rdma link add NAME type ib fabric FABRIC node NODE [port PORT]\n"
              "Usage: rdma link delete NAME\n")
GUID_LO = "0200:00ff:fe00:0000"    # rxe's EUI-64 of lo's all-zero MAC


def _run_dir() -> str:
    """On /dev/shm when there is one, as the daemon's default: its sysfs tree
    is thousands of small files (seconds to write on a disk)."""
    return shm_mkdtemp("softrdma-rdma-test-")


class Daemon:
    """A softrdmad of our own (ephemeral UDP port: other daemons may hold 4791)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.log = open(os.path.join(run_dir, "test-daemon.log"), "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "softrdma", "daemon", "-f", "--run-dir", run_dir,
                                      "--device", "rxe0:lo", "--port", "0"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        end = time.monotonic() + 60
        while not os.path.exists(os.path.join(run_dir, "softrdmad.sock")):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("softrdmad did not start: " + open(self.log.name).read())
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def run(capsys, *args):
    rc = tool.main(list(args), prog="rdma")
    out, err = capsys.readouterr()
    return rc, out, err


def comm_of(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().rstrip("\n")


CHILD = textwrap.dedent("""
    import json, os, sys
    from softrdma.verbs import device, pd, mr, cq, qp
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    m = mr.MR(p, 4096, 15)
    c = cq.CQ(ctx, 100)
    a = qp.QPAttr(); a.qkey = 0x1234
    q = qp.QP(p, qp.QPInitAttr(4, scq=c, rcq=c, cap=qp.QPCap(4, 4)), a)
    print(json.dumps({"qpn": q.qp_num, "rkey": m.rkey, "lkey": m.lkey}), flush=True)
    sys.stdin.readline()
""")


def _rc_attr(qp_mod, addr_mod, peer, sq_psn, rq_psn, gid):
    a = qp_mod.QPAttr()
    a.qp_access_flags = ACC
    a.path_mtu = IBV_MTU_1024
    a.dest_qp_num = peer
    a.sq_psn, a.rq_psn = sq_psn, rq_psn
    a.max_dest_rd_atomic = a.max_rd_atomic = 1
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
    a.ah_attr = addr_mod.AHAttr(gr=addr_mod.GlobalRoute(dgid=gid, sgid_index=IPV4_GID), is_global=1, port_num=1)
    return a


@pytest.fixture(scope="module")
def world():
    """rxe0 with, from this process (context 0): a PD, an MR, two CQs, two
    connected RC QPs, a UD QP, an RC QP left in RESET, an SRQ with two RC QPs
    in INIT; from a child process (context 1): a PD, an MR, a CQ, a UD QP."""
    run_dir = _run_dir()
    saved = {k: os.environ.get(k) for k in ("SOFTRDMA_RUN", "SOFTRDMA_AUTOSTART")}
    os.environ["SOFTRDMA_RUN"] = run_dir
    os.environ["SOFTRDMA_AUTOSTART"] = "0"
    d = Daemon(run_dir)
    child = ctx = None
    try:
        from softrdma.verbs import addr, cq, device, mr, pd, qp, srq
        ctx = device.Context(name="rxe0")
        p = pd.PD(ctx)
        m = mr.MR(p, 65536, ACC)
        cq1, cq2 = cq.CQ(ctx, 16), cq.CQ(ctx, 100)
        qa = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=cq1, rcq=cq1, cap=qp.QPCap(4, 4)))
        qb = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=cq1, rcq=cq2, cap=qp.QPCap(4, 4)))
        gid = ctx.query_gid(1, IPV4_GID)
        qa.to_rts(_rc_attr(qp, addr, qb.qp_num, 256, 512, gid))
        qb.to_rts(_rc_attr(qp, addr, qa.qp_num, 512, 256, gid))
        ua = qp.QPAttr()
        ua.qkey = 0x11111111
        qu = qp.QP(p, qp.QPInitAttr(IBV_QPT_UD, scq=cq2, rcq=cq2, cap=qp.QPCap(4, 4)), ua)
        qr = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=cq2, rcq=cq2, cap=qp.QPCap(4, 4)))
        s = srq.SRQ(p, srq.SrqInitAttr(srq.SrqAttr(16, 1)))
        qs = []
        for _ in range(2):
            q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=cq2, rcq=cq2, srq=s, cap=qp.QPCap(4, 4)))
            ia = qp.QPAttr()
            ia.qp_access_flags = ACC
            q.to_init(ia)
            qs.append(q)
        assert (qa.qp_state, qb.qp_state, qu.qp_state, qr.qp_state, qs[0].qp_state) == \
            (IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPS_RESET, IBV_QPS_INIT)
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=dict(os.environ), text=True)
        info = json.loads(child.stdout.readline())
        yield types.SimpleNamespace(
            daemon=d, run_dir=run_dir, ctx=ctx, pd=p, mr=m, cq1=cq1, cq2=cq2, qa=qa, qb=qb, qu=qu, qr=qr, srq=s,
            qs=qs, child=child, child_info=info, pid=os.getpid(), comm=comm_of(os.getpid()),
            cpid=child.pid, ccomm=comm_of(child.pid), keys=_cap_net_admin())
    finally:
        if child is not None:
            child.stdin.close()
            child.wait(10)
        if ctx is not None:
            ctx.close()
        d.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ------------------------------------------------------------------ no daemon, options
def test_no_daemon_is_no_rdma_netlink(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOFTRDMA_RUN", str(tmp_path))
    monkeypatch.delenv("SOFTRDMA_AUTOSTART", raising=False)       # the tool must not start one anyway
    for args in (["link"], ["help"], [], ["foo"], ["-j", "res", "show", "qp"], ["link", "add", "x"]):
        assert run(capsys, *args) == (1, "", "Failed to open NETLINK_RDMA socket\n"), args
    assert not os.path.exists(tmp_path / "softrdmad.sock")
    # options are handled before the netlink socket is needed
    assert run(capsys, "-V") == (0, "rdma utility, iproute2-6.1.0\n", "")
    assert run(capsys, "--ver") == (0, "rdma utility, iproute2-6.1.0\n", "")
    assert run(capsys, "-h") == (0, USAGE, "")
    assert run(capsys, "-x") == (1, USAGE, "Unknown option.\n")
    assert run(capsys, "--bogus", "link") == (1, USAGE, "Unknown option.\n")
    assert run(capsys, "-b") == (1, "", "-b option requires an argument\n")
    assert run(capsys, "link", "-b") == (1, "", "-b option requires an argument\n")
    # and through the softrdma command, in its own process
    out = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "link"], capture_output=True, text=True,
                         env={**os.environ, "SOFTRDMA_RUN": str(tmp_path)}, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (1, "", "Failed to open NETLINK_RDMA socket\n")
    assert not os.path.exists(tmp_path / "softrdmad.sock")                  # and nothing was started


# ------------------------------------------------------------------ link, dev
def test_link_show(world, capsys):
    line = "link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo \n"
    for args in (["link"], ["link", "show"], ["link", "list"], ["l", "s", "rxe0/1"], ["link", "show", "rxe0/1"]):
        assert run(capsys, *args) == (0, line, ""), args
    assert run(capsys, "-d", "link") == (0, "link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo "
                                            "netdev_index 1 \n", "")
    rc, out, err = run(capsys, "-j", "link")
    assert (rc, err) == (0, "")
    assert out == ('[{"ifindex":0,"ifname":"rxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP",'
                   '"netdev":"lo","netdev_index":1}]\n')
    assert list(json.loads(out)[0]) == ["ifindex", "ifname", "port", "state", "physical_state", "netdev",
                                        "netdev_index"]
    assert run(capsys, "-j", "-p", "link")[1] == textwrap.dedent("""\
        [ {
                "ifindex": 0,
                "ifname": "rxe0",
                "port": 1,
                "state": "ACTIVE",
                "physical_state": "LINK_UP",
                "netdev": "lo",
                "netdev_index": 1
            } ]
        """)
    # options after the words (getopt_long permutes), as iproute2 allows
    assert run(capsys, "link", "show", "-j")[1] == out
    # 6.1's strict port: a device needs its port; unknown devices and ports
    for bad in ("rxe0", "rxe0/2", "rxe0/0", "rxe0/-", "rxe9/1"):
        assert run(capsys, "link", "show", bad) == (1, "", "Wrong device name\n"), bad
    assert run(capsys, "-j", "link", "show", "rxe9/1") == (1, "[]\n", "Wrong device name\n")
    assert run(capsys, "link", "show", "rxe0/1", "foo") == (0, "", "Unknown parameter 'foo'.\n")
    assert run(capsys, "link", "help") == (0, LINK_USAGE, "")


def test_dev_show(world, capsys):
    line = f"0: rxe0: node_type ca node_guid {GUID_LO} sys_image_guid {GUID_LO} \n"
    for args in (["dev"], ["dev", "show"], ["d", "sh", "rxe0"], ["dev", "list", "rxe0"]):
        assert run(capsys, *args) == (0, line, ""), args
    caps = ("BAD_PKEY_CNTR, BAD_QKEY_CNTR, AUTO_PATH_MIG, CHANGE_PHY_PORT, UD_AV_PORT_ENFORCE_PORT_ENFORCE, "
            "PORT_ACTIVE_EVENT, SYS_IMAGE_GUID, RC_RNR_NAK_GEN, SRQ_RESIZE, MEM_WINDOW, MEM_MGT_EXTENSIONS, "
            "MEM_WINDOW_TYPE_2A, MEM_WINDOW_TYPE_2B")
    assert run(capsys, "-d", "dev") == (0, line[:-1] + "adaptive-moderation off \n    caps: <" + caps + ">\n", "")
    rc, out, _ = run(capsys, "-j", "dev")
    assert out == (f'[{{"ifindex":0,"ifname":"rxe0","node_type":"ca","node_guid":"{GUID_LO}",'
                   f'"sys_image_guid":"{GUID_LO}"}}]\n')
    d = json.loads(run(capsys, "-j", "-d", "dev")[1])[0]
    assert list(d) == ["ifindex", "ifname", "node_type", "node_guid", "sys_image_guid", "adaptive-moderation",
                       "caps"]
    assert d["adaptive-moderation"] is False and d["caps"] == caps.split(", ")
    assert run(capsys, "dev", "show", "rxe9") == (1, "", "Wrong device name - rxe9\n")
    assert run(capsys, "-j", "dev", "show", "rxe9") == (1, "[]\n", "Wrong device name - rxe9\n")
    assert run(capsys, "dev", "foo") == (0, "", "Unknown dev command 'foo'.\n")
    assert run(capsys, "dev", "help") == (0, "Usage: rdma dev show [DEV]\n"
                                             "       rdma dev set [DEV] name DEVNAME\n"
                                             "       rdma dev set [DEV] netns NSNAME\n"
                                             "       rdma dev set [DEV] adaptive-moderation [on|off]\n", "")
    assert run(capsys, "-d", "-d", "-r", "dev")[1] == run(capsys, "-d", "dev")[1]      # rxe: no driver/raw data


def test_unknown_words(world, capsys):
    assert run(capsys, "foo") == (0, "", "Unknown object 'foo'.\n")
    assert run(capsys, "link", "foo") == (0, "", "Unknown link command 'foo'.\n")
    assert run(capsys, "link", "rxe0") == (0, "", "Unknown link command 'rxe0'.\n")
    assert run(capsys, "res", "foo") == (0, "", "Unknown resource command 'foo'.\n")
    assert run(capsys, "res", "show", "foo") == (0, "", "Unknown parameter 'foo'.\n")
    assert run(capsys) == (0, USAGE, "")
    assert run(capsys, "help") == (0, USAGE, "")


# ------------------------------------------------------------------ resources
def test_resource_summary(world, capsys):
    line = "0: rxe0: pd 2 cq 3 qp 7 cm_id 0 mr 2 ctx 2 srq 1 \n"
    for args in (["res"], ["resource", "show"], ["r", "l"], ["res", "show", "rxe0"]):
        assert run(capsys, *args) == (0, line, ""), args
    assert run(capsys, "-j", "res")[1] == ('[{"ifindex":0,"ifname":"rxe0","pd":2,"cq":3,"qp":7,"cm_id":0,"mr":2,'
                                           '"ctx":2,"srq":1}]\n')
    assert run(capsys, "res", "show", "rxe9") == (0, "", "Unknown parameter 'rxe9'.\n")
    rc, out, _ = run(capsys, "res", "help")
    assert rc == 0 and out.startswith("Usage: rdma resource\n          resource show [DEV]\n"
                                      "          resource show [qp|cm_id|pd|mr|cq|ctx|srq]\n")
    assert out.count("\n") == 17


def _qp_lines(w):
    me = f"pid {w.pid} comm {w.comm} "
    qa, qb, qu, qr = w.qa.qp_num, w.qb.qp_num, w.qu.qp_num, w.qr.qp_num
    s1, s2 = (q.qp_num for q in w.qs)
    return {
        qr: f"link rxe0/- lqpn {qr} rqpn 0 type RC state RESET rq-psn 0 sq-psn 0 path-mig-state MIGRATED pdn 0 {me}\n",
        qa: f"link rxe0/1 lqpn {qa} rqpn {qb} type RC state RTS rq-psn 512 sq-psn 256 path-mig-state MIGRATED "
            f"pdn 0 {me}\n",
        qb: f"link rxe0/1 lqpn {qb} rqpn {qa} type RC state RTS rq-psn 256 sq-psn 512 path-mig-state MIGRATED "
            f"pdn 0 {me}\n",
        qu: f"link rxe0/1 lqpn {qu} type UD state RTS sq-psn 0 pdn 0 {me}\n",
        s1: f"link rxe0/1 lqpn {s1} rqpn 0 type RC state INIT rq-psn 0 sq-psn 0 path-mig-state MIGRATED pdn 0 {me}\n",
        s2: f"link rxe0/1 lqpn {s2} rqpn 0 type RC state INIT rq-psn 0 sq-psn 0 path-mig-state MIGRATED pdn 0 {me}\n",
        w.child_info["qpn"]: f"link rxe0/1 lqpn {w.child_info['qpn']} type UD state RTS sq-psn 0 pdn 1 "
                             f"pid {w.cpid} comm {w.ccomm} \n",
    }


def test_resource_qp(world, capsys):
    w = world
    lines = _qp_lines(w)
    qr = w.qr.qp_num
    # the port-0 pass (QPs without a port: RESET) first, then port 1, each in QPN order
    expect = lines[qr] + "".join(v for k, v in sorted(lines.items()) if k != qr)
    for args in (["res", "show", "qp"], ["res", "sh", "qp", "link", "rxe0"], ["resource", "show", "qp", "link", "rxe0"]):
        assert run(capsys, *args) == (0, expect, ""), args
    assert run(capsys, "res", "show", "qp", "link", "rxe0/-") == (0, lines[qr], "")
    assert run(capsys, "res", "show", "qp", "link", "rxe0/1")[1] == expect[len(lines[qr]):]
    rc, out, err = run(capsys, "-j", "res", "show", "qp")
    got = json.loads(out)
    assert (rc, err) == (0, "") and out.endswith("]\n") and "\n" not in out[:-1]
    assert [q["lqpn"] for q in got] == [qr] + sorted(k for k in lines if k != qr)
    assert list(got[0]) == ["ifindex", "ifname", "lqpn", "rqpn", "type", "state", "rq-psn", "sq-psn",
                            "path-mig-state", "pdn", "pid", "comm"]
    rc_a = next(q for q in got if q["lqpn"] == w.qa.qp_num)
    assert rc_a == {"ifindex": 0, "ifname": "rxe0", "port": 1, "lqpn": w.qa.qp_num, "rqpn": w.qb.qp_num,
                    "type": "RC", "state": "RTS", "rq-psn": 512, "sq-psn": 256, "path-mig-state": "MIGRATED",
                    "pdn": 0, "pid": w.pid, "comm": w.comm}
    assert list(rc_a) == ["ifindex", "ifname", "port", "lqpn", "rqpn", "type", "state", "rq-psn", "sq-psn",
                          "path-mig-state", "pdn", "pid", "comm"]
    ud = next(q for q in got if q["lqpn"] == w.child_info["qpn"])
    assert list(ud) == ["ifindex", "ifname", "port", "lqpn", "type", "state", "sq-psn", "pdn", "pid", "comm"]
    assert (ud["pid"], ud["comm"], ud["pdn"]) == (w.cpid, w.ccomm, 1)


def test_resource_qp_filters(world, capsys):
    w = world
    lines = _qp_lines(w)
    qa, qb, qu, qr = w.qa.qp_num, w.qb.qp_num, w.qu.qp_num, w.qr.qp_num
    s1, s2 = (q.qp_num for q in w.qs)
    cq = w.child_info["qpn"]

    def shown(*args):
        rc, out, err = run(capsys, "res", "show", "qp", *args)
        assert (rc, err) == (0, ""), args
        return out

    assert shown("lqpn", str(qa)) == lines[qa]
    # a range, bounds included (the RESET QP in it comes first: the port-0 pass)
    assert shown("lqpn", f"{qb}-{s1}") == lines[qr] + lines[qb] + lines[qu] + lines[s1]
    assert shown("lqpn", f"{qa},{cq}") == lines[qa] + lines[cq]
    assert shown("type", "ud") == lines[qu] + lines[cq]                          # case-insensitive
    assert shown("state", "RESET,init") == lines[qr] + lines[s1] + lines[s2]
    assert shown("pid", str(w.cpid)) == lines[cq]
    assert shown("pdn", "1") == lines[cq]
    assert shown("rqpn", str(qb)) == lines[qa]                                   # only RC/UC have an rqpn
    assert shown("sq-psn", "512", "link", "rxe0/1") == lines[qb]
    assert shown("link", "rxe0/1", "st", "rts", "ty", "rc") == lines[qa] + lines[qb]   # filter prefixes
    assert shown("path-mig-state", "armed") == ""
    for args, msg in ((["foo", "1"], "Unsupported filter option: foo"),
                      (["lqpn"], "No filter data was supplied to filter option lqpn"),
                      (["lqpn", "1", "type"], "There is filter option without data"),
                      (["lqpn", "x"], 'lqpn filter accepts "1234567890,-" characters only'),
                      (["link", "rxe9"], "Wrong device name"),
                      (["link", "rxe0/0"], "Wrong device name")):
        assert run(capsys, "res", "show", "qp", *args) == (1, "", msg + "\n"), args
    assert run(capsys, "-j", "res", "show", "qp", "lqpn", "999") == (0, "[]\n", "")


def test_resource_cq_mr_pd_ctx_srq(world, capsys):
    w = world
    me = f"pid {w.pid} comm {w.comm} "
    him = f"pid {w.cpid} comm {w.ccomm} "
    assert run(capsys, "res", "show", "cq") == (0, (
        f"dev rxe0 cqn 0 cqe 31 users 3 adaptive-moderation off ctxn 0 {me}\n"
        f"dev rxe0 cqn 1 cqe 127 users 9 adaptive-moderation off ctxn 0 {me}\n"
        f"dev rxe0 cqn 2 cqe 127 users 2 adaptive-moderation off ctxn 1 {him}\n"), "")
    assert run(capsys, "res", "show", "cq", "dev", "rxe0", "users", "2-3")[1].count("\n") == 2
    assert run(capsys, "res", "show", "cq", "cqn", "1")[1].startswith("dev rxe0 cqn 1 cqe 127 users 9 ")
    cq = json.loads(run(capsys, "-j", "res", "show", "cq", "ctxn", "1")[1])
    assert cq == [{"ifindex": 0, "ifname": "rxe0", "cqn": 2, "cqe": 127, "users": 2, "adaptive-moderation": False,
                   "ctxn": 1, "pid": w.cpid, "comm": w.ccomm}]
    assert list(cq[0]) == ["ifindex", "ifname", "cqn", "cqe", "users", "adaptive-moderation", "ctxn", "pid", "comm"]
    assert run(capsys, "res", "show", "cq", "link", "rxe0/1") == (1, "", "Unsupported filter option: link\n")
    assert run(capsys, "res", "show", "cq", "dev", "rxe9") == (1, "", "Wrong device name - rxe9\n")

    # keys only for CAP_NET_ADMIN, as the kernel sends them
    def keys(r, lk):
        return f"rkey 0x{r:x} lkey 0x{lk:x} " if w.keys else ""
    ci = w.child_info
    assert run(capsys, "res", "show", "mr") == (0, (
        f"dev rxe0 mrn 0 {keys(w.mr.rkey, w.mr.lkey)}mrlen 65536 pdn 0 {me}\n"
        f"dev rxe0 mrn 1 {keys(ci['rkey'], ci['lkey'])}mrlen 4096 pdn 1 {him}\n"), "")
    mr = json.loads(run(capsys, "-j", "res", "show", "mr", "mrlen", "4096")[1])
    assert [m["mrn"] for m in mr] == [1]
    if w.keys:
        assert mr[0]["rkey"] == format(ci["rkey"], "x") and mr[0]["lkey"] == format(ci["lkey"], "x")
        assert list(mr[0]) == ["ifindex", "ifname", "mrn", "rkey", "lkey", "mrlen", "pdn", "pid", "comm"]

    dma = "local_dma_lkey 0x0 " if w.keys else ""
    assert run(capsys, "res", "show", "pd") == (0, (
        f"dev rxe0 pdn 0 {dma}users 8 ctxn 0 {me}\n"
        f"dev rxe0 pdn 1 {dma}users 2 ctxn 1 {him}\n"), "")
    pd = json.loads(run(capsys, "-j", "res", "show", "pd", "pid", str(w.pid))[1])
    assert list(pd[0]) == ["ifindex", "ifname", "pdn"] + (["local_dma_lkey"] if w.keys else []) + \
        ["users", "ctxn", "pid", "comm"]
    assert pd[0]["users"] == 8 and (not w.keys or pd[0]["local_dma_lkey"] == "0")

    assert run(capsys, "res", "show", "ctx") == (0, f"dev rxe0 ctxn 0 {me}\ndev rxe0 ctxn 1 {him}\n", "")
    assert json.loads(run(capsys, "-j", "res", "show", "ctx", "ctxn", "1")[1]) == [
        {"ifindex": 0, "ifname": "rxe0", "ctxn": 1, "pid": w.cpid, "comm": w.ccomm}]

    s1, s2 = (q.qp_num for q in w.qs)
    assert run(capsys, "res", "show", "srq") == (0, f"dev rxe0 srqn 0 type BASIC lqpn {s1}-{s2} pdn 0 {me}\n", "")
    assert run(capsys, "res", "show", "srq", "lqpn", str(s2)) == (
        0, f"dev rxe0 srqn 0 type BASIC lqpn {s2} pdn 0 {me}\n", "")
    assert run(capsys, "res", "show", "srq", "lqpn", "1") == (0, "", "")
    srq = json.loads(run(capsys, "-j", "res", "show", "srq")[1])
    assert srq == [{"ifindex": 0, "ifname": "rxe0", "srqn": 0, "type": "BASIC", "lqpn": [f"{s1}-{s2}"], "pdn": 0,
                    "pid": w.pid, "comm": w.comm}]


def test_resource_cm_id_none_yet(world, capsys):
    assert run(capsys, "res", "show", "cm_id") == (0, "", "")
    assert run(capsys, "-j", "res", "show", "cm_id", "link", "rxe0/1") == (0, "[]\n", "")
    assert run(capsys, "-j", "-p", "res", "show", "cm_id") == (0, "[ ]\n", "")
    assert run(capsys, "res", "show", "cm_id", "bogus", "1") == (1, "", "Unsupported filter option: bogus\n")


def test_batch(world, tmp_path, capsys):
    f = tmp_path / "cmds"
    f.write_text("link show rxe0/1\n# a comment\n\ndev show rxe9\nres\n")
    rc, out, err = run(capsys, "-b", str(f))
    assert rc == 1 and out == "link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo \n"
    assert err == f"Wrong device name - rxe9\nCommand failed {f}:4\n"
    rc, out, err = run(capsys, "--force", "-b", str(f))          # getopt: "-force" would be -f -o ...
    assert rc == 0 and out.endswith("0: rxe0: pd 2 cq 3 qp 7 cm_id 0 mr 2 ctx 2 srq 1 \n")
    assert run(capsys, "-force", "-b", str(f)) == (1, USAGE, "Unknown option.\n")


# ------------------------------------------------------------------ link add / delete
# names and an address of this test run's own: another run on the host must not share them
NETDEV = f"srdma-t{os.getpid() % 100000}"
NETDEV_ADDR = f"10.99.{os.getpid() % 250}.1/24"


def _dummy_netdev():
    """A dummy netdev with an address (a veth pair where the kernel has no
    dummy driver); root only -- CI runs as root: there it must work."""
    def no(why):
        if os.environ.get("CI") == "true":
            pytest.fail(f"link add test needs a dummy netdev: {why}")
        pytest.skip(f"needs root to create a dummy netdev ({why})")
    if os.geteuid() != 0:
        no("not root")
    subprocess.run(["ip", "link", "del", NETDEV], capture_output=True)
    made = subprocess.run(["ip", "link", "add", NETDEV, "type", "dummy"], capture_output=True, text=True)
    if made.returncode:
        veth = subprocess.run(["ip", "link", "add", NETDEV, "type", "veth", "peer", "name", NETDEV + "p"],
                              capture_output=True, text=True)
        if veth.returncode:
            no(f"ip link add: {made.stderr.strip()} / {veth.stderr.strip()}")
        subprocess.run(["ip", "link", "set", NETDEV + "p", "up"], capture_output=True)
    for cmd in (["ip", "addr", "add", NETDEV_ADDR, "dev", NETDEV], ["ip", "link", "set", NETDEV, "up"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            subprocess.run(["ip", "link", "del", NETDEV], capture_output=True)
            no(f"{' '.join(cmd)}: {r.stderr.strip()}")


def test_link_add_and_delete(monkeypatch, capsys):
    _dummy_netdev()
    run_dir = _run_dir()
    monkeypatch.setenv("SOFTRDMA_RUN", run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    d = Daemon(run_dir)
    try:
        ifindex = int(open(f"/sys/class/net/{NETDEV}/ifindex").read())
        mac = bytes.fromhex(open(f"/sys/class/net/{NETDEV}/address").read().strip().replace(":", ""))
        eui = bytes([mac[0] ^ 2, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]])
        guid = ":".join(eui[i:i + 2].hex() for i in range(0, 8, 2))
        assert run(capsys, "link", "add", "rxe1", "type", "rxe", "netdev", NETDEV) == (0, "", "")
        assert run(capsys, "link") == (0, "link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo \n"
                                          f"link rxe1/1 state ACTIVE physical_state LINK_UP netdev {NETDEV} \n", "")
        assert json.loads(run(capsys, "-j", "link", "show", "rxe1/1")[1]) == [
            {"ifindex": 1, "ifname": "rxe1", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP",
             "netdev": NETDEV, "netdev_index": ifindex}]
        assert run(capsys, "dev", "show", "rxe1") == (
            0, f"1: rxe1: node_type ca node_guid {guid} sys_image_guid {guid} \n", "")
        assert run(capsys, "res", "show", "rxe1") == (0, "1: rxe1: pd 0 cq 0 qp 0 cm_id 0 mr 0 ctx 0 srq 0 \n", "")
        # NEWLINK/DELLINK need CAP_NET_ADMIN (RDMA_NL_ADMIN_PERM, checked before anything else)
        drop = ["setpriv", "--bounding-set", "-net_admin", "--inh-caps", "-net_admin", sys.executable, "-m",
                "softrdma", "rdma"]
        for args in (["link", "add", "rxe3", "type", "rxe", "netdev", NETDEV], ["link", "delete", "rxe1"],
                     ["link", "set", "rxe1", "faults", "loss", "1%"]):
            r = subprocess.run(drop + args, capture_output=True, text=True, env=dict(os.environ), timeout=60)
            assert (r.returncode, r.stdout, r.stderr) == (1, "", "error: Operation not permitted\n"), args
        assert "rxe1" in run(capsys, "link")[1] and "rxe3" not in run(capsys, "link")[1]
        # the kernel's errors, in nldev_newlink's order
        assert run(capsys, "link", "add", "rxe1", "type", "rxe", "netdev", NETDEV) == (1, "", "error: File exists\n")
        assert run(capsys, "link", "add", "rxe2", "type", "rxe", "netdev", NETDEV) == (1, "", "error: File exists\n")
        assert run(capsys, "link", "add", "rxe2", "type", "siw", "netdev", NETDEV) == (
            1, "", "error: Invalid argument\n")
        assert run(capsys, "link", "add", "rxe2", "type", "rxe", "netdev", "nosuchdev0") == (
            1, "", "error: No such device\n")
        assert run(capsys, "link", "add", "rxe%d", "type", "rxe", "netdev", NETDEV) == (
            1, "", "error: Invalid argument\n")
        # the tool's own argument errors
        assert run(capsys, "link", "add") == (1, "", "Please provide a link name to add.\n")
        assert run(capsys, "link", "add", "rxe2") == (0, LINK_USAGE, "")
        assert run(capsys, "link", "add", "rxe2", "type") == (1, "", "Please provide a link type name.\n")
        assert run(capsys, "link", "add", "rxe2", "type", "rxe") == (0, LINK_USAGE, "")
        assert run(capsys, "link", "add", "rxe2", "type", "rxe", "netdev") == (
            1, "", "Please provide a net device name.\n")
        assert run(capsys, "link", "add", "rxe2", "kind", "rxe") == (0, "", "Unknown parameter 'kind'.\n")
        assert run(capsys, "link", "delete") == (1, "", "Please provide device name.\n")
        assert run(capsys, "link", "delete", "rxe9") == (1, "", "Wrong device name - rxe9\n")
        assert run(capsys, "link", "delete", "rxe1", "now") == (1, "", "Unknown parameter now\n")
        assert run(capsys, "link", "delete", "rxe1") == (0, "", "")
        assert run(capsys, "link") == (0, "link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo \n", "")
        # re-added, it gets the next index (the kernel's are cyclic too)
        assert run(capsys, "link", "add", "rxe1", "type", "rxe", "netdev", NETDEV) == (0, "", "")
        assert run(capsys, "dev")[1].splitlines()[1].startswith("2: rxe1: node_type ca ")
        assert run(capsys, "-j", "link", "del", "rxe1") == (0, "[]\n", "")
    finally:
        d.stop()
        subprocess.run(["ip", "link", "del", NETDEV], capture_output=True)
