"""IPoIB connected mode (RFC 4755) for one interface -- the kernel's ipoib_cm.c.

Every IPoIB interface of softrdma can take connected mode (as a ConnectX
port can): its hardware address carries the RC capability flag
(IPOIB_FLAGS_RC, 0x80, in the first byte, set once for good as
ipoib_cm_dev_init sets it) and it listens on the IB CM for the service
ID ``IPOIB_CM_IETF_ID | its UD QPN``, whatever its mode.  ``mode``
decides only how the interface *sends*: in connected mode a unicast IP
datagram to a neighbour whose address has the RC flag goes over an RC
connection of its own (``CmTx``, the kernel's ipoib_cm_tx): a REQ to
``IPOIB_CM_IETF_ID | the neighbour's QPN`` on the SA path already held
for its GID, the private data ``struct ipoib_cm_data`` (our UD QPN, our
receive size 65524); the REP's data gives the peer's receive size, the
TX QP goes RTR, RTS, the RTU goes out, the datagrams queued meanwhile
(three at most) go.  Each datagram is then one RC SEND with the 4-byte
IPoIB header.  The passive side (``CmRx``, ipoib_cm_rx) makes an RC QP
per REQ (at most ``max_conn_qp``, max_nonsrq_conn_qp: beyond, a REJ
"no QP"), INIT, RTR, RTS, its receive buffers posted, and answers with
the REP; what it receives goes into the TUN device.  Connections are
one-way, as the kernel's: two hosts talking both ways in connected mode
have two.

The RC QPs are the daemon's (the kernel's ULP QPs): ``transport.QP``
engines with their own CQs and buffers (``UlpBuffers``), their QPNs in the
port's ``ulp_qps``, their packets through the device's ``tx`` like any
QP's -- retransmission, ACKs and timers are the transport's.

What stays on UD (datagram mode's path): ARP and neighbour discovery,
multicast and broadcast, every datagram in datagram mode, and, in
connected mode, datagrams to a neighbour without the RC flag or whose
connection failed (a REJ, no answer to the REQ: that neighbour is sent
datagrams for ``FALLBACK_HOLD_S``, then asked again).  A datagram longer
than the path it takes allows -- the connection's receive size, or the UD
MTU -- is dropped and answered with an ICMP "fragmentation needed" (IPv4)
or "packet too big" (IPv6) carrying that MTU, as ipoib_cm_skb_too_long.

Idle connections end: a TX connection unused for ``tx_idle`` seconds
(the kernel frees a neighbour idle for two ARP GC intervals, 60 s, and its
connection with it), an RX connection that received nothing for
``rx_idle`` (IPOIB_CM_RX_TIMEOUT, 512 s); the CM ID's destruction sends
the DREQ, the other side answers and drops its half.  The next datagram
connects again.  Both times, and ``max_conn_qp``, are per-interface
settings (``ipoib set`` with ``cm_tx_idle``, ``cm_rx_idle``,
``cm_max_conn_qp``).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import struct

from ..enums import ibv_qp_state, ibv_wc_status, ibv_wr_opcode, ints
from ..mgmt.cm.ids import CmEventType, CmState
from ..mgmt.cm.request import AcceptParams, ConnectParams
from ..transport.cq import CompletionQueue
from ..transport.qp import QP, QPAttr, QPCap
from ..transport.wr import AddressVector, RecvWQE, SendWQE
from ..uapi.qp_attr import mask_of
from ..wire import ipoib as w
from ..wire.cm import RejReason

log = logging.getLogger("softrdmad")
QPS = ints(ibv_qp_state)
ST = ints(ibv_wc_status)
WR = ints(ibv_wr_opcode)
RC = 2                                         # IBV_QPT_RC
IPOIB_CM_IETF_ID = 0x1000000000000000
IPOIB_CM_BUF_SIZE = w.IPOIB_CM_MTU + w.IPOIB_HDR_LEN      # 65524: what one receive takes
CM_DATA = struct.Struct(">II")                 # struct ipoib_cm_data: QPN, receive size
SENDQ_SIZE = 128                               # ipoib_sendq_size
RECVQ_SIZE = 64                                # receives posted per RX connection (kernel: 256)
QUEUE_MAX = 3                                  # datagrams waiting for the REP (IPOIB_MAX_PATH_REC_QUEUE)
TX_IDLE_S = 60.0                               # 2 * arp_tbl.gc_interval
RX_IDLE_S = 512.0                              # IPOIB_CM_RX_TIMEOUT
MAX_CONN_QP = 128                              # ipoib_max_conn_qp (max_nonsrq_conn_qp)
FALLBACK_HOLD_S = 60.0                         # a failed neighbour is sent datagrams this long
LOCAL_WRITE = 1                                # IBV_ACCESS_LOCAL_WRITE
CM_COUNTERS = ("cm_tx_packets", "cm_tx_bytes", "cm_rx_packets", "cm_rx_bytes", "cm_tx_connects",
               "cm_tx_established", "cm_tx_rejects", "cm_tx_failures", "cm_rx_accepts", "cm_rx_rejects",
               "cm_tx_idle_teardowns", "cm_rx_idle_teardowns", "cm_disconnects", "tx_too_big")


class UlpBuffers:
    """``transport.memory.Memory`` for the daemon's own buffers: a key names
    one buffer (a datagram being sent, a receive buffer); no remote access."""

    def __init__(self):
        self.bufs: dict[int, object] = {}
        self.next_key = 1

    def add(self, buf) -> int:
        k = self.next_key
        self.next_key = k + 1 if k < 0xFFFFFFFF else 1
        self.bufs[k] = buf
        return k

    def local_view(self, pd, lkey, addr, length, access):
        b = self.bufs.get(lkey)
        if b is None or addr < 0 or addr + length > len(b):
            return None
        return memoryview(b)[addr:addr + length]

    def remote_view(self, pd, rkey, va, length, access, qp=None):
        return None

    def invalidate(self, pd, key):
        return False

    def lookup(self, key):
        return None


def _modify(qp: QP, a: dict) -> None:
    """ib_modify_qp with the attributes ib_cm_init_qp_attr gave (ibv_qp_attr names)."""
    a = dict(a)
    ah = a.get("ah_attr")
    if isinstance(ah, dict):
        a["ah_attr"] = AddressVector(dgid=bytes(ah["dgid"]), sgid_index=0, flow_label=ah.get("flow_label", 0),
                                     hop_limit=ah.get("hop_limit", 0), traffic_class=ah.get("traffic_class", 0),
                                     sl=ah.get("sl", 0), dlid=ah.get("dlid", 0), is_global=bool(ah["is_global"]),
                                     static_rate=ah.get("static_rate", 0), port_num=ah.get("port_num", 1),
                                     src_path_bits=ah.get("src_path_bits", 0))
    qp.modify(QPAttr(**a), mask_of(a))


class Conn:
    """One RC connection's QP, CQ and counts (``CmTx``, ``CmRx``)."""

    kind = ""

    def __init__(self, cm: "IpoibCm", cap: QPCap):
        self.cm = cm
        self.cq = CompletionQueue()
        dev = cm.ifc.dev
        self.qp = QP(RC, dev.hca.alloc_qpn(), pd=cm, memory=cm.mem, send_cq=self.cq, recv_cq=self.cq, cap=cap,
                     sq_sig_all=True, caps=dev.hca.caps, tx=dev.tx, events=[])
        dev.ulp_qps[self.qp.qp_num] = self
        self.cm_id = None
        self.alive = 0.0
        self.packets = self.bytes = 0
        self.peer_gid = bytes(16)
        self.up = False

    def init(self, pkey_index: int, access: int) -> None:
        _modify(self.qp, {"qp_state": QPS.IBV_QPS_INIT, "pkey_index": pkey_index, "port_num": self.cm.ifc.dev.num,
                          "qp_access_flags": access})

    def receive(self, pkt, now: float, src) -> None:
        """A packet the port took for this QPN (``IbPort.ulp_qps``)."""
        self.qp.receive(pkt, now)
        self.cm.completions(self, now)

    def close(self) -> None:
        dev = self.cm.ifc.dev
        if dev.ulp_qps.get(self.qp.qp_num) is self:
            del dev.ulp_qps[self.qp.qp_num]
        dev.tx[:] = [t for t in dev.tx if t[0] is not self.qp]
        for wqe in list(self.qp.sq) + list(self.qp.rq):
            for sge in wqe.sg_list:
                self.cm.mem.bufs.pop(sge[2], None)
        self.qp.sq.clear()
        self.qp.rq.clear()

    def view(self) -> dict:
        return {"dir": self.kind, "qpn": self.qp.qp_num, "remote_qpn": self.qp.dest_qpn,
                "peer": str(ipaddress.IPv6Address(self.peer_gid)), "up": self.up,
                "state": self.cm_id.state.name if self.cm_id is not None else "IDLE",
                "packets": self.packets, "bytes": self.bytes}


class CmTx(Conn):
    """Our RC connection to one neighbour's address (ipoib_cm_tx)."""

    kind = "tx"

    def __init__(self, cm: "IpoibCm", key: tuple[int, bytes]):
        super().__init__(cm, QPCap(max_send_wr=SENDQ_SIZE, max_recv_wr=1, max_send_sge=1, max_recv_sge=1))
        self.key = key
        self.peer_gid = key[1]
        self.mtu = 0                                # the peer's receive size (its REP's ipoib_cm_data)
        self.queue: list = []

    def ulp_cm_event(self, ev, now: float) -> None:
        self.cm.tx_event(self, ev, now)


class CmRx(Conn):
    """A neighbour's RC connection to us (ipoib_cm_rx)."""

    kind = "rx"

    def __init__(self, cm: "IpoibCm"):
        super().__init__(cm, QPCap(max_send_wr=1, max_recv_wr=RECVQ_SIZE, max_send_sge=1, max_recv_sge=1))

    def ulp_cm_event(self, ev, now: float) -> None:
        self.cm.rx_event(self, ev, now)


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class IpoibCm:
    """Connected mode of one IPoIB interface (``device.ipoib.IpoibIf``):
    its listen, its TX connections by neighbour address, its RX
    connections, the settings, the counters (in the interface's)."""

    def __init__(self, ifc):
        self.ifc = ifc
        self.mem = UlpBuffers()
        self.tx: dict[tuple[int, bytes], CmTx] = {}
        self.rx: dict[int, CmRx] = {}              # by our QPN
        self.failed: dict[tuple[int, bytes], float] = {}    # neighbour -> until when it is sent datagrams
        self.listen_id = None
        self.tx_idle = _env_float("SOFTRDMA_IPOIB_CM_TX_IDLE", TX_IDLE_S)
        self.rx_idle = _env_float("SOFTRDMA_IPOIB_CM_RX_IDLE", RX_IDLE_S)
        self.max_conn_qp = MAX_CONN_QP

    @property
    def agent(self):
        """The CM agent of the interface's port (every port has one, rdma_cm's
        on its QP1: port 2's own for ib1; None until rdma_cm made it)."""
        return getattr(self.ifc.dev, "cm", None)

    def _sync(self) -> None:
        """The CM agent's GUID and GID, as the fabric gave them (rdma_cm's ``_sync_ib_agent``)."""
        a, port = self.agent, self.ifc.dev
        a.ca_guid = int.from_bytes(port.hca.node_guid, "big")
        a.gid = port.gid(0) or bytes(16)

    def listen(self) -> None:
        """ipoib_cm_dev_open: listen on IPOIB_CM_IETF_ID | our QPN."""
        if self.listen_id is None and self.agent is not None:
            self.listen_id = self.agent.listen(IPOIB_CM_IETF_ID | self.ifc.qp_num, context=self)

    def close(self) -> None:
        self.flush_tx()
        for rx in list(self.rx.values()):
            self._drop_rx(rx)
        if self.listen_id is not None and self.agent is not None:
            self.agent.destroy(self.listen_id)
        self.listen_id = None

    # -- settings (``ipoib set``)
    def set(self, attr: str, value: str) -> None:
        v = float(value)
        if v < 0:
            raise ValueError(value)
        if attr == "cm_tx_idle":
            self.tx_idle = v
        elif attr == "cm_rx_idle":
            self.rx_idle = v
        else:
            self.max_conn_qp = int(v)

    # -- transmit
    def send(self, hw: bytes, etype: int, d, now: float) -> bool:
        """A datagram from the TUN device to neighbour ``hw`` in connected
        mode: sent (or queued for the connection being made, or answered
        as too big) -- True; False when it takes the UD path (no RC flag,
        a neighbour that failed lately, no path to it yet)."""
        if not hw[0] & w.IPOIB_FLAG_CM:
            return False
        _, qpn, gid = w.parse_hw_addr(hw)
        key = (qpn, gid)
        tx = self.tx.get(key)
        if tx is None:
            if self.failed.get(key, 0.0) > now:
                return False
            p = self.ifc.table.paths.get(gid)
            if p is None or p.record is None or self.agent is None:
                return False                        # the UD path asks the SA; the next datagram connects
            tx = self._connect(key, p.record, now)
            if tx is None:
                return False
        tx.alive = now
        if not tx.up:
            if len(tx.queue) >= QUEUE_MAX:
                tx.queue.pop(0)
                self.ifc.table.dropped += 1
            tx.queue.append((etype, bytes(d)))
            return True
        self._post(tx, etype, d, now)
        return True

    def _post(self, tx: CmTx, etype: int, d, now: float) -> None:
        c = self.ifc.cnt
        if len(d) + w.IPOIB_HDR_LEN > tx.mtu:
            self.ifc.too_big(d, tx.mtu - w.IPOIB_HDR_LEN)
            return
        if len(tx.qp.sq) >= SENDQ_SIZE:
            self.ifc.table.dropped += 1            # the send queue is full: the kernel's stopped queue
            return
        buf = w.IPOIB_HDR.pack(etype, 0) + bytes(d)
        k = self.mem.add(buf)
        try:
            tx.qp.post_send(SendWQE(k, WR.IBV_WR_SEND, [(0, len(buf), k)], send_flags=2), now)
        except Exception as e:                    # noqa: BLE001 -- the QP refused: the connection ends
            self.mem.bufs.pop(k, None)
            log.warning("%s: connection to %s: %s", self.ifc.name, ipaddress.IPv6Address(tx.peer_gid), e)
            self._drop_tx(tx, failed=True, now=now)
            return
        tx.packets += 1
        tx.bytes += len(d)
        c["cm_tx_packets"] += 1
        c["cm_tx_bytes"] += len(d)
        self.completions(tx, now)

    def _connect(self, key: tuple[int, bytes], rec: dict, now: float) -> CmTx | None:
        """ipoib_cm_tx_init: the TX QP to INIT, the REQ on the neighbour's path."""
        ifc = self.ifc
        pki = ifc.pkey_index()
        if pki is None:
            return None
        tx = CmTx(self, key)
        tx.init(pki, LOCAL_WRITE)
        self._sync()
        hop = rec["HopLimit"]
        tx.cm_id = self.agent.connect(ConnectParams(
            service_id=IPOIB_CM_IETF_ID | key[0], dest_gid=key[1], qp_num=tx.qp.qp_num, starting_psn=0,
            private_data=CM_DATA.pack(ifc.qp_num, IPOIB_CM_BUF_SIZE), responder_resources=4,
            remote_cm_response_timeout=20, local_cm_response_timeout=20,
            retry_count=0, rnr_retry_count=0, max_cm_retries=15, srq=False,   # (RFC draft: no retries)
            path_mtu=rec["Mtu"], packet_life_time=rec["PacketLifeTime"], flow_control=0, pkey=ifc.pkey,
            flow_label=rec["FlowLabel"], traffic_class=rec["TClass"], hop_limit=hop, sl=rec["SL"],
            local_gid=ifc.port_gid, dlid=rec["DLID"], slid=ifc.dev.lid, packet_rate=rec["Rate"],
            subnet_local=int(hop <= 1)), now=now, context=tx)
        tx.alive = now
        self.tx[key] = tx
        ifc.cnt["cm_tx_connects"] += 1
        return tx

    def tx_event(self, tx: CmTx, ev, now: float) -> None:
        """ipoib_cm_tx_handler."""
        if self.tx.get(tx.key) is not tx:
            return
        t = ev.type
        a = self.agent
        if t == CmEventType.REP_RECEIVED:
            try:
                _qpn, mtu = CM_DATA.unpack_from(bytes(ev.msg.get("private_data", b"")).ljust(8, b"\0"))
                if mtu <= w.IPOIB_HDR_LEN:
                    raise ValueError(f"mtu {mtu} <= {w.IPOIB_HDR_LEN}")
                tx.mtu = min(mtu, IPOIB_CM_BUF_SIZE)
                a2 = a.qp_attrs(tx.cm_id, "RTR")
                a2["rq_psn"] = 0
                _modify(tx.qp, a2)
                _modify(tx.qp, a.qp_attrs(tx.cm_id, "RTS"))
            except Exception as e:                    # noqa: BLE001 -- the REP is refused: REJ, datagrams
                log.warning("%s: rejecting the connection to %s: %s", self.ifc.name,
                            ipaddress.IPv6Address(tx.peer_gid), e)
                a.reject(tx.cm_id, RejReason.CONSUMER_DEFINED, now=now)
                self._drop_tx(tx, failed=True, now=now)
                return
            tx.up = True
            a.send_rtu(tx.cm_id, now=now)
            self.ifc.cnt["cm_tx_established"] += 1
            q, tx.queue = tx.queue, []
            for etype, d in q:
                self._post(tx, etype, d, now)
        elif t == CmEventType.DREQ_RECEIVED:
            a.send_drep(tx.cm_id, now=now)
            self.ifc.cnt["cm_disconnects"] += 1
            self._drop_tx(tx, failed=False, now=now)
        elif t in (CmEventType.REJ_RECEIVED, CmEventType.REQ_ERROR, CmEventType.REP_ERROR):
            self.ifc.cnt["cm_tx_rejects" if t == CmEventType.REJ_RECEIVED else "cm_tx_failures"] += 1
            self._drop_tx(tx, failed=True, now=now)

    def _drop_tx(self, tx: CmTx, failed: bool, now: float) -> None:
        """The connection ends (ipoib_cm_tx_destroy): its datagrams waiting
        are lost; a failed one sends the neighbour datagrams a while."""
        if self.tx.get(tx.key) is tx:
            del self.tx[tx.key]
        if tx.cm_id is not None and tx.cm_id.state != CmState.IDLE:
            self.agent.destroy(tx.cm_id)          # (established: the DREQ)
        if failed:
            self.failed[tx.key] = now + FALLBACK_HOLD_S
            self.ifc.table.dropped += len(tx.queue)
        tx.queue.clear()
        tx.up = False
        tx.close()

    def flush_tx(self) -> None:
        """Every TX connection ends (a mode change, ipoib_flush_paths; the port going away)."""
        for tx in list(self.tx.values()):
            self._drop_tx(tx, failed=False, now=0.0)
        self.failed.clear()

    # -- receive
    def ulp_cm_event(self, ev, now: float) -> None:
        """The listen's events: a REQ (ipoib_cm_req_handler)."""
        if ev.type != CmEventType.REQ_RECEIVED:
            return
        a = self.agent
        ifc = self.ifc
        pki = ifc.pkey_index()
        if len(self.rx) >= self.max_conn_qp or pki is None or not ifc.up:
            ifc.cnt["cm_rx_rejects"] += 1
            a.reject(ev.cm_id, RejReason.NO_QP, now=now)
            return
        rx = CmRx(self)
        rx.cm_id = ev.cm_id
        ev.cm_id.context = rx
        rx.peer_gid = bytes(ev.cm_id.remote_gid or bytes(16))
        psn = int.from_bytes(os.urandom(3), "big")
        try:
            self._sync()
            rx.init(pki, a.qp_attrs(ev.cm_id, "INIT")["qp_access_flags"] | LOCAL_WRITE)
            a2 = a.qp_attrs(ev.cm_id, "RTR")
            a2["rq_psn"] = psn
            _modify(rx.qp, a2)
            _modify(rx.qp, a.qp_attrs(ev.cm_id, "RTS"))
            for _ in range(RECVQ_SIZE):
                self._post_recv(rx, bytearray(IPOIB_CM_BUF_SIZE))
        except Exception as e:                    # noqa: BLE001 -- refused: the peer sends datagrams
            log.warning("%s: refusing a connection: %s", ifc.name, e)
            ifc.cnt["cm_rx_rejects"] += 1
            a.reject(ev.cm_id, RejReason.NO_QP, now=now)
            rx.close()
            return
        self.rx[rx.qp.qp_num] = rx
        rx.alive = now
        rx.up = True
        ifc.cnt["cm_rx_accepts"] += 1
        a.accept(ev.cm_id, AcceptParams(qp_num=rx.qp.qp_num, starting_psn=psn,
                                        private_data=CM_DATA.pack(ifc.qp_num, IPOIB_CM_BUF_SIZE),
                                        rnr_retry_count=ev.msg.get("rnr_retry_count", 0), srq=False,
                                        flow_control=0), now=now)

    def _post_recv(self, rx: CmRx, buf) -> None:
        k = self.mem.add(buf)
        rx.qp.post_recv(RecvWQE(k, [(0, len(buf), k)]))

    def rx_event(self, rx: CmRx, ev, now: float) -> None:
        """ipoib_cm_rx_handler: a DREQ is answered; DREQ or REJ end the connection."""
        t = ev.type
        if t == CmEventType.DREQ_RECEIVED:
            self.agent.send_drep(rx.cm_id, now=now)
            self.ifc.cnt["cm_disconnects"] += 1
            self._drop_rx(rx)
        elif t in (CmEventType.REJ_RECEIVED, CmEventType.REP_ERROR):
            self._drop_rx(rx)

    def _drop_rx(self, rx: CmRx) -> None:
        if self.rx.get(rx.qp.qp_num) is rx:
            del self.rx[rx.qp.qp_num]
        if rx.cm_id is not None and rx.cm_id.state != CmState.IDLE:
            self.agent.destroy(rx.cm_id)
        rx.up = False
        rx.close()

    def completions(self, conn: Conn, now: float) -> None:
        """The connection's completions: sent buffers freed (an error ends
        the connection, as ipoib_cm_handle_tx_wc), received datagrams into
        the interface and their buffers posted again."""
        ifc = self.ifc
        bufs = self.mem.bufs
        for wc in conn.cq.poll(len(conn.cq)):
            buf = bufs.pop(wc.wr_id, None)
            if wc.opcode & 128:                       # a receive
                if wc.status != ST.IBV_WC_SUCCESS or buf is None:
                    continue
                conn.alive = now
                if conn.up:
                    self._post_recv(conn, buf)
                try:
                    etype, d = w.decap(memoryview(buf)[:wc.byte_len])
                except Exception:                     # noqa: BLE001 -- shorter than the header
                    ifc.cnt["rx_drop_other"] += 1
                    continue
                conn.packets += 1
                conn.bytes += len(d)
                ifc.cnt["cm_rx_packets"] += 1
                ifc.cnt["cm_rx_bytes"] += len(d)
                ifc.deliver(etype, d, now)
            elif wc.status not in (ST.IBV_WC_SUCCESS, ST.IBV_WC_WR_FLUSH_ERR) and isinstance(conn, CmTx):
                ifc.cnt["cm_tx_failures"] += 1
                self._drop_tx(conn, failed=False, now=now)

    # -- timers
    @property
    def deadline(self) -> float | None:
        d = None
        for c in (*self.tx.values(), *self.rx.values()):
            x = c.qp.deadline
            if c.up:                                  # (a TX connection being made is the CM's to time out)
                idle = c.alive + (self.tx_idle if c.kind == "tx" else self.rx_idle)
                x = idle if x is None or idle < x else x
            if x is not None and (d is None or x < d):
                d = x
        return d

    def tick(self, now: float) -> None:
        for c in (*self.tx.values(), *self.rx.values()):
            d = c.qp.deadline
            if d is not None and now >= d:
                c.qp.tick(now)
                self.completions(c, now)
        for tx in list(self.tx.values()):
            if tx.up and now >= tx.alive + self.tx_idle:
                self.ifc.cnt["cm_tx_idle_teardowns"] += 1
                self._drop_tx(tx, failed=False, now=now)
        for rx in list(self.rx.values()):
            if now >= rx.alive + self.rx_idle:        # (ipoib_cm_stale_task)
                self.ifc.cnt["cm_rx_idle_teardowns"] += 1
                self._drop_rx(rx)

    def connections(self) -> list[dict]:
        return [c.view() | ({"mtu": c.mtu} if c.kind == "tx" else {})
                for c in (*self.tx.values(), *self.rx.values())]


__all__ = ["IpoibCm", "CmTx", "CmRx", "UlpBuffers", "IPOIB_CM_IETF_ID", "IPOIB_CM_BUF_SIZE", "CM_DATA",
           "CM_COUNTERS"]
