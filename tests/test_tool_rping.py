"""rping (softrdma.tools.rping), checked against docs/formats/rping.md (from
librdmacm/examples/rping.c), not against the module:

* the usage text, the option checks and their exit codes, no traceback;
* server and client as two processes on one softrdmad and across two
  network namespaces (two daemons, real UDP): ``-C 10 -v -V``, every ping
  line rebuilt from the documented pattern, the DISCONNECT lines, exit 0;
* ``-q`` (self-created QP moved with rdma_init_qp_attr) and ``-P``;
* the wire: a peer written here from the documented protocol (a
  ``struct rping_rdma_info`` per SEND, RDMA READ of the client's source
  buffer, RDMA WRITE into its sink) serves the real client;
* a client without a server: ``cma event RDMA_CM_EVENT_REJECTED, error 8``,
  exit 255.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import time

import pytest

from daemon_helpers import daemon_in_shm, wait_cm_listening
from netns_helpers import TwoHosts, need_root
from wait_helpers import DEADLINE_S, free_port

USAGE_FIRST = "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n"


def ping_text(i: int, size: int = 64) -> str:
    """What the client writes for ping ``i`` (rping.md): "rdma-ping-%d: ",
    then letters from 65 + i (mod the 65..122 cycle) counting up with wrap,
    size - 1 characters in all."""
    head = f"rdma-ping-{i}: "
    c = 65 + i % 58
    out = []
    for _ in range(size - 1 - len(head)):
        out.append(chr(c))
        c = 65 if c >= 122 else c + 1
    return head + "".join(out)


def rping(args, env, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "softrdma", "rping", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("rping") as d:
        yield d


def env_of(daemon) -> dict:
    return {**daemon.env, "SOFTRDMA_AUTOSTART": "0"}


def run_pair(srv_args, cli_args, env, run_dir, popen=None):
    """Start the server on a port of its own, wait until the daemon in
    ``run_dir`` has it listening, then run the client; both results.  (A
    wildcard listener is seen when its cm_id exists, a moment before it
    listens: a client REJECTED then is run again, within the deadline.)"""
    port = str(free_port())
    popen = popen or (lambda i, a, **kw: subprocess.Popen([sys.executable, "-m", "softrdma", "rping", *a],
                                                          env=env, **kw))
    srv = popen(0, [*srv_args, "-p", port], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_cm_listening(run_dir, int(port), srv)
        end = time.monotonic() + DEADLINE_S
        while True:
            cli = popen(1, [*cli_args, "-p", port], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            cout, cerr = cli.communicate(timeout=DEADLINE_S)
            if not (cli.returncode == 255 and "RDMA_CM_EVENT_REJECTED" in cerr) or time.monotonic() > end:
                break
        sout, serr = srv.communicate(timeout=DEADLINE_S)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return (cli.returncode, cout, cerr), (srv.returncode, sout, serr)


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize("args,code,out,err", [
    ([], 22, USAGE_FIRST, ""),
    (["-x"], 22, USAGE_FIRST, ""),
    (["-t", "3", "-s"], 22, USAGE_FIRST, ""),              # in the getopt string, no case: usage
    (["-s", "-a"], 22, USAGE_FIRST, ""),                    # missing argument (opterr = 0: silent)
    (["-s", "-S", "25"], 22, "", "Invalid size 25 (valid range is 26 to 65536)\n"),
    (["-s", "-S", "65536"], 22, "", "Invalid size 65536 (valid range is 26 to 65536)\n"),
    (["-s", "-C", "-1"], 22, "", "Invalid count -1\n"),
    (["-c", "-a", "no-such-host.invalid"], 254,
     "getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n", ""),
])
def test_bad_arguments(args, code, out, err):
    r = rping(args, {**os.environ, "SOFTRDMA_AUTOSTART": "0"})
    assert r.returncode == code, r
    assert r.stdout.startswith(out) and r.stderr == err, r
    if out == USAGE_FIRST:
        assert "\t-q\t\tuse self-created, self-modified QP\n" in r.stdout
    assert "Traceback" not in r.stderr


def test_later_option_clears_an_earlier_error():
    """rping.c's ``ret`` is overwritten by the next -a/-I/-S/-C: a bad size
    followed by a good count still runs (here: to the missing -s/-c)."""
    r = rping(["-S", "5", "-C", "2"], {**os.environ, "SOFTRDMA_AUTOSTART": "0"})
    assert r.returncode == 22 and r.stderr.startswith("Invalid size 5") and r.stdout.startswith(USAGE_FIRST)


# --------------------------------------------------------------------------- one daemon
def check_pings(cout, sout, n=10, size=64):
    assert cout == "".join(f"ping data: {ping_text(i, size)}\n" for i in range(n)), cout
    assert sout == "".join(f"server ping data: {ping_text(i, size)}\n" for i in range(n)), sout


def test_client_server_one_daemon(daemon):
    (crc, cout, cerr), (src, sout, serr) = run_pair(["-s", "-v", "-a", "127.0.0.1"],
                                                    ["-c", "-v", "-V", "-C", "10", "-a", "127.0.0.1"],
                                                    env_of(daemon), daemon.run_dir)
    assert crc == 0 and src == 0, (cerr, serr)
    check_pings(cout, sout)
    # the server's loop ends on the DISCONNECTED event (state 10)
    assert serr == "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n", serr
    assert cerr in ("", "client DISCONNECT EVENT...\n"), cerr


def test_self_created_qp_and_size(daemon):
    (crc, cout, cerr), (src, sout, serr) = run_pair(["-s", "-q", "-v"],
                                                    ["-c", "-q", "-V", "-v", "-S", "26", "-C", "3", "-a", "127.0.0.1"],
                                                    env_of(daemon), daemon.run_dir)
    assert crc == 0 and src == 0, (cerr, serr)
    check_pings(cout, sout, n=3, size=26)


def test_persistent_server_serves_one_client_after_another(daemon):
    env = env_of(daemon)
    port = str(free_port())
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", "rping", "-s", "-P", "-a", "127.0.0.1", "-p", port],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_cm_listening(daemon.run_dir, int(port), srv)
        for _ in range(2):
            r = rping(["-c", "-V", "-v", "-C", "2", "-a", "127.0.0.1", "-p", port], env)
            assert r.returncode == 0, r
            assert r.stdout.count("ping data: ") == 2
        assert srv.poll() is None                       # -P: still listening
    finally:
        srv.kill()
        srv.wait()


def test_no_server_is_rejected(daemon):
    r = rping(["-c", "-C", "1", "-a", "127.0.0.1", "-p", str(free_port())], env_of(daemon))
    assert r.returncode == 255, r
    lines = r.stderr.splitlines()
    assert lines[0] == "cma event RDMA_CM_EVENT_REJECTED, error 8", r.stderr      # IB_CM_REJ_INVALID_SERVICE_ID
    assert lines[1:] == ["wait for CONNECTED state 4", "connect error -1"], r.stderr
    assert "Traceback" not in r.stderr


# --------------------------------------------------------------------------- the wire, from the doc
INFO = struct.Struct(">QII")


def test_wire_protocol_against_a_peer_written_from_the_doc(daemon):
    """A server made here with the pyverbs CM API: it checks every SEND
    the real client makes and moves the data as rping.md says."""
    os.environ["SOFTRDMA_RUN"] = daemon.run_dir
    from softrdma.pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
    from softrdma.pyverbs.cq import CQ
    from softrdma.pyverbs.enums import (
        IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC, IBV_WC_RECV,
        IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
    )
    from softrdma.pyverbs.librdmacm_enums import (
        RAI_PASSIVE, RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_ESTABLISHED,
    )
    from softrdma.pyverbs.mr import MR
    from softrdma.pyverbs.qp import QPCap, QPInitAttr
    from softrdma.pyverbs.wr import SGE, RecvWR, SendWR

    ch = CMEventChannel()
    lid = CMID(creator=ch)
    port = str(free_port())
    lid.bind_addr(AddrInfo(src="127.0.0.1", src_service=port, flags=RAI_PASSIVE))
    lid.listen(1)
    client = subprocess.Popen([sys.executable, "-m", "softrdma", "rping", "-c", "-v", "-V", "-C", "2", "-S", "40",
                               "-a", "127.0.0.1", "-p", port], env=env_of(daemon), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        ev = CMEvent(ch, timeout=60)
        assert ev.event_type == RDMA_CM_EVENT_CONNECT_REQUEST
        conn = ev.event.conn
        # rping_init_conn_param: responder resources 1, initiator depth 1, retry 7, RNR retry 7
        assert (conn.get("responder_resources"), conn.get("initiator_depth")) == (1, 1), conn
        cid = CMID(creator=ev, listen_id=lid)
        ev.ack_cm_event()
        cq = CQ(cid.context, 32)
        cid.create_qp(QPInitAttr(IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(16, 2, 1, 1)))
        qp = cid.qp
        recv = MR(cid.pd, 16, IBV_ACCESS_LOCAL_WRITE)
        send = MR(cid.pd, 16, 0)
        sink = MR(cid.pd, 40, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)

        def post_recv():
            qp.post_recv(RecvWR(1, 1, [SGE(recv.buf, 16, recv.lkey)]))

        def wait(opcode=None):
            end = time.monotonic() + 60
            while time.monotonic() < end:
                n, wcs = cq.poll(1)
                if n:
                    assert wcs[0].status == 0, wcs[0].status
                    if opcode is None or wcs[0].opcode == opcode:
                        return wcs[0]
                else:
                    time.sleep(0.001)
            raise AssertionError("no completion")

        def post(opcode, mr, length, addr=0, rkey=0):
            wr = SendWR(2, opcode, 1, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=2)
            if opcode != IBV_WR_SEND:
                wr.set_wr_rdma(rkey, addr)
            qp.post_send(wr)

        post_recv()
        cid.accept(ConnParam(retry=7, rnr_retry=7))
        ev = CMEvent(ch, timeout=60)
        assert ev.event_type == RDMA_CM_EVENT_ESTABLISHED
        ev.ack_cm_event()
        for i in range(2):
            wc = wait(IBV_WC_RECV)
            assert wc.byte_len == 16
            buf, rkey, size = INFO.unpack(recv.read(16, 0))
            seen.append(("source", size))
            post_recv()
            post(IBV_WR_RDMA_READ, sink, size, buf, rkey)
            wait()
            data = sink.read(40, 0)
            assert data == ping_text(i, 40).encode() + b"\0", data
            post(IBV_WR_SEND, send, 16)                          # go ahead
            wc = wait(IBV_WC_RECV)
            sbuf, srkey, ssize = INFO.unpack(recv.read(16, 0))
            assert ssize == 40 and sbuf != buf
            seen.append(("sink", ssize))
            post_recv()
            post(IBV_WR_RDMA_WRITE, sink, 40, sbuf, srkey)      # strlen + 1 = 40
            wait()
            post(IBV_WR_SEND, send, 16)                          # go ahead
        cout, cerr = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        lid.close()
    assert seen == [("source", 40), ("sink", 40)] * 2
    assert client.returncode == 0, cerr
    assert cout == "".join(f"ping data: {ping_text(i, 40)}\n" for i in range(2))


# --------------------------------------------------------------------------- two hosts
def test_across_two_namespaces():
    need_root()
    h = TwoHosts()
    try:
        h.start_daemons()

        def popen(i, args, **kw):
            return h.popen(i, [sys.executable, "-m", "softrdma", "rping", *args], **kw)
        (crc, cout, cerr), (src, sout, serr) = run_pair(
            ["-s", "-v", "-a", h.ip[0]], ["-c", "-v", "-V", "-C", "10", "-a", h.ip[0], "-I", h.ip[1]], None,
            h.run_dirs[0], popen=popen)
        assert crc == 0 and src == 0, (cerr, serr)
        check_pings(cout, sout)
        assert serr.startswith("server DISCONNECT EVENT...\n"), serr
    finally:
        h.close()



