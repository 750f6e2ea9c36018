"""RoCEv2 over a UDP socket: one bound address of a device port.

Sending: each packet and its ICRC go out without being copied together
(``sendmsg`` with an iovec). A burst of packets to one destination goes
out as UDP GSO sends (``send_burst``): runs of equal-sized packets, up to
64 KiB, in one system call each, which the kernel (or the NIC) cuts into
datagrams. An unconnected IPv4 socket with IP_PMTUDISC_DO makes Linux emit
DF=1 and IP ID 0, and the segments of one GSO send IDs 0, 1, 2 ..., so the
ICRC over the IPv4 header the receiver will see is computable here
(``wire.icrc.Ipv4Flow``). A ``fastpath.SegmentRun`` (a message's packets
not yet built) is built straight into the send buffer by the compiled
``build_middles``, consecutive runs filling the same GSO sends. The UDP
source port is the socket's (4791): one socket serves every QP, and rxe
accepts any source port.

Receiving: ``recv`` drains the socket into a fixed pool of buffers (no
per-packet allocation). UDP GRO is on, so a run of datagrams can arrive as
one buffer with its segment size; it is cut back into datagrams with
memoryview slices. Each is checked: the ICRC from the addresses and ports
the socket reports -- FULL for IPv6, for IPv4 with the sender's IP ID
recovered (``wire.icrc.verify``), the ID then checked against what that
peer sends (``ipid.PeerIds``); a buffer from a peer known to send GSO
segment IDs is checked whole by ``fastpath.verify_segments`` and handed on
as one ``fastpath.Segments`` (``recv(segments=True)``). ``recv`` returns
the packets without their ICRC, as memoryviews into the pool, valid until
the next ``recv``. Bad ICRCs and short datagrams are dropped and counted,
never raised.

Counts: ``cnt``, a plain list indexed by ``transport.counters.NetCounter``
(by the int constants below on the per-packet path); ``stats`` by name.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import struct
import sys
from ..transport.counters import NetCounter, as_dict, new_net_counters
from ..wire.fastpath import MAX_SEGMENTS, SegmentRun, Segments, build_middles, icrc_v4, verify_segments
from ..wire.icrc import COMBO_DF, ICRC, ROCEV2_UDP_PORT, Ipv4Flow, Verdict, icrc, ipv6_header, udp_header, verify
from .ipid import PeerIds

IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
MAX_DATAGRAM = 65536          # a GRO buffer (a whole GSO send) or one jumbo datagram
GSO_MAX_BYTES = 65000         # one GSO send: under the 65,507-byte UDP payload limit
GSO_MAX_SEGS = 64             # ... and under UDP_MAX_SEGMENTS
RX_BUDGET = 64                # datagrams per recv(): then the ACKs go out
SOL_UDP = 17
UDP_NO_CHECK6_TX = 101       # linux/udp.h: send UDP checksum 0 over IPv6
UDP_NO_CHECK6_RX = 102       # ... and accept it
UDP_SEGMENT = 103
UDP_GRO = 104
_SEGSIZE = struct.Struct("=H")
_INT = struct.Struct("=i")
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)
_RX_CMSG = socket.CMSG_SPACE(4) * 2           # UDP_GRO's segment size, and the TOS / traffic class
ECN_CE = 3
MIN_ROCE_PAYLOAD = 16         # BTH + ICRC


TX_PACKETS = int(NetCounter.tx_packets)
TX_BYTES = int(NetCounter.tx_bytes)
TX_ERRORS = int(NetCounter.tx_errors)
TX_GSO_SENDS = int(NetCounter.tx_gso_sends)
RX_PACKETS = int(NetCounter.rx_packets)
RX_BYTES = int(NetCounter.rx_bytes)
RX_ICRC_ERRORS = int(NetCounter.rx_icrc_errors)
RX_SHORT = int(NetCounter.rx_short)
RX_GRO_BUFFERS = int(NetCounter.rx_gro_buffers)
RX_ID_RECOVERED = int(NetCounter.rx_id_recovered)
RX_ID_IMPLAUSIBLE = int(NetCounter.rx_id_implausible)


def gid_to_ip(gid: bytes) -> str:
    """The IP address a RoCEv2 GID stands for (IPv4-mapped -> dotted quad)."""
    a = ipaddress.IPv6Address(bytes(gid))
    return str(a.ipv4_mapped) if a.ipv4_mapped else str(a)


def is_link_local(ip: str) -> bool:
    """fe80::/10: an address that needs a scope (the netdev) to be used."""
    return ip[:3].lower() in ("fe8", "fe9", "fea", "feb") and ":" in ip


class RoceSocket:
    def __init__(self, ip: str, port: int = ROCEV2_UDP_PORT, pool: int = 64, rcvbuf: int = 4 << 20,
                 ifindex: int = 0):
        """``ifindex``: the netdev's, the scope of link-local addresses (the
        socket's own, if link-local, and any link-local destination)."""
        addr = ipaddress.ip_address(ip)
        self.ip = str(addr)
        self.v6 = addr.version == 6
        self.ip_bytes = addr.packed
        self.ifindex = ifindex or getattr(self, "ifindex", 0)     # (McastSocket sets its own first)
        self.sock = socket.socket(socket.AF_INET6 if self.v6 else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            if not self.v6:
                self.sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
            else:
                self.sock.setsockopt(SOL_UDP, UDP_NO_CHECK6_RX, 1)     # rxe's zero checksums
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
            # the TOS of what arrives: the ECN field's CE marks (transport.dcqcn)
            if self.v6:
                self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)
            else:
                self.sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        try:
            self.sock.setsockopt(SOL_UDP, UDP_GRO, 1)
        except OSError:                    # a kernel without UDP GRO (< 5.0): one datagram per recv
            pass
        self.gso = True                    # cleared if the kernel refuses UDP_SEGMENT
        self.port = self.sock.getsockname()[1]
        self.cnt = new_net_counters()          # by NetCounter
        self.tx_error_seen: set = set()       # (destination, errno) already logged
        self._flows: dict[str, Ipv4Flow] = {}
        self._v6dst: dict[tuple, tuple] = {}   # (IPv6 destination, port) -> (its bytes, sockaddr)
        self._addr_bytes: dict[str, bytes] = {}
        self._peer_ids = PeerIds()
        self.rx_empty = True                   # the last recv() found the socket empty
        self.ce: list[int] = []                # the last recv()'s CE-marked entries, by index
        self.tos = 0                           # the socket's IP TOS / traffic class (``set_tos``)
        self._pool = [bytearray(MAX_DATAGRAM) for _ in range(pool)]
        self._txview = memoryview(bytearray(GSO_MAX_BYTES))     # SegmentRuns are built here
        self.takes_runs = not self.v6          # IPv4: the receiver's ICRC needs the IP ID each segment gets
        self._views = [memoryview(b) for b in self._pool]

    def _bind(self, port: int) -> None:
        """Bind the socket (``device.mcast.McastSocket`` binds a group)."""
        if self.v6 and is_link_local(self.ip):
            if not self.ifindex:
                raise OSError(errno.EINVAL, f"link-local {self.ip} needs the netdev's ifindex")
            self.sock.bind((self.ip, port, 0, self.ifindex))
        else:
            self.sock.bind((self.ip, port))

    @property
    def stats(self) -> dict[str, int]:
        """The counts by name (the daemon's ``links`` reply, net)."""
        return as_dict(self.cnt, NetCounter)

    def set_tos(self, tos: int) -> None:
        """The TOS byte (DSCP, ECN) packets leave with unless a send names
        another; one that does carries it in its own IP_TOS/IPV6_TCLASS
        control message."""
        if tos != self.tos:
            if self.v6:
                self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, tos)
            else:
                self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            self.tos = tos

    def _tos_cmsg(self, tos) -> list:
        if tos is None or tos == self.tos:
            return []
        if self.v6:
            return [(socket.IPPROTO_IPV6, IPV6_TCLASS, _INT.pack(tos))]
        return [(socket.IPPROTO_IP, socket.IP_TOS, _INT.pack(tos))]

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    # -- send
    def _flow(self, dst_ip: str, dport: int) -> Ipv4Flow:
        """The cached ICRC context of the IPv4 flow to ``dst_ip``:``dport``
        (OSError for a destination that is not an IPv4 address)."""
        flow = self._flows.get(dst_ip)
        if flow is None or flow.dport != dport:
            flow = self._flows[dst_ip] = Ipv4Flow(self.ip_bytes, socket.inet_aton(dst_ip), self.port, dport)
        return flow

    def _dst6(self, dst_ip: str, dport: int) -> tuple:
        """(address bytes, sockaddr) of an IPv6 destination, a link-local
        one scoped to our netdev (OSError if it is not an IPv6 address)."""
        d = self._v6dst.get((dst_ip, dport))
        if d is None:
            try:
                a = ipaddress.IPv6Address(dst_ip)
            except ValueError:
                raise OSError(errno.EAFNOSUPPORT, f"{dst_ip} is not an IPv6 address") from None
            d = self._v6dst[(dst_ip, dport)] = (a.packed, (dst_ip, dport, 0, self.ifindex if a.is_link_local else 0))
        return d

    def send(self, pkt, dst_ip: str, dport: int = ROCEV2_UDP_PORT, corrupt_bit: int | None = None,
             tos: int | None = None) -> bool:
        """Send one packet (BTH .. pad) with its ICRC.  False if the kernel
        refused it (counted; the transport's retransmission covers it).
        ``tos``: its IP TOS, when not the socket's.
        ``corrupt_bit``: fault injection -- flip that bit of the packet (bit
        ``corrupt_bit & 7`` of byte ``corrupt_bit >> 3``) after the ICRC was
        computed, as a damaged link would."""
        try:
            if self.v6:
                dst, addr = self._dst6(dst_ip, dport)
                n = len(pkt) + 4
                crc = ICRC.pack(icrc(ipv6_header(self.ip_bytes, dst, n), udp_header(self.port, dport, n), pkt))
            else:
                addr = (dst_ip, dport)
                flow = self._flow(dst_ip, dport)
                crc = (icrc_v4(pkt, 0, flow.src, flow.dst, flow.sport, dport) if len(pkt) >= 12
                       else ICRC.pack(flow.icrc(pkt)))       # (no BTH: only a test sends that)
            if corrupt_bit is not None:
                pkt = bytearray(pkt)
                pkt[corrupt_bit >> 3] ^= 1 << (corrupt_bit & 7)
            self.sock.sendmsg([pkt, crc], self._tos_cmsg(tos), 0, addr)
        except OSError as e:
            # whatever the kernel refuses (a destination it cannot send to from
            # this address: EINVAL, EPERM from a firewall, ...) is one lost packet,
            # never the daemon's end
            if e.errno not in _TX_DROPS:
                _log_tx_error(self, e, dst_ip)
            self.cnt[TX_ERRORS] += 1
            return False
        cnt = self.cnt
        cnt[TX_PACKETS] += 1
        cnt[TX_BYTES] += len(pkt) + 4
        return True

    def send_burst(self, pkts: list, dst_ip: str, dport: int = ROCEV2_UDP_PORT, tos: int | None = None) -> int:
        """Send ``pkts`` (in order) to one destination; runs of equal-sized
        packets go as one UDP GSO send each.  Returns how many the kernel
        took (the rest are counted as errors; retransmission covers them).
        ``tos``: their IP TOS, when not the socket's."""
        if self.v6 or not self.gso or (len(pkts) == 1 and pkts[0].__class__ is not SegmentRun):
            return sum(self.send(p, dst_ip, dport, None, tos) for p in _packets(pkts))
        try:
            flow = self._flow(dst_ip, dport)
        except OSError as e:                    # not an IPv4 destination: nothing goes
            _log_tx_error(self, e, dst_ip)
            self.cnt[TX_ERRORS] += sum(p.count if p.__class__ is SegmentRun else 1 for p in pkts)
            return 0
        src, fdst, sport = flow.src, flow.dst, flow.sport
        sendmsg = self.sock.sendmsg
        anc = self._tos_cmsg(tos)
        addr = (dst_ip, dport)
        cnt = self.cnt
        sent = 0
        i, n = 0, len(pkts)
        while i < n:
            run = pkts[i]
            if run.__class__ is SegmentRun:
                # the runs that follow it (same MTU) share its GSO sends, and
                # the packet after them (a message's LAST) joins the last one
                # when it is no longer than a MIDDLE
                j = i + 1
                while j < n and pkts[j].__class__ is SegmentRun and pkts[j].mtu == run.mtu:
                    j += 1
                tail = pkts[j] if j < n else None
                if tail is not None and (tail.__class__ is SegmentRun or len(tail) > run.mtu + 12):
                    tail = None
                k = self._send_runs(pkts[i:j], flow, addr, tail, anc)
                if k < 0:                                  # no UDP GSO here after all
                    return sent + sum(self.send(p, dst_ip, dport, None, tos) for p in _packets(pkts[i:]))
                sent += k
                i = j if tail is None else j + 1
                continue
            seg = len(pkts[i]) + 4
            limit = min(GSO_MAX_SEGS, GSO_MAX_BYTES // seg)
            iov = []
            j = i
            nbytes = 0
            while j < n and j - i < limit:
                if pkts[j].__class__ is SegmentRun:
                    break
                size = len(pkts[j]) + 4
                if size > seg:
                    break
                nbytes += size
                iov.append(pkts[j])
                iov.append(icrc_v4(pkts[j], j - i, src, fdst, sport, dport))   # segment k gets IP ID k
                j += 1
                if size < seg:                             # a shorter one ends the run
                    break
            count = j - i
            try:
                if count == 1:
                    sendmsg(iov, anc, 0, addr)
                else:
                    sendmsg(iov, [(SOL_UDP, UDP_SEGMENT, _SEGSIZE.pack(seg))] + anc, 0, addr)
                    cnt[TX_GSO_SENDS] += 1
            except OSError as e:
                if count > 1 and e.errno in (errno.EINVAL, errno.ENOPROTOOPT, errno.EIO):
                    self.gso = False                       # no UDP GSO here: one by one from now on
                    return sent + sum(self.send(p, dst_ip, dport, None, tos) for p in pkts[i:])
                if e.errno not in _TX_DROPS:
                    _log_tx_error(self, e, dst_ip)
                cnt[TX_ERRORS] += count
                i = j
                continue
            cnt[TX_PACKETS] += count
            cnt[TX_BYTES] += nbytes
            sent += count
            i = j
        return sent

    def _send_runs(self, runs: list, flow: Ipv4Flow, addr: tuple, tail=None, anc=()) -> int:
        """Consecutive SegmentRuns of one MTU as UDP GSO sends, built by
        ``fastpath.build_middles`` straight into the send buffer: a send is
        filled across runs (a SEND's run holds its whole message, so the
        next message's packets share the last send of the one before), each
        segment's ICRC for the IP ID of its place; ``tail``, a packet no
        longer than a MIDDLE, goes as the last segment of the last send.
        Returns how many packets the kernel took, -1 if it refused UDP GSO
        (``gso`` is then off; nothing went).  ``anc``: the TOS control
        message, if any."""
        mtu = runs[0].mtu
        stride = mtu + 16
        per = min(MAX_SEGMENTS, GSO_MAX_BYTES // stride)
        cmsg = [(SOL_UDP, UDP_SEGMENT, _SEGSIZE.pack(stride))] + list(anc)
        out = self._txview
        src, dst, sport, dport = flow.src, flow.dst, flow.sport, flow.dport
        cnt = self.cnt
        left = sum(r.count for r in runs) + (tail is not None)
        sent = 0
        ri, pi = 0, 0                               # the run, and the packet in it, that come next
        while left:
            c = per if left > per else left
            k = nb = 0
            iov = None
            while k < c:
                if ri == len(runs):                 # the tail, last of the last send
                    iov = [out[:nb], tail, icrc_v4(tail, k, src, dst, sport, dport)]
                    nb += len(tail) + 4
                    k += 1
                    break
                r = runs[ri]
                take = min(c - k, r.count - pi)
                final = pi + take == r.count
                nb += build_middles(out[nb:], r.hdr, r.payload[pi * mtu:(pi + take) * mtu], mtu, take, r.psn0 + pi,
                                    r.ackreq_last and final, src, dst, sport, dport,
                                    r.last_hdr if final else b"", r.first_hdr if pi == 0 else b"", k)
                k += take
                if final:
                    ri, pi = ri + 1, 0
                else:
                    pi += take
            left -= c
            try:
                self.sock.sendmsg(iov or [out[:nb]], cmsg if c > 1 else anc, 0, addr)
            except OSError as e:
                if c > 1 and not sent and e.errno in (errno.EINVAL, errno.ENOPROTOOPT, errno.EIO):
                    self.gso = False
                    return -1
                if e.errno not in _TX_DROPS:
                    _log_tx_error(self, e, addr[0])
                cnt[TX_ERRORS] += c
                continue
            if c > 1:
                cnt[TX_GSO_SENDS] += 1
            cnt[TX_PACKETS] += c
            cnt[TX_BYTES] += nb
            sent += c
        return sent

    # -- receive
    def recv(self, budget: int = RX_BUDGET, segments: bool = False) -> list[tuple[memoryview, bytes, int]]:
        """Verified packets, (packet without ICRC, source address bytes,
        source UDP port), until ``budget`` datagrams or ``pool`` buffers
        were read.  The budget (NAPI's weight) lets the caller send the ACKs
        for a batch before the next one: the sender's window keeps moving.
        ``segments``: a GRO buffer from a peer known to send GSO segment
        IDs that ``fastpath.verify_segments`` passes whole comes as one
        ``fastpath.Segments`` in the packet's place.  ``ce``: the indexes
        in the result of the entries that arrived CE-marked."""
        out = []
        ce = self.ce = []
        cnt = self.cnt
        addrs = self._addr_bytes
        recvmsg_into = self.sock.recvmsg_into
        accept_id = self._peer_ids.accept
        strict = self._peer_ids.strict
        ip_bytes, port = self.ip_bytes, self.port
        ndgrams = 0
        self.rx_empty = False
        # the counts every packet takes are summed in locals (cheaper than a
        # list item per packet) and added once
        npkts = nbytes = nrecovered = 0
        try:
            for view in self._views:
                if ndgrams >= budget:
                    break
                try:
                    n, anc, _flags, addr = recvmsg_into([view], _RX_CMSG)
                except (BlockingIOError, InterruptedError):
                    self.rx_empty = True           # the kernel holds nothing more (``Device.drain``)
                    break
                except OSError as e:                    # ICMP errors surface here: not ours to act on
                    if e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                        continue
                    raise
                src = addrs.get(addr[0])
                if src is None:
                    src = addrs[addr[0]] = ipaddress.ip_address(addr[0]).packed
                sport = addr[1]
                if n < MIN_ROCE_PAYLOAD:
                    cnt[RX_SHORT] += 1
                    ndgrams += 1
                    continue
                seg = n
                marked = False
                for level, kind, data in anc:
                    if level == SOL_UDP:
                        if kind == UDP_GRO:
                            seg = int.from_bytes(data[:4], sys.byteorder) or n   # 0 never comes; be safe
                    elif (data[0] if len(data) == 1 else int.from_bytes(data[:4], sys.byteorder)) & 3 == ECN_CE:
                        marked = True     # IP_TOS (a byte) / IPV6_TCLASS (an int); GRO never merges different TOS
                if seg < n:
                    cnt[RX_GRO_BUFFERS] += 1
                nseg = -(-n // seg)
                ndgrams += nseg
                if segments and not self.v6 and strict(src):
                    dqpn = verify_segments(view, n, seg, src, ip_bytes, sport, port)
                    if dqpn >= 0:
                        accept_id(src, COMBO_DF)              # segment IDs, as every one verified
                        npkts += nseg
                        nbytes += n
                        nrecovered += nseg
                        if marked:
                            ce.append(len(out))
                        out.append((Segments(view, n, seg, dqpn), src, sport))
                        continue
                k = 0
                for off in range(0, n, seg):
                    m = min(seg, n - off)
                    dgram = view[off:off + m]
                    if m < MIN_ROCE_PAYLOAD:
                        cnt[RX_SHORT] += 1
                        continue
                    # the k-th datagram of a GRO buffer is likely the k-th segment of a GSO send
                    verdict, combo = verify(dgram, src=src, dst=ip_bytes, sport=sport, dport=port,
                                            expect=COMBO_DF | k)
                    k += 1
                    if verdict is Verdict.BAD:
                        cnt[RX_ICRC_ERRORS] += 1
                        continue
                    if verdict is Verdict.ID_RECOVERED:
                        if not accept_id(src, combo):
                            cnt[RX_ID_IMPLAUSIBLE] += 1
                            cnt[RX_ICRC_ERRORS] += 1
                            continue
                        nrecovered += 1
                    npkts += 1
                    nbytes += m
                    if marked:
                        ce.append(len(out))
                    out.append((dgram[:m - 4], src, sport))
        finally:
            cnt[RX_PACKETS] += npkts
            cnt[RX_BYTES] += nbytes
            cnt[RX_ID_RECOVERED] += nrecovered
        return out


def _packets(pkts: list):
    """The packets of a burst one by one (each SegmentRun built out)."""
    for p in pkts:
        if p.__class__ is SegmentRun:
            yield from p.packets()
        else:
            yield p


def _log_tx_error(sock: "RoceSocket", e: OSError, dst_ip: str) -> None:
    if (dst_ip, e.errno) not in sock.tx_error_seen:
        sock.tx_error_seen.add((dst_ip, e.errno))
        logging.getLogger("softrdmad").warning("sending from %s to %s: %s", sock.ip, dst_ip, e)


_TX_DROPS = frozenset((errno.EAGAIN, errno.ENOBUFS, errno.EMSGSIZE, errno.ECONNREFUSED, errno.ENETUNREACH,
                       errno.EHOSTUNREACH))
