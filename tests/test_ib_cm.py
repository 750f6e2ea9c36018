"""rdma_cm on a host whose RDMA devices are InfiniBand devices only: IP
addresses need IPoIB, which IB devices do not have, so resolving one
fails at once with librdmacm's address error, and neither binds to an IB
device by way of the loopback (cma_bind_loopback) nor hangs.  GIDs (AF_IB)
do reach the IB device: their errors without an SM are here, the rest with
a live fabric and SMs in test_ib_cma.py."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from ib_helpers import add_ib, control, daemon, fake  # noqa: F401 (fixtures)


@pytest.fixture
def ib_only(daemon):
    assert add_ib(daemon.run_dir, "mlx5_0", "fab", "h1")["errno"] == 0
    assert control(daemon.run_dir, "link_delete", name="rxe0")["errno"] == 0
    return daemon


@pytest.mark.parametrize("dst", ["127.0.0.1", "::1"])
def test_resolve_addr_of_an_ip_on_an_ib_only_host_fails_at_once(ib_only, dst):
    from softrdma.verbs.cm import CmId, EventChannel
    ch = EventChannel()
    cid = CmId(ch)
    try:
        cid.resolve_addr(None, dst, 7700)
        ev = ch.get_event(10)
        assert ev.event_str == "RDMA_CM_EVENT_ADDR_ERROR" and ev.status == -errno.ENODEV, (ev.event_str, ev.status)
        # the ID is back where it was (bound, no device): resolving again fails the same
        cid.resolve_addr(None, dst, 7700)
        ev = ch.get_event(10)
        assert ev.event_str == "RDMA_CM_EVENT_ADDR_ERROR" and ev.status == -errno.ENODEV
    finally:
        cid.destroy()
        ch.close()


def test_a_wildcard_listen_covers_the_ib_device_but_no_ip_resolves_to_it(ib_only):
    """A listen bound to no address is on every device, the IB one too
    (cma_listen_on_all); a client of the same host still gets no route to it."""
    from softrdma.verbs.cm import CmId, EventChannel
    ch = EventChannel()
    srv, cli = CmId(ch), CmId(ch)
    try:
        srv.bind_addr("0.0.0.0", 7701)
        srv.listen(4)
        cli.resolve_addr(None, "127.0.0.1", 7701)
        ev = ch.get_event(10)
        assert ev.event_str == "RDMA_CM_EVENT_ADDR_ERROR" and ev.status == -errno.ENODEV, (ev.event_str, ev.status)
    finally:
        cli.destroy()
        srv.destroy()
        ch.close()


def test_rping_by_ip_on_an_ib_only_host_reports_the_address_error(ib_only):
    """rping resolves an IP address: on IB devices (no IPoIB) it says so as
    rping does for an ADDR_ERROR event, and exits at once."""
    r = subprocess.run([sys.executable, "-m", "softrdma", "rping", "-c", "-C", "1", "-a", "127.0.0.1", "-p", "7702"],
                       env={**ib_only.env, "SOFTRDMA_AUTOSTART": "0"}, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"cma event RDMA_CM_EVENT_ADDR_ERROR, error {-errno.ENODEV}\n" in r.stderr, r.stdout + r.stderr


def test_af_ib_addresses_on_the_ib_device(ib_only, fake):
    """AF_IB (GIDs) on the IB device, without an SM: a bind to a GID no port
    has and a destination of another subnet fail ENODEV at once; the port's
    own GID resolves; with the port not Active (no SM address) the route
    query cannot go out: EAGAIN from rdma_resolve_route, as the kernel's
    ib_sa_path_rec_get; nor can a multicast join's SA Set (MULTICAST_ERROR
    -EAGAIN); a TCP ID's join has no Q_Key without IPoIB (EADDRNOTAVAIL)."""
    import ipaddress

    from ib_helpers import link
    from softrdma.verbs.cm import AF_IB, RDMA_PS_UDP, CmId, EventChannel
    from softrdma.verbs.errors import PyverbsRDMAError
    from wait_helpers import wait_for

    gid = str(ipaddress.IPv6Address(bytes.fromhex(link(ib_only.run_dir, "mlx5_0")["gids"][0])))
    ch = EventChannel()
    ids = [CmId(ch) for _ in range(3)]
    try:
        with pytest.raises(PyverbsRDMAError) as e:
            ids[0].bind_addr("fe80::dead:beef", 0, AF_IB)
        assert e.value.error_code == errno.ENODEV
        with pytest.raises(PyverbsRDMAError) as e:
            ids[1].resolve_addr(None, "fe90::1", 7703, family=AF_IB)
        assert e.value.error_code == errno.ENODEV
        ids[2].bind_addr(gid, 7704, AF_IB)
        assert ids[2].info["src"] == {"family": AF_IB, "ip": gid, "port": 7704, "pkey": 0xFFFF,
                                      "sid": 0x1060000 | 7704} and ids[2].info["device"] == "mlx5_0"
        fake.set("h1", state=2)                       # Initialize: no SM address handle
        wait_for(lambda: link(ib_only.run_dir, "mlx5_0")["port_attr"]["state"] == 2, 30, "the port in Init")
        ids[2].resolve_addr(None, gid, 7705, family=AF_IB)
        ev = ch.get_event(10)
        assert ev.event_str == "RDMA_CM_EVENT_ADDR_RESOLVED", (ev.event_str, ev.status)
        with pytest.raises(PyverbsRDMAError) as e:
            ids[2].resolve_route()
        assert e.value.error_code == errno.EAGAIN
        with pytest.raises(PyverbsRDMAError) as e:    # RDMA_PS_TCP: the Q_Key would be IPoIB's
            ids[2].join_multicast("239.1.2.3")
        assert e.value.error_code == errno.EADDRNOTAVAIL
        ud = CmId(ch, RDMA_PS_UDP)
        ids.append(ud)
        ud.bind_addr(gid, 7706, AF_IB)
        ud.join_multicast("ff12:4d43::1")             # the SA join cannot go out either
        ev = ch.get_event(10)
        assert (ev.event_str, ev.status) == ("RDMA_CM_EVENT_MULTICAST_ERROR", -errno.EAGAIN)
    finally:
        for i in ids:
            i.destroy()
        ch.close()
