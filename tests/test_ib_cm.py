"""rdma_cm on a host whose RDMA devices are InfiniBand devices only: IP
addresses need IPoIB, which IB devices do not have, so resolving one
fails at once with librdmacm's address error, and neither binds to an IB
device by way of the loopback (cma_bind_loopback) nor hangs."""

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
