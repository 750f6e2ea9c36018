"""Wireshark as an independent decoder: a pcap written by softrdma.wire.pcap
with one packet of every RC/UC/UD/XRC opcode plus a CNP (over IPv4 and IPv6)
must decode in tshark to exactly the fields that were built.

tshark 4.0 names the XRC opcodes (0xA0-0xB7) but dissects no header after
their BTH: it shows the rest raw, so an XRC packet's check is the BTH fields
plus the raw bytes -- the XRCETH (the SRQ number, big-endian) first in a
request, then the RC headers in their order.  Wireshark 4.0 does not know
IBA 1.5's FLUSH (0x1C) and ATOMIC WRITE (0x1D) either: it decodes their BTH
and shows the rest raw, which must then be exactly FETH/RETH/payload + ICRC.

tshark (4.0) field display formats, hence the per-field parsers below:
bth.opcode/psn/padcnt/tver/p_key, aeth.syndrome/msn, atomiceth.swapdt/cmpdt,
atomicacketh.origremdt: decimal; bth.destqp, reth.va/r_key, deth.q_key/srcqp,
invariant.crc: 0x-hex; reth.dmalen: decimal (BASE_DEC_HEX); immdt, ieth,
reserved, vendor: raw bytes as hex digits; booleans: 1/0 (or True/False).
AtomicETH's VA and R_Key are shown in the reth.va / reth.r_key fields.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

import pytest

from softrdma import wire
from softrdma.wire import Opcode, build, build_cnp, icrc, pad_count
from softrdma.wire.icrc import ICRC, ipv4_header, ipv6_header, udp_header
from softrdma.wire.opcodes import IB_OPCODE_XRC, OPCODE_TABLE
from softrdma.wire.pcap import (
    ETH_P_IP, ETH_P_IPV6, LINKTYPE_ETHERNET, PCAP_MAGIC_NSEC, PcapWriter, ethernet, roce_frame,
)

SRC4, DST4 = bytes([10, 77, 0, 1]), bytes([10, 77, 0, 2])
SRC6 = bytes.fromhex("fe80000000000000505400fffe770001")
DST6 = bytes.fromhex("20010db8007700000000000000000002")

# Payload heuristics (RPC-over-RDMA, EoIB, SDP, ...) would try to dissect our
# arbitrary payloads, mark some frames malformed and swallow the ICRC field;
# they are not what is under test.  Unknown names are ignored by tshark.
PAYLOAD_HEURISTICS = ("rpcordma", "infiniband.eoib", "infiniband_sdp", "iser", "lnet", "nvme-rdma",
                      "smb_direct", "smc", "fcoib")


def _dec(s):
    return int(s, 10)


def _hex(s):
    return int(s, 16)


def _dec_or_hex(s):
    return int(s.split()[0], 0)


def _bool(s):
    return {"1": True, "0": False, "True": True, "False": False}[s]


def _raw(s):
    return bytes.fromhex(s.replace(":", ""))


# tshark field -> parser; "first" or "last" occurrence is used.
FIELDS = {
    "frame.number": (_dec, "first"),
    "ip.id": (_hex, "first"),
    "ipv6.flow": (_hex, "first"),
    "udp.srcport": (_dec, "first"),
    "udp.dstport": (_dec, "first"),
    "udp.length": (_dec, "first"),
    "infiniband.bth.opcode": (_dec, "first"),
    "infiniband.bth.se": (_bool, "first"),
    "infiniband.bth.m": (_bool, "first"),
    "infiniband.bth.padcnt": (_dec, "first"),
    "infiniband.bth.tver": (_dec, "first"),
    "infiniband.bth.p_key": (_dec, "first"),
    "infiniband.reserved": (_raw, "first"),          # BTH byte 4 (FECN, BECN, resv6)
    "infiniband.bth.destqp": (_hex, "first"),
    "infiniband.bth.a": (_bool, "first"),
    "infiniband.bth.psn": (_dec, "first"),
    "infiniband.deth.q_key": (_hex, "first"),
    "infiniband.deth.srcqp": (_hex, "first"),
    "infiniband.reth.va": (_hex, "first"),
    "infiniband.reth.r_key": (_hex, "first"),
    "infiniband.reth.dmalen": (_dec_or_hex, "first"),
    "infiniband.atomiceth.swapdt": (_dec, "first"),
    "infiniband.atomiceth.cmpdt": (_dec, "first"),
    "infiniband.aeth.syndrome": (_dec, "first"),
    "infiniband.aeth.msn": (_dec, "first"),
    "infiniband.atomicacketh.origremdt": (_dec, "first"),
    "infiniband.immdt": (_raw, "last"),               # header item and value share the name
    "infiniband.ieth": (_raw, "last"),
    "infiniband.vendor": (_raw, "last"),              # CNP: unknown opcode, rest shown raw
    "infiniband.invariant.crc": (_hex, "first"),
}


@pytest.fixture(scope="module")
def tshark():
    path = shutil.which("tshark")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tshark not found on PATH (required when CI=true)")
        pytest.skip("tshark not installed")
    return path


def _packets():
    """One packet of every opcode, every field distinct and known."""
    out = []
    for i, info in enumerate(i for i in OPCODE_TABLE if i is not None):
        if info.opcode == Opcode.CNP:
            ib = build_cnp(0x0A0B0C, pkey=0x8001)
            out.append((info, ib, dict(dqpn=0x0A0B0C, psn=0, pkey=0x8001, becn=True, payload=b"")))
            continue
        f = dict(dqpn=0x100000 + 0x0101 * i, psn=(0xFFFFF0 + 3 * i) & 0xFFFFFF,
                 ackreq=bool(i % 2), se=bool(i % 3 == 0), mig=bool(i % 5 == 0),
                 pkey=0xFFFF if i % 4 else 0x8000 + i,
                 payload=bytes((0x41 + i + k) & 0xFF for k in range(i % 9)) if info.has_payload else b"")
        if info.reth >= 0:
            f["reth"] = (0xFFFF8000_00000000 + 0x1000 * i + 0x123, 0x00A0B000 + i, 0x10000 + 17 * i)
        if info.aeth >= 0:
            f["aeth"] = ((0x1F, 0x60, 0x2E, 0x63)[i % 4], 0x123400 + i)
        if info.atmeth >= 0:
            f["atmeth"] = (0x00007F5D_AB593008 + 8 * i, 0x0000048A + i, 0xFEDCBA9876543210 + i, 0x0123456789 + i)
        if info.atmack >= 0:
            f["atmack"] = 0x8000000000000001 + i
        if info.deth >= 0:
            f["deth"] = (0x80010000 + i, 0x000ABC + i)
        if info.immdt >= 0:
            f["imm"] = 0xDEADBE00 + i
        if info.ieth >= 0:
            f["ieth"] = 0xCAFE0000 + i
        if info.xrceth >= 0:
            f["xrceth"] = 0x00F000 + 0x0203 * i
        if info.feth >= 0:
            f["feth"] = 0x10 | (1 + i % 2)          # SEL MR, PLT GLOBAL or PERSISTENT
        ib = build(info.opcode, f["dqpn"], f["psn"], f["payload"],
                   **{k: v for k, v in f.items() if k not in ("dqpn", "psn", "payload")})
        out.append((info, ib, f))
    return out


def _run_tshark(tshark, path):
    cmd = [tshark, "-n", "-r", str(path), "-T", "fields", "-E", "separator=,", "-E", "occurrence=a",
           "-E", "aggregator=|", "-E", "quote=n"]
    for proto in PAYLOAD_HEURISTICS:
        cmd += ["--disable-protocol", proto]
    for field in FIELDS:
        cmd += ["-e", field]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    # tshark as root warns on stderr ("Running as user root ..."); only the exit code matters
    assert res.returncode == 0, res.stderr
    rows = []
    for line in res.stdout.splitlines():
        cols = line.split(",")
        assert len(cols) == len(FIELDS), line
        row = {}
        for (name, (parse, which)), col in zip(FIELDS.items(), cols):
            if col == "":
                row[name] = None
                continue
            vals = col.split("|")
            row[name] = parse(vals[0] if which == "first" else vals[-1])
        rows.append(row)
    return rows


def _frames():
    """Every packet over IPv4 and over IPv6, as Ethernet frames:
    (family, index, info, ib, fields, udp sport, frame)."""
    pkts = _packets()
    frames = []
    for family in ("ipv4", "ipv6"):
        for n, (info, ib, fields) in enumerate(pkts):
            sport = wire.udp_sport(fields["dqpn"], 0x11)
            if family == "ipv4":
                frame = roce_frame(ib, SRC4, DST4, sport=sport, ident=0x1000 + n, df=True)
            else:
                frame = roce_frame(ib, SRC6, DST6, sport=sport, ttl=32, tos=0x28)
            frames.append((family, n, info, ib, fields, sport, frame))
    return frames


@pytest.fixture(scope="module")
def decoded(tshark, tmp_path_factory):
    frames = _frames()
    path = tmp_path_factory.mktemp("pcap") / "all_opcodes.pcap"
    with open(path, "wb") as f:
        w = PcapWriter(f)
        for k, fr in enumerate(frames):
            w.write(fr[-1], ts_ns=1_700_000_000_000_000_000 + 1000 * k)
        w.flush()
    rows = _run_tshark(tshark, path)
    assert len(rows) == len(frames) == 2 * 63
    assert [r["frame.number"] for r in rows] == list(range(1, len(frames) + 1))
    return list(zip(frames, rows))


def test_every_opcode_is_covered():
    codes = {info.opcode for info, _, _ in _packets()}
    assert codes == {i.opcode for i in OPCODE_TABLE if i is not None}
    assert len(codes) == 63                # 40 RC/UC/UD/CNP + 23 XRC


def test_tshark_decodes_every_field(decoded):
    for (family, n, info, ib, f, sport, frame), row in decoded:
        where = f"{family} frame {row['frame.number']} {info.name}"
        assert row["udp.dstport"] == 4791, where
        assert row["udp.srcport"] == sport, where
        assert row["udp.length"] == 8 + len(ib) + 4, where
        if family == "ipv4":
            assert row["ip.id"] == 0x1000 + n, where
        # BTH
        assert row["infiniband.bth.opcode"] == info.opcode, where
        assert row["infiniband.bth.destqp"] == f["dqpn"], where
        assert row["infiniband.bth.psn"] == f["psn"], where
        assert row["infiniband.bth.a"] is f.get("ackreq", False), where
        assert row["infiniband.bth.se"] is f.get("se", False), where
        assert row["infiniband.bth.m"] is f.get("mig", False), where
        assert row["infiniband.bth.padcnt"] == pad_count(len(f["payload"])), where
        assert row["infiniband.bth.tver"] == 0, where
        assert row["infiniband.bth.p_key"] == f["pkey"], where
        assert row["infiniband.reserved"] == bytes([0x40 if f.get("becn") else 0]), where
        ip_len = 20 if family == "ipv4" else 40
        wire_icrc = frame[14 + ip_len + 8 + len(ib):]
        if info.transport == IB_OPCODE_XRC:
            # no XRC header dissector: everything after the BTH comes out raw
            assert row["infiniband.vendor"] == bytes(ib[12:]) + wire_icrc, where
            if "xrceth" in f:
                assert ib[12:16] == f["xrceth"].to_bytes(4, "big"), where
            assert row["infiniband.reth.va"] is None and row["infiniband.aeth.msn"] is None, where
            continue
        if info.opcode in (Opcode.RC_FLUSH, Opcode.RC_ATOMIC_WRITE) and row["infiniband.vendor"] is not None:
            # no dissector in this Wireshark: everything after the BTH, raw
            assert row["infiniband.vendor"] == bytes(ib[12:]) + wire_icrc, where
            if info.opcode == Opcode.RC_FLUSH:
                assert ib[12:16] == f["feth"].to_bytes(4, "big") and ib[16:24] == f["reth"][0].to_bytes(8, "big")
            continue
        # RETH (or the VA/R_Key of an AtomicETH, which tshark files under reth.*)
        if "reth" in f:
            va, rkey, dlen = f["reth"]
            assert (row["infiniband.reth.va"], row["infiniband.reth.r_key"],
                    row["infiniband.reth.dmalen"]) == (va, rkey, dlen), where
        elif "atmeth" in f:
            va, rkey, swap, cmp_ = f["atmeth"]
            assert (row["infiniband.reth.va"], row["infiniband.reth.r_key"]) == (va, rkey), where
            assert row["infiniband.reth.dmalen"] is None, where
            assert row["infiniband.atomiceth.swapdt"] == swap, where
            assert row["infiniband.atomiceth.cmpdt"] == cmp_, where
        else:
            assert row["infiniband.reth.va"] is None and row["infiniband.reth.r_key"] is None, where
        if "atmeth" not in f:
            assert row["infiniband.atomiceth.swapdt"] is None, where
        # AETH / AtomicAckETH
        if "aeth" in f:
            assert (row["infiniband.aeth.syndrome"], row["infiniband.aeth.msn"]) == f["aeth"], where
        else:
            assert row["infiniband.aeth.syndrome"] is None and row["infiniband.aeth.msn"] is None, where
        assert row["infiniband.atomicacketh.origremdt"] == f.get("atmack"), where
        # DETH
        if "deth" in f:
            assert (row["infiniband.deth.q_key"], row["infiniband.deth.srcqp"]) == f["deth"], where
        else:
            assert row["infiniband.deth.q_key"] is None, where
        # ImmDt / IETH (raw 4 bytes, network order)
        if "imm" in f:
            assert row["infiniband.immdt"] == struct.pack(">I", f["imm"]), where
        else:
            assert row["infiniband.immdt"] is None, where
        if "ieth" in f:
            assert row["infiniband.ieth"] == struct.pack(">I", f["ieth"]), where
        else:
            assert row["infiniband.ieth"] is None, where
        # ICRC: tshark shows the four wire bytes as one big-endian number
        wire_icrc = frame[14 + ip_len + 8 + len(ib):]
        assert len(wire_icrc) == 4
        if info.opcode == Opcode.CNP:
            # Wireshark 4.0 has no CNP dissector: reserved bytes + ICRC come out raw
            assert row["infiniband.vendor"] == bytes(16) + wire_icrc, where
            assert row["infiniband.invariant.crc"] in (None, int.from_bytes(wire_icrc, "big")), where
        else:
            assert row["infiniband.invariant.crc"] == int.from_bytes(wire_icrc, "big"), where


def test_icrc_in_the_frames_is_softrdmas():
    """The frames roce_frame writes carry the ICRC icrc() computes over
    exactly the IP/UDP headers in the frame."""
    for family, n, info, ib, f, sport, frame in _frames():
        eth, rest = frame[:14], frame[14:]
        assert eth[12:14] == (ETH_P_IP if family == "ipv4" else ETH_P_IPV6).to_bytes(2, "big")
        hl = 20 if family == "ipv4" else 40
        ip_hdr, udp, body, crc = rest[:hl], rest[hl:hl + 8], rest[hl + 8:-4], rest[-4:]
        assert body == bytes(ib)
        assert ICRC.unpack(crc)[0] == icrc(ip_hdr, udp, ib)
        if family == "ipv4":
            assert ip_hdr == ipv4_header(SRC4, DST4, len(ib) + 4, ident=0x1000 + n)
        else:
            assert ip_hdr == ipv6_header(SRC6, DST6, len(ib) + 4, tclass=0x28, hop_limit=32)
        assert udp == udp_header(sport, 4791, len(ib) + 4)


def test_pcap_file_format(tmp_path):
    """Classic pcap, nanosecond magic, Ethernet link type, records as written."""
    path = tmp_path / "t.pcap"
    ib = build(Opcode.RC_SEND_ONLY, 1, 2, b"abc")
    frame = roce_frame(ib, SRC4, DST4, sport=4791)
    with open(path, "wb") as f:
        w = PcapWriter(f, snaplen=40)
        w.write(frame, ts_ns=1_234_567_890_123_456_789)
        w.write(frame, ts=1.5)
    data = path.read_bytes()
    magic, vmaj, vmin, zone, sig, snap, link = struct.unpack_from("<IHHiIII", data, 0)
    assert (magic, vmaj, vmin, zone, sig, snap, link) == (PCAP_MAGIC_NSEC, 2, 4, 0, 0, 40, LINKTYPE_ETHERNET)
    sec, nsec, cap, orig = struct.unpack_from("<IIII", data, 24)
    assert (sec, nsec, cap, orig) == (1_234_567_890, 123_456_789, 40, len(frame))
    assert data[40:80] == frame[:40]
    sec, nsec, cap, orig = struct.unpack_from("<IIII", data, 80)
    assert (sec, nsec, cap, orig) == (1, 500_000_000, 40, len(frame))
    assert len(data) == 24 + 2 * (16 + 40)
    assert ethernet(b"x", 0x0800)[12:] == b"\x08\x00x"


def test_tshark_shows_the_icrc_we_wrote(tshark, tmp_path):
    """A frame with a deliberately wrong ICRC still decodes (tshark does not
    check it) and shows the value we put there."""
    path = tmp_path / "bad.pcap"
    ib = build(Opcode.RC_ACKNOWLEDGE, 0x16, 7484691, aeth=(31, 1))
    with open(path, "wb") as f:
        w = PcapWriter(f)
        w.write(roce_frame(ib, SRC4, DST4, sport=4791, icrc_value=0x11223344), ts_ns=0)
        # NOTES.md frame 16 (an ACK rxe accepted): ICRC shown as 0xa37f03cd
        w.write(roce_frame(ib, SRC4, DST4, sport=4791), ts_ns=1)
    rows = _run_tshark(tshark, path)
    assert [r["infiniband.invariant.crc"] for r in rows] == [0x44332211, 0xA37F03CD]
    assert all(r["infiniband.aeth.syndrome"] == 31 and r["infiniband.aeth.msn"] == 1 for r in rows)
