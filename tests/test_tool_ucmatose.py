"""ucmatose (softrdma.tools.ucmatose), checked against docs/formats/ucmatose.md
(from librdmacm/examples/cmatose.c), not against the module:

* the usage text (after glibc's getopt message), exit 1, no traceback; the
  -f/-P warnings; an address getaddrinfo cannot resolve;
* server and client as two processes on one softrdmad and across two
  network namespaces (two daemons, real UDP): ``-c 10 -C 10``, every line
  of both outputs, ``return status 0``;
* ``-C 0`` / ``-S 0`` (no data transfer lines), messages larger than the
  MTU;
* the wire: a client written here from the documented protocol (RC, -C
  receives of -S bytes posted before connecting, the server's -C SENDs of
  -S bytes first, then -C replies, the server's DREQ) against the real
  server;
* a client without a server: ``cmatose: event: RDMA_CM_EVENT_REJECTED,
  error: 8``, ``return status 8``.

udaddy (softrdma.tools.udaddy, docs/formats/udaddy.md) the same way: usage,
``-c 10 -C 10`` on one daemon and across two namespaces (SIDR, UD SENDs
with immediate, the server's reply address from the GRH), UNREACHABLE
without a server, the MTU check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from daemon_helpers import daemon_in_shm, wait_cm_listening
from netns_helpers import TwoHosts, need_root
from wait_helpers import DEADLINE_S, free_port, wait_line

USAGE = ("usage: ucmatose\n"
         "\t[-s server_address]\n"
         "\t[-b bind_address]\n"
         "\t[-f address_format]\n"
         "\t    name, ip, ipv6, or gid\n"
         "\t[-P port_space]\n"
         "\t    tcp or ib\n"
         "\t[-c connections]\n"
         "\t[-C message_count]\n"
         "\t[-S message_size]\n"
         "\t[-t type_of_service]\n"
         "\t[-p port_number]\n"
         "\t[-m(igrate)]\n"
         "\t[-a ack_timeout]\n")

SERVER_OUT = ("cmatose: starting server\n"
              "initiating data transfers\n"
              "completing sends\n"
              "receiving data transfers\n"
              "data transfers complete\n"
              "cmatose: disconnecting\n"
              "disconnected\n"
              "test complete\n"
              "return status 0\n")
CLIENT_OUT = ("cmatose: starting client\n"
              "cmatose: connecting\n"
              "receiving data transfers\n"
              "sending replies\n"
              "data transfers complete\n"
              "test complete\n"
              "return status 0\n")
SERVER_NO_DATA = ("cmatose: starting server\n"
                  "cmatose: disconnecting\n"
                  "disconnected\n"
                  "test complete\n"
                  "return status 0\n")
CLIENT_NO_DATA = ("cmatose: starting client\n"
                  "cmatose: connecting\n"
                  "test complete\n"
                  "return status 0\n")


def cmd(*args):
    return [sys.executable, "-m", "softrdma", "ucmatose", *args]


def ucmatose(args, env, timeout=60):
    return subprocess.run(cmd(*args), capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("ucmatose") as d:
        yield d


def env_of(daemon) -> dict:
    return {**daemon.env, "SOFTRDMA_AUTOSTART": "0"}


def run_pair(srv_args, cli_args, run_dir, env=None, popen=None, port=None):
    """Start the server, wait until the daemon in ``run_dir`` has it
    listening, run the client; both (returncode, stdout, stderr).  ``port``
    None: a free one, given to both with -p (ucmatose); else the port the
    server listens on by itself (udaddy's fixed 7174, in this test's own
    daemon).  A wildcard listener is seen when its cm_id exists, a moment
    before it listens: a client refused then runs again, within the deadline."""
    popen = popen or (lambda i, a, **kw: subprocess.Popen(cmd(*a), env=env, **kw))
    if port is None:
        port = free_port()
        srv_args, cli_args = [*srv_args, "-p", str(port)], [*cli_args, "-p", str(port)]
    srv = popen(0, srv_args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, first = wait_line(srv.stdout, "starting server", proc=srv)
        wait_cm_listening(run_dir, port, srv)
        end = time.monotonic() + DEADLINE_S
        while True:
            cli = popen(1, cli_args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                cout, cerr = cli.communicate(timeout=DEADLINE_S)
            finally:
                if cli.poll() is None:
                    cli.kill()
                    cli.wait()
            refused = "RDMA_CM_EVENT_REJECTED" in cout or "RDMA_CM_EVENT_UNREACHABLE" in cout
            if not refused or time.monotonic() > end:
                break
        sout, serr = srv.communicate(timeout=DEADLINE_S)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return (cli.returncode, cout, cerr), (srv.returncode, "".join(first) + sout, serr)


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize("args,err", [
    (["-x"], "ucmatose: invalid option -- 'x'\n"),
    (["-s"], "ucmatose: option requires an argument -- 's'\n"),
    (["-c", "2", "-C"], "ucmatose: option requires an argument -- 'C'\n"),
    (["--help"], "ucmatose: invalid option -- '-'\n"),
])
def test_bad_arguments_give_the_usage(args, err):
    r = ucmatose(args, {**os.environ, "SOFTRDMA_AUTOSTART": "0"})
    assert (r.returncode, r.stdout, r.stderr) == (1, USAGE, err), r


def test_unresolvable_server_and_warnings(daemon):
    r = ucmatose(["-f", "foo", "-P", "bar", "-s", "no-such-host.invalid"], env_of(daemon))
    assert r.stderr == "Warning: unknown address format\nWarning: unknown port space format\n", r
    assert r.stdout == ("cmatose: starting client\n"
                        "cmatose: getaddrinfo error: Name or service not known\n"
                        "test complete\n"
                        "return status -2\n"), r
    assert r.returncode == 254                                      # EAI_NONAME, as an exit status


def test_numeric_format_refuses_a_name(daemon):
    r = ucmatose(["-f", "ip", "-s", "localhost"], env_of(daemon))
    assert r.returncode == 254 and "cmatose: getaddrinfo error: Name or service not known\n" in r.stdout, r


def test_no_server_is_rejected(daemon):
    r = ucmatose(["-s", "127.0.0.1", "-p", str(free_port())], env_of(daemon))
    assert r.stdout == ("cmatose: starting client\n"
                        "cmatose: connecting\n"
                        "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\n"
                        "test complete\n"
                        "return status 8\n"), r
    assert r.returncode == 8 and "Traceback" not in r.stderr


# --------------------------------------------------------------------------- one daemon
def test_ten_connections_one_daemon(daemon):
    t0 = time.monotonic()
    (crc, cout, cerr), (src, sout, serr) = run_pair(["-c", "10", "-C", "10"],
                                                    ["-s", "127.0.0.1", "-c", "10", "-C", "10"], daemon.run_dir,
                                                    env_of(daemon))
    assert (src, sout, serr) == (0, SERVER_OUT, ""), (sout, serr)
    assert (crc, cout, cerr) == (0, CLIENT_OUT, ""), (cout, cerr)
    assert time.monotonic() - t0 < 15


def test_no_messages_and_big_messages(daemon):
    (crc, cout, cerr), (src, sout, serr) = run_pair(["-c", "3", "-C", "0"],
                                                    ["-s", "127.0.0.1", "-c", "3", "-C", "0"],
                                                    daemon.run_dir, env_of(daemon))
    assert (src, sout, crc, cout) == (0, SERVER_NO_DATA, 0, CLIENT_NO_DATA), (sout, serr, cout, cerr)
    # -S 0 turns the count to 0 (create_message), on each side; -P ib, -t, -a accepted
    (crc, cout, cerr), (src, sout, serr) = run_pair(["-c", "2", "-S", "0", "-P", "ib"],
                                                    ["-s", "127.0.0.1", "-c", "2", "-S", "0", "-P", "ib", "-t", "32",
                                                     "-a", "14"], daemon.run_dir, env_of(daemon))
    assert (src, sout, crc, cout) == (0, SERVER_NO_DATA, 0, CLIENT_NO_DATA), (sout, serr, cout, cerr)
    # several packets per message, bound to an address
    (crc, cout, cerr), (src, sout, serr) = run_pair(["-b", "127.0.0.1", "-c", "4", "-C", "20", "-S", "5000"],
                                                    ["-s", "localhost", "-b", "127.0.0.1", "-c", "4", "-C", "20",
                                                     "-S", "5000"], daemon.run_dir, env_of(daemon))
    assert (src, sout, crc, cout) == (0, SERVER_OUT, 0, CLIENT_OUT), (sout, serr, cout, cerr)


def test_migrate_moves_every_id_to_a_new_channel(daemon):
    """-m: after the transfers every ID (and the server's listener) moves to
    a new event channel (rdma_migrate_id); the disconnect events then come on
    that channel."""
    (crc, cout, cerr), (src, sout, serr) = run_pair(["-m", "-c", "3", "-C", "2"],
                                                    ["-m", "-c", "3", "-C", "2", "-s", "127.0.0.1"],
                                                    daemon.run_dir, env_of(daemon))
    assert src == 0 and crc == 0, (sout, serr, cout, cerr)
    assert sout == SERVER_OUT.replace("data transfers complete\n",
                                      "data transfers complete\nmigrating to new event channel\n"), sout
    assert cout == CLIENT_OUT.replace("data transfers complete\n",
                                      "data transfers complete\nmigrating to new event channel\n"), cout


# --------------------------------------------------------------------------- the wire, from the doc
def test_wire_against_a_client_written_from_the_doc(daemon):
    """A client made here with the pyverbs CM API: it receives the server's
    -C SENDs of -S bytes, replies with as many, and sees the server's
    disconnect."""
    os.environ["SOFTRDMA_RUN"] = daemon.run_dir
    from softrdma.pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
    from softrdma.pyverbs.cq import CQ
    from softrdma.pyverbs.enums import IBV_ACCESS_LOCAL_WRITE, IBV_QPT_RC, IBV_WC_RECV, IBV_WR_SEND
    from softrdma.pyverbs.librdmacm_enums import (
        RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_ESTABLISHED,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
    )
    from softrdma.pyverbs.mr import MR
    from softrdma.pyverbs.qp import QPCap, QPInitAttr
    from softrdma.pyverbs.wr import SGE, RecvWR, SendWR

    count, size = 5, 300
    port = free_port()
    srv = subprocess.Popen(cmd("-C", str(count), "-S", str(size), "-p", str(port)), env=env_of(daemon),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ch = CMEventChannel()
    cid = CMID(creator=ch)
    try:
        assert srv.stdout.readline() == "cmatose: starting server\n"
        wait_cm_listening(daemon.run_dir, port, srv)

        def event(t):
            ev = CMEvent(ch, timeout=60)
            assert ev.event_type == t, ev.event_str()
            ev.ack_cm_event()

        cid.resolve_addr(AddrInfo(dst="127.0.0.1", dst_service=str(port)), 2000)
        event(RDMA_CM_EVENT_ADDR_RESOLVED)
        cid.resolve_route(2000)
        event(RDMA_CM_EVENT_ROUTE_RESOLVED)
        cq = CQ(cid.context, 2 * count)
        cid.create_qp(QPInitAttr(IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(count, count, 1, 1)))
        mr = MR(cid.pd, size + 64, IBV_ACCESS_LOCAL_WRITE)
        for _ in range(count):
            cid.qp.post_recv(RecvWR(1, 1, [SGE(mr.buf, size + 64, mr.lkey)]))
        cid.connect(ConnParam(retry=5, rnr_retry=0))
        event(RDMA_CM_EVENT_ESTABLISHED)
        got = []
        end = time.monotonic() + 60
        while len(got) < count and time.monotonic() < end:
            n, wcs = cq.poll(1)
            if n:
                assert wcs[0].status == 0 and wcs[0].opcode == IBV_WC_RECV
                got.append(wcs[0].byte_len)
        assert got == [size] * count, got
        for _ in range(count):
            cid.qp.post_send(SendWR(2, IBV_WR_SEND, 1, sg=[SGE(mr.buf, size, mr.lkey)], send_flags=2))
        event(RDMA_CM_EVENT_DISCONNECTED)                         # the server's, after all our SENDs
        cid.disconnect()
        sout, serr = srv.communicate(timeout=60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
        cid.close()
        ch.close()
    assert (srv.returncode, "cmatose: starting server\n" + sout, serr) == (0, SERVER_OUT, "")


# --------------------------------------------------------------------------- two hosts
def test_ten_connections_across_two_namespaces():
    need_root()
    h = TwoHosts()
    try:
        h.start_daemons()

        def popen(i, args, **kw):
            return h.popen(i, cmd(*args), **kw)
        (crc, cout, cerr), (src, sout, serr) = run_pair(
            ["-b", h.ip[0], "-c", "10", "-C", "10"], ["-s", h.ip[0], "-b", h.ip[1], "-c", "10", "-C", "10"],
            h.run_dirs[0], popen=popen)
        assert (src, sout, serr) == (0, SERVER_OUT, ""), (sout, serr)
        assert (crc, cout, cerr) == (0, CLIENT_OUT, ""), (cout, cerr)
    finally:
        h.close()


# =========================================================================== udaddy (docs/formats/udaddy.md)
UD_USAGE = ("usage: udaddy\n"
            "\t[-s server_address]\n"
            "\t[-b bind_address]\n"
            "\t[-f address_format]\n"
            "\t    name, ip, ipv6, or gid\n"
            "\t[-P port_space]\n"
            "\t    udp or ipoib\n"
            "\t[-c connections]\n"
            "\t[-C message_count]\n"
            "\t[-S message_size]\n"
            "\t[-t type_of_service]\n"
            "\t[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]\n")
UD_SERVER_OUT = ("udaddy: starting server\n"
                 "receiving data transfers\n"
                 "sending replies\n"
                 "data transfers complete\n"
                 "test complete\n"
                 "return status 0\n")
UD_CLIENT_OUT = ("udaddy: starting client\n"
                 "udaddy: connecting\n"
                 "initiating data transfers\n"
                 "receiving data transfers\n"
                 "data transfers complete\n"
                 "test complete\n"
                 "return status 0\n")


UDADDY_PORT = 7174


def udcmd(*args):
    return [sys.executable, "-m", "softrdma", "udaddy", *args]


def ud_pair(srv_args, cli_args, run_dir, env=None, popen=None):
    """udaddy has no port option (as rdma-core's): it listens on 7174, in
    the test's own daemon, so no other test run shares it."""
    popen = popen or (lambda i, a, **kw: subprocess.Popen(udcmd(*a), env=env, **kw))
    return run_pair(srv_args, cli_args, run_dir, popen=popen, port=UDADDY_PORT)


@pytest.mark.parametrize("args,err", [
    (["-x"], "udaddy: invalid option -- 'x'\n"),
    (["-m"], "udaddy: invalid option -- 'm'\n"),                   # cmatose's, not udaddy's
    (["-s", "127.0.0.1", "-P"], "udaddy: option requires an argument -- 'P'\n"),
])
def test_udaddy_bad_arguments(args, err):
    r = subprocess.run(udcmd(*args), capture_output=True, text=True, timeout=30,
                       env={**os.environ, "SOFTRDMA_AUTOSTART": "0"})
    assert (r.returncode, r.stdout, r.stderr) == (1, UD_USAGE, err), r


def test_udaddy_ten_connections_one_daemon(daemon):
    (crc, cout, cerr), (src, sout, serr) = ud_pair(["-c", "10", "-C", "10"],
                                                   ["-s", "127.0.0.1", "-c", "10", "-C", "10"], daemon.run_dir,
                                                   env_of(daemon))
    assert (src, sout, serr) == (0, UD_SERVER_OUT, ""), (sout, serr)
    assert (crc, cout, cerr) == (0, UD_CLIENT_OUT, ""), (cout, cerr)


def test_udaddy_errors(daemon):
    env = env_of(daemon)
    # nobody listens on 7174: the SIDR REP's status 1 (IB_SIDR_UNSUPPORTED)
    r = subprocess.run(udcmd("-s", "127.0.0.1"), capture_output=True, text=True, timeout=30, env=env)
    assert r.stdout == ("udaddy: starting client\n"
                        "udaddy: connecting\n"
                        "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\n"
                        "test complete\n"
                        "return status 1\n") and r.returncode == 1, r
    # a message larger than the active MTU (lo: 4096)
    r = subprocess.run(udcmd("-s", "127.0.0.1", "-S", "5000"), capture_output=True, text=True, timeout=30, env=env)
    assert r.stdout == ("udaddy: starting client\n"
                        "udaddy: connecting\n"
                        "udaddy: message_size 5000 is larger than active mtu 4096\n"
                        "test complete\n"
                        "return status -22\n") and r.returncode == 234, r
    # -p is the port space: rdma_create_id refuses 0x999, alloc_nodes fails: exit 1, nothing printed
    r = subprocess.run(udcmd("-s", "127.0.0.1", "-p", "0x999"), capture_output=True, text=True, timeout=30, env=env)
    assert (r.returncode, r.stdout) == (1, ""), r
    assert "Traceback" not in r.stderr


def test_udaddy_across_two_namespaces():
    need_root()
    h = TwoHosts()
    try:
        h.start_daemons()

        def popen(i, args, **kw):
            return h.popen(i, udcmd(*args), **kw)
        (crc, cout, cerr), (src, sout, serr) = ud_pair(
            ["-b", h.ip[0], "-c", "10", "-C", "10"], ["-s", h.ip[0], "-b", h.ip[1], "-c", "10", "-C", "10"],
            h.run_dirs[0], popen=popen)
        assert (src, sout, serr) == (0, UD_SERVER_OUT, ""), (sout, serr)
        assert (crc, cout, cerr) == (0, UD_CLIENT_OUT, ""), (cout, cerr)
    finally:
        h.close()
