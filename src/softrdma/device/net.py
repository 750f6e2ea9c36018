"""RoCEv2 over a UDP socket: one bound address of a device port.

Sending: the packet and its ICRC go out with one ``sendmsg`` (no copy of
the packet).  An unconnected IPv4 socket with IP_PMTUDISC_DO makes Linux
emit DF=1 and IP ID 0, so the ICRC over the IPv4 header the receiver will
see is computable here (``wire.icrc.Ipv4Flow``).  The UDP source port is
the socket's (4791): one socket serves every QP, and rxe accepts any source
port.

Receiving: ``recv`` drains the socket into a fixed pool of buffers (no
per-packet allocation), checks the ICRC from the addresses and ports the
socket reports -- FULL for IPv6, for IPv4 with the sender's IP ID recovered
(``wire.icrc.verify``) -- and returns the packets without their ICRC, as
memoryviews into the pool, valid until the next ``recv``.  Bad ICRCs and
short datagrams are dropped and counted, never raised.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass

from ..wire.icrc import ICRC, ROCEV2_UDP_PORT, Ipv4Flow, Verdict, icrc, ipv6_header, udp_header, verify

IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
MAX_DATAGRAM = 9216           # jumbo frames: 4096 MTU packets fit with room to spare
MIN_ROCE_PAYLOAD = 16         # BTH + ICRC


@dataclass
class NetStats:
    tx_packets: int = 0
    tx_bytes: int = 0
    tx_errors: int = 0
    rx_packets: int = 0
    rx_bytes: int = 0
    rx_icrc_errors: int = 0
    rx_short: int = 0
    rx_id_recovered: int = 0     # IPv4 ICRCs checked by recovering the sender's IP ID


def gid_to_ip(gid: bytes) -> str:
    """The IP address a RoCEv2 GID stands for (IPv4-mapped -> dotted quad)."""
    a = ipaddress.IPv6Address(bytes(gid))
    return str(a.ipv4_mapped) if a.ipv4_mapped else str(a)


class RoceSocket:
    def __init__(self, ip: str, port: int = ROCEV2_UDP_PORT, pool: int = 64, rcvbuf: int = 4 << 20):
        addr = ipaddress.ip_address(ip)
        self.ip = str(addr)
        self.v6 = addr.version == 6
        self.ip_bytes = addr.packed
        self.sock = socket.socket(socket.AF_INET6 if self.v6 else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            if not self.v6:
                self.sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
            # A go-back window of 128 packets must fit the receive buffer, or
            # bursts overflow it and every overflow costs a retransmission.
            # The *FORCE options pass net.core.rmem_max (root / CAP_NET_ADMIN).
            for force, opt in ((getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF),
                               (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF)):
                try:
                    self.sock.setsockopt(socket.SOL_SOCKET, force, rcvbuf)
                except OSError:
                    self.sock.setsockopt(socket.SOL_SOCKET, opt, rcvbuf)
            self._bind(port)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.stats = NetStats()
        self._flows: dict[str, Ipv4Flow] = {}
        self._addr_bytes: dict[str, bytes] = {}
        self._pool = [bytearray(MAX_DATAGRAM) for _ in range(pool)]
        self._views = [memoryview(b) for b in self._pool]

    def _bind(self, port: int) -> None:
        """Bind the socket (``device.mcast.McastSocket`` binds a group)."""
        self.sock.bind((self.ip, port))

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    # -- send
    def send(self, pkt, dst_ip: str, dport: int = ROCEV2_UDP_PORT, corrupt_bit: int | None = None) -> bool:
        """Send one packet (BTH .. pad) with its ICRC.  False if the kernel
        refused it (counted; the transport's retransmission covers it).
        ``corrupt_bit``: fault injection -- flip that bit of the packet after
        the ICRC was computed, as a damaged link would."""
        if self.v6:
            dst = ipaddress.IPv6Address(dst_ip).packed
            n = len(pkt) + 4
            crc = icrc(ipv6_header(self.ip_bytes, dst, n), udp_header(self.port, dport, n), pkt)
        else:
            flow = self._flows.get(dst_ip)
            if flow is None or flow.dport != dport:
                flow = self._flows[dst_ip] = Ipv4Flow(self.ip_bytes, socket.inet_aton(dst_ip), self.port, dport)
            crc = flow.icrc(pkt)
        if corrupt_bit is not None:
            pkt = bytearray(pkt)
            pkt[(corrupt_bit >> 3) % len(pkt)] ^= 1 << (corrupt_bit & 7)
        try:
            self.sock.sendmsg([pkt, ICRC.pack(crc)], (), 0, (dst_ip, dport))
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.EMSGSIZE, errno.ECONNREFUSED,
                               errno.ENETUNREACH, errno.EHOSTUNREACH):
                raise
            self.stats.tx_errors += 1
            return False
        self.stats.tx_packets += 1
        self.stats.tx_bytes += len(pkt) + 4
        return True

    # -- receive
    def recv(self) -> list[tuple[memoryview, bytes, int]]:
        """Up to ``pool`` verified packets: (packet without ICRC, source
        address bytes, source UDP port)."""
        out = []
        st = self.stats
        addrs = self._addr_bytes
        recv_into = self.sock.recvfrom_into
        for view in self._views:
            try:
                n, addr = recv_into(view)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:                    # ICMP errors surface here: not ours to act on
                if e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                    continue
                raise
            if n < MIN_ROCE_PAYLOAD:
                st.rx_short += 1
                continue
            src = addrs.get(addr[0])
            if src is None:
                src = addrs[addr[0]] = ipaddress.ip_address(addr[0]).packed
            verdict, _ = verify(view[:n], src=src, dst=self.ip_bytes, sport=addr[1], dport=self.port)
            if verdict is Verdict.BAD:
                st.rx_icrc_errors += 1
                continue
            if verdict is Verdict.ID_RECOVERED:
                st.rx_id_recovered += 1
            st.rx_packets += 1
            st.rx_bytes += n
            out.append((view[:n - 4], src, addr[1]))
        return out
