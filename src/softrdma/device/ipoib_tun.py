"""The Linux network interface of an IPoIB port: a TUN device.

The kernel's IPoIB driver registers an ARPHRD_INFINIBAND netdev whose
hard_header puts the 20-byte destination address before each packet, and
its neighbour code (ARP, ND) runs in the kernel.  A user-space device can
only have a TUN (or TAP) device: ``IFF_TUN | IFF_NO_PI`` -- packets are
bare IP datagrams, the interface has no link-layer header and no
link-layer address (``link/none``, IFF_NOARP, IFF_POINTOPOINT); TAP would
give it an Ethernet header IPoIB does not have.  So ARP and neighbour
discovery run in the daemon (``device.ipoib``), which reads each
datagram the kernel routes out of the interface and picks its IPoIB
destination itself.

``Tun`` opens ``/dev/net/tun`` (TUNSETIFF), sets the MTU (SIOCSIFMTU),
the carrier (TUNSETCARRIER: the port's state), brings it up, and reads
and writes datagrams without blocking.  The device lives as long as the
file descriptor: a daemon that ends takes its interfaces with it.

``ip_memberships`` reads the interface's IP multicast groups from
``/proc/net/igmp`` and ``/proc/net/igmp6``: a TUN device is never told of
them (the kernel's ipoib has ndo_set_rx_mode), so the interface looks
once a second (``IpoibIf.poll_memberships``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct

TUNSETIFF = 0x400454CA
TUNSETCARRIER = 0x400454E2
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
SIOCGIFFLAGS, SIOCSIFFLAGS, SIOCSIFMTU, SIOCGIFINDEX = 0x8913, 0x8914, 0x8922, 0x8933
IFF_UP = 0x1
IFNAMSIZ = 16
MAX_READ = 64                         # datagrams one ``read_all`` takes


def _ifreq(name: str, fmt: str = "", *vals) -> bytes:
    return struct.pack(f"{IFNAMSIZ}s{fmt}", name.encode(), *vals).ljust(40, b"\0")


class Tun:
    """One TUN interface (IFF_TUN | IFF_NO_PI) named ``name``."""

    def __init__(self, name: str, mtu: int):
        if len(name.encode()) >= IFNAMSIZ:
            raise OSError(errno.EINVAL, f"interface name {name!r} too long")
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            got = fcntl.ioctl(fd, TUNSETIFF, _ifreq(name, "H", IFF_TUN | IFF_NO_PI))
        except OSError:
            os.close(fd)
            raise
        self.fd = fd
        self.name = got[:IFNAMSIZ].rstrip(b"\0").decode()
        self._ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.index = struct.unpack_from("i", fcntl.ioctl(self._ctl, SIOCGIFINDEX, _ifreq(self.name)), IFNAMSIZ)[0]
        self.carrier = None
        self.set_carrier(False)
        self.set_mtu(mtu)
        self.up()

    def fileno(self) -> int:
        return self.fd

    def set_mtu(self, mtu: int) -> None:
        fcntl.ioctl(self._ctl, SIOCSIFMTU, _ifreq(self.name, "i", mtu))
        self.mtu = mtu

    def up(self) -> None:
        flags = struct.unpack_from("H", fcntl.ioctl(self._ctl, SIOCGIFFLAGS, _ifreq(self.name)), IFNAMSIZ)[0]
        fcntl.ioctl(self._ctl, SIOCSIFFLAGS, _ifreq(self.name, "H", flags | IFF_UP))

    def set_carrier(self, on: bool) -> None:
        """The interface's carrier (``ip link``: NO-CARRIER, operstate DOWN without it)."""
        if on != self.carrier:
            fcntl.ioctl(self.fd, TUNSETCARRIER, struct.pack("i", 1 if on else 0))
            self.carrier = on

    def read_all(self) -> list[bytes]:
        """The datagrams the kernel routed out of the interface, waiting now."""
        out = []
        for _ in range(MAX_READ):
            try:
                out.append(os.read(self.fd, 65536))
            except (BlockingIOError, InterruptedError):
                break
        return out

    def write(self, datagram) -> bool:
        """One datagram into the kernel's stack, as received on the interface; False if dropped."""
        try:
            os.write(self.fd, datagram)
            return True
        except OSError:
            return False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            self._ctl.close()


def ip_memberships(ifname: str) -> tuple[set[bytes], set[bytes]]:
    """(IPv4 groups, IPv6 groups) the interface is a member of, as 4- and 16-byte addresses."""
    v4: set[bytes] = set()
    v6: set[bytes] = set()
    try:
        with open("/proc/net/igmp") as f:
            cur = None
            for line in f.readlines()[1:]:
                if not line.startswith("\t"):
                    parts = line.split()
                    cur = parts[1] if len(parts) > 1 else None
                elif cur == ifname:
                    g = line.split()[0]
                    v4.add(bytes.fromhex(g)[::-1])
    except OSError:
        pass
    try:
        with open("/proc/net/igmp6") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1] == ifname:
                    v6.add(bytes.fromhex(parts[2]))
    except OSError:
        pass
    return v4, v6


__all__ = ["Tun", "ip_memberships"]
