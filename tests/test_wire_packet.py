"""softrdma.wire.packet / headers: build/parse round trips for every opcode,
byte-exact header layout, PSN arithmetic, pad, the CNP, and the promise that
parse()/check() on untrusted bytes raise nothing but WireError."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from softrdma import wire
from softrdma.wire import WireError, build, build_cnp, check, pad_count, parse, psn_add, psn_diff
from softrdma.wire import headers as H
from softrdma.wire.opcodes import OPCODE_TABLE, Opcode

ALL_OPS = [info for info in OPCODE_TABLE if info is not None]
DATA_OPS = [info for info in ALL_OPS if info.opcode != Opcode.CNP]
PAYLOAD_OPS = [info for info in ALL_OPS if info.has_payload]

# OpInfo attribute -> (build() keyword, Packet attribute)
HDR_KW = {"reth": "reth", "aeth": "aeth", "atmeth": "atmeth", "atmack": "atmack",
          "deth": "deth", "immdt": "imm", "ieth": "ieth", "xrceth": "xrceth", "feth": "feth"}

PROPS = settings(max_examples=300, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


def sample_headers(info, i: int = 0) -> dict:
    """Realistic extension-header values for ``info`` (distinct per ``i``)."""
    kw = {}
    if info.reth >= 0:
        kw["reth"] = (0x00007F3A_12345000 + 0x1000 * i, 0x0001A2B3 + i, 4096 + i)
    if info.aeth >= 0:
        kw["aeth"] = (wire.AETH_ACK_UNLIMITED, 0x000101 + i)
    if info.atmeth >= 0:
        kw["atmeth"] = (0x00007F3A_00002000 + 8 * i, 0x00C0FFEE + i, 0x1 + i, 0xFFFFFFFFFFFFFFFF - i)
    if info.atmack >= 0:
        kw["atmack"] = 0x0123456789ABCDEF + i
    if info.deth >= 0:
        kw["deth"] = (0x11111111 + i, 0x0000A1 + i)
    if info.immdt >= 0:
        kw["imm"] = 0x12345678 + i
    if info.ieth >= 0:
        kw["ieth"] = 0x00BEEF01 + i
    if info.xrceth >= 0:
        kw["xrceth"] = 0x000A5A + i
    if info.feth >= 0:                       # SEL (bits 5:4) and PLT (bits 3:0)
        kw["feth"] = ((i & 1) << 4) | (1 + i % 2)
    return kw


def be(buf, off: int, n: int) -> int:
    return int.from_bytes(bytes(buf[off:off + n]), "big")


def assert_layout(buf, info, *, dqpn, psn, payload, ackreq=False, se=False, mig=False,
                  pkey=0xFFFF, fecn=False, becn=False, **hdrs):
    """Check the wire bytes by hand (independently of the Structs)."""
    pad = pad_count(len(payload))
    assert len(buf) == info.length + len(payload) + pad
    assert buf[0] == info.opcode
    assert buf[1] == (se << 7) | (mig << 6) | (pad << 4)        # TVer 0
    assert be(buf, 2, 2) == pkey
    assert buf[4] == (fecn << 7) | (becn << 6)
    assert be(buf, 5, 3) == dqpn & 0xFFFFFF
    assert buf[8] == (ackreq << 7)
    assert be(buf, 9, 3) == psn & 0xFFFFFF
    if "reth" in hdrs:
        o = info.reth
        assert (be(buf, o, 8), be(buf, o + 8, 4), be(buf, o + 12, 4)) == hdrs["reth"]
    if "aeth" in hdrs:
        o = info.aeth
        assert (buf[o], be(buf, o + 1, 3)) == hdrs["aeth"]
    if "atmeth" in hdrs:
        o = info.atmeth
        assert (be(buf, o, 8), be(buf, o + 8, 4), be(buf, o + 12, 8), be(buf, o + 20, 8)) == hdrs["atmeth"]
    if "atmack" in hdrs:
        assert be(buf, info.atmack, 8) == hdrs["atmack"]
    if "deth" in hdrs:
        o = info.deth
        assert (be(buf, o, 4), buf[o + 4], be(buf, o + 5, 3)) == (hdrs["deth"][0], 0, hdrs["deth"][1])
    if "imm" in hdrs:
        assert be(buf, info.immdt, 4) == hdrs["imm"]
    if "ieth" in hdrs:
        assert be(buf, info.ieth, 4) == hdrs["ieth"]
    if "xrceth" in hdrs:
        assert (buf[info.xrceth], be(buf, info.xrceth + 1, 3)) == (0, hdrs["xrceth"])
    if "feth" in hdrs:
        assert be(buf, info.feth, 4) == hdrs["feth"] and info.reth == info.feth + 4    # FETH, then RETH
    assert bytes(buf[info.length:info.length + len(payload)]) == bytes(payload)
    assert bytes(buf[info.length + len(payload):]) == bytes(pad)


def assert_parsed(pkt, info, *, dqpn, psn, payload, ackreq=False, se=False, mig=False,
                  pkey=0xFFFF, fecn=False, becn=False, **hdrs):
    assert pkt.info is info
    assert pkt.name == info.name
    assert pkt.opcode == info.opcode
    assert (pkt.se, pkt.mig, pkt.ackreq, pkt.fecn, pkt.becn) == (se, mig, ackreq, fecn, becn)
    assert pkt.tver == 0
    assert pkt.pkey == pkey
    assert pkt.dqpn == dqpn & 0xFFFFFF
    assert pkt.psn == psn & 0xFFFFFF
    assert pkt.pad == pad_count(len(payload))
    assert isinstance(pkt.payload, memoryview)
    assert bytes(pkt.payload) == bytes(payload)
    for attr, kw in HDR_KW.items():
        got = getattr(pkt, kw)
        if kw in hdrs:
            want = hdrs[kw]
            assert got == want, kw
            if isinstance(want, tuple):
                assert tuple(got) == want
        else:
            assert got is None, kw
        assert (getattr(info, attr) >= 0) == (got is not None)


# --- round trips, every opcode --------------------------------------------------

PAYLOAD_LENS = (0, 1, 2, 3, 4, 5, 7, 8, 1023, 1024, 4096)


@pytest.mark.parametrize("info", DATA_OPS, ids=lambda i: i.name)
def test_round_trip_every_opcode(info):
    lens = PAYLOAD_LENS if info.has_payload else (0,)
    for i, plen in enumerate(lens):
        payload = bytes((7 * k + i) & 0xFF for k in range(plen))
        hdrs = sample_headers(info, i)
        fields = dict(dqpn=0x000011 + i, psn=(0xFFFFFD + i) & 0xFFFFFF, payload=payload,
                      ackreq=bool(i & 1), se=bool(i & 2), mig=bool(i & 4),
                      pkey=0xFFFF if i % 3 else 0x8001, fecn=bool(i & 8), becn=bool(i & 16), **hdrs)
        buf = build(info.opcode, fields["dqpn"], fields["psn"], payload,
                    **{k: v for k, v in fields.items() if k not in ("dqpn", "psn", "payload")})
        assert isinstance(buf, bytearray)
        assert_layout(buf, info, **fields)
        pkt = parse(buf)
        assert_parsed(pkt, info, **fields)
        assert check(buf) == (info, plen)
        assert check(bytes(buf)) == (info, plen)
        # parse accepts bytes, bytearray and memoryview alike
        assert_parsed(parse(bytes(buf)), info, **fields)
        assert_parsed(parse(memoryview(buf)), info, **fields)


def test_round_trip_realistic_rc_exchange():
    """A write, a read and an atomic as rxe would put them on the wire."""
    w1 = build(Opcode.RC_RDMA_WRITE_FIRST, 0x16, 0x7234D0, b"\x7b" * 1024,
               reth=(0x00007FB14CE34000, 0x0000055D, 65536))
    w2 = build(Opcode.RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 0x16, 0x7234D1, b"\x7b" * 3, ackreq=True,
               imm=0xA1B2C3D4)
    rd = build(Opcode.RC_RDMA_READ_REQUEST, 0x16, 0x7234D2, reth=(0x00007FB14CE34000, 0x55D, 8192),
               ackreq=True)
    rr = build(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, 0xA1, 0x7234D3, b"\x00" * 1024)
    fa = build(Opcode.RC_FETCH_ADD, 0x16, 0x7234D4, atmeth=(0x7FB14CE34008, 0x55D, 1, 0), ackreq=True)
    aa = build(Opcode.RC_ATOMIC_ACKNOWLEDGE, 0xA1, 0x7234D4, aeth=(0x1F, 3), atmack=41)
    nak = build(Opcode.RC_ACKNOWLEDGE, 0xA1, 0x7234D0, aeth=(wire.AETH_NAK_PSN_SEQ_ERROR, 0))
    assert len(w1) == 28 + 1024 and len(w2) == 16 + 4 and len(rd) == 28
    assert len(rr) == 12 + 1024 and len(fa) == 40 and len(aa) == 24 and len(nak) == 16
    p = parse(w2)
    assert (p.pad, bytes(p.payload), p.imm, p.ackreq) == (1, b"\x7b" * 3, 0xA1B2C3D4, True)
    p = parse(rd)
    assert p.reth == H.Reth(0x00007FB14CE34000, 0x55D, 8192) and len(p.payload) == 0
    p = parse(rr)
    assert p.aeth is None and len(p.payload) == 1024
    p = parse(fa)
    assert p.atmeth == H.AtomicEth(0x7FB14CE34008, 0x55D, 1, 0)
    p = parse(aa)
    assert (p.aeth, p.atmack) == (H.Aeth(0x1F, 3), 41)
    p = parse(nak)
    assert p.aeth.syndrome & wire.AETH_TYPE_MASK == wire.AETH_NAK
    assert p.aeth.syndrome == 0x60 and p.psn == 0x7234D0


def test_ud_round_trip():
    b = build(Opcode.UD_SEND_ONLY_WITH_IMMEDIATE, 0x000123, 42, b"hello", deth=(0x11111111, 0x0000A1),
              imm=0xCAFEF00D, se=True)
    assert len(b) == 24 + 5 + 3
    assert b[12:16] == b"\x11\x11\x11\x11" and b[16:20] == b"\x00\x00\x00\xa1"
    assert b[20:24] == b"\xca\xfe\xf0\x0d"
    p = parse(b)
    assert p.deth == H.Deth(0x11111111, 0xA1) and p.imm == 0xCAFEF00D and bytes(p.payload) == b"hello"


def test_build_masks_out_of_range_qpn_psn_fields():
    """High bits of 24-bit fields must not leak into FECN/BECN/AckReq/reserved."""
    b = build(Opcode.UD_SEND_ONLY, 0xFF123456, 0xFFABCDEF, b"", deth=(1, 0xFF000002))
    p = parse(b)
    assert (p.dqpn, p.psn, p.fecn, p.becn, p.ackreq) == (0x123456, 0xABCDEF, False, False, False)
    assert b[4] == 0 and b[8] == 0
    assert p.deth == H.Deth(1, 2) and b[16] == 0
    b = build(Opcode.RC_ACKNOWLEDGE, 1, 2, aeth=(0x1F, 0x7FFFFFF))
    assert parse(b).aeth == H.Aeth(0x1F, 0xFFFFFF)


def test_payload_is_a_zero_copy_view():
    buf = build(Opcode.RC_SEND_ONLY, 1, 2, b"abcd")
    p = parse(buf)
    assert p.payload.obj is buf
    buf[12] = ord("z")
    assert bytes(p.payload) == b"zbcd"


def test_parse_stays_within_a_slice():
    pkt = build(Opcode.RC_RDMA_WRITE_ONLY, 7, 8, b"xyz", reth=(1, 2, 3))
    big = bytearray(b"\xee" * 10) + pkt + bytearray(b"\xff" * 10)
    p = parse(memoryview(big)[10:10 + len(pkt)])
    assert bytes(p.payload) == b"xyz" and p.reth == H.Reth(1, 2, 3)
    with pytest.raises(WireError):            # trailing bytes are not silently ignored
        parse(memoryview(big)[10:10 + len(pkt) + 1])


def test_parse_casts_multibyte_memoryviews():
    pkt = build(Opcode.RC_SEND_ONLY, 7, 8, b"abcdefgh")
    p = parse(memoryview(pkt).cast("I"))
    assert bytes(p.payload) == b"abcdefgh" and p.dqpn == 7


# --- named header views ------------------------------------------------------------

def test_pack_unpack_bth_agree_with_build():
    buf = bytearray(12)
    H.pack_bth(buf, Opcode.RC_SEND_LAST, 0xABCDEF, 0x123456, se=True, mig=True, pad=3, pkey=0x8001,
               fecn=True, becn=True, ackreq=True)
    assert buf == build(Opcode.RC_SEND_LAST, 0xABCDEF, 0x123456, b"x", se=True, mig=True, pkey=0x8001,
                        fecn=True, becn=True, ackreq=True)[:12]
    assert H.unpack_bth(buf) == H.Bth(Opcode.RC_SEND_LAST, True, True, 3, 0, 0x8001, True, True,
                                      0xABCDEF, True, 0x123456)
    assert H.aeth_word(0x60, 0x123456) == 0x60123456
    assert H.aeth_word(0x1FF, 0x1000001) == 0xFF000001


def test_aeth_and_rnr_constants():
    assert wire.AETH_ACK == 0x00 and wire.AETH_RNR_NAK == 0x20 and wire.AETH_NAK == 0x60
    assert wire.AETH_TYPE_MASK == 0xE0
    for syn in (wire.AETH_NAK_PSN_SEQ_ERROR, wire.AETH_NAK_INVALID_REQ, wire.AETH_NAK_REM_ACC_ERR,
                wire.AETH_NAK_REM_OP_ERR):
        assert syn & wire.AETH_TYPE_MASK == wire.AETH_NAK
    assert wire.AETH_ACK_UNLIMITED & wire.AETH_TYPE_MASK == wire.AETH_ACK
    # IBA table 45
    assert len(wire.RNR_TIMER_US) == 32
    assert wire.RNR_TIMER_US[0] == 655360 and wire.RNR_TIMER_US[1] == 10
    assert wire.RNR_TIMER_US[12] == 640 and wire.RNR_TIMER_US[31] == 491520
    assert list(wire.RNR_TIMER_US[1:]) == sorted(wire.RNR_TIMER_US[1:])


# --- PSN arithmetic -------------------------------------------------------------------

def test_psn_add_wraps():
    assert psn_add(0, 1) == 1
    assert psn_add(0xFFFFFF, 1) == 0
    assert psn_add(0xFFFFFE, 3) == 1
    assert psn_add(0, -1) == 0xFFFFFF
    assert psn_add(5, 1 << 24) == 5
    assert psn_add(0x123456, 0) == 0x123456


def test_psn_diff_boundaries():
    assert psn_diff(0, 0) == 0
    assert psn_diff(0, 0xFFFFFF) == 1
    assert psn_diff(0xFFFFFF, 0) == -1
    assert psn_diff(1, 0xFFFFFE) == 3
    assert psn_diff(0xFFFFFE, 1) == -3
    half = 1 << 23
    assert psn_diff(half - 1, 0) == half - 1        # largest positive
    assert psn_diff(half, 0) == -half               # +2^23 reads as -2^23
    assert psn_diff(0, half) == -half
    assert psn_diff(0, half - 1) == -(half - 1)
    assert psn_diff(0, half + 1) == half - 1
    assert psn_diff(0xFFFFFF, half - 1) == -half
    assert psn_diff(half - 1 + 5, 5) == half - 1


@PROPS
@given(a=st.integers(0, 0xFFFFFF), n=st.integers(-(1 << 23), (1 << 23) - 1))
def test_psn_add_diff_inverse(a, n):
    b = psn_add(a, n)
    assert 0 <= b <= 0xFFFFFF
    assert psn_diff(b, a) == n
    assert psn_add(b, -n) == a


@PROPS
@given(a=st.integers(0, 0xFFFFFF), b=st.integers(0, 0xFFFFFF))
def test_psn_diff_range(a, b):
    d = psn_diff(a, b)
    assert -(1 << 23) <= d < (1 << 23)
    assert psn_add(b, d) == a
    if d != -(1 << 23):
        assert psn_diff(b, a) == -d


def test_pad_count():
    assert [pad_count(n) for n in range(9)] == [0, 3, 2, 1, 0, 3, 2, 1, 0]
    assert pad_count(1023) == 1 and pad_count(1024) == 0 and pad_count(4095) == 1
    for n in range(64):
        assert (n + pad_count(n)) % 4 == 0 and 0 <= pad_count(n) <= 3


# --- hypothesis: parse(build(...)) ---------------------------------------------------

U24 = st.integers(0, 0xFFFFFF)
U32 = st.integers(0, 0xFFFFFFFF)
U64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)


@st.composite
def packets(draw, ops=DATA_OPS, max_payload=96):
    info = draw(st.sampled_from(ops))
    hdrs = {}
    if info.reth >= 0:
        hdrs["reth"] = (draw(U64), draw(U32), draw(U32))
    if info.aeth >= 0:
        hdrs["aeth"] = (draw(st.integers(0, 0xFF)), draw(U24))
    if info.atmeth >= 0:
        hdrs["atmeth"] = (draw(U64), draw(U32), draw(U64), draw(U64))
    if info.atmack >= 0:
        hdrs["atmack"] = draw(U64)
    if info.deth >= 0:
        hdrs["deth"] = (draw(U32), draw(U24))
    if info.immdt >= 0:
        hdrs["imm"] = draw(U32)
    if info.ieth >= 0:
        hdrs["ieth"] = draw(U32)
    if info.xrceth >= 0:
        hdrs["xrceth"] = draw(st.integers(0, 0xFFFFFF))
    if info.feth >= 0:
        hdrs["feth"] = draw(U32)
    payload = draw(st.binary(max_size=max_payload)) if info.has_payload else b""
    fields = dict(dqpn=draw(U24), psn=draw(U24), payload=payload, ackreq=draw(st.booleans()),
                  se=draw(st.booleans()), mig=draw(st.booleans()), pkey=draw(st.integers(0, 0xFFFF)),
                  fecn=draw(st.booleans()), becn=draw(st.booleans()), **hdrs)
    return info, fields


def do_build(info, fields):
    return build(info.opcode, fields["dqpn"], fields["psn"], fields["payload"],
                 **{k: v for k, v in fields.items() if k not in ("dqpn", "psn", "payload")})


@PROPS
@given(packets())
def test_property_parse_build_round_trip(case):
    info, fields = case
    buf = do_build(info, fields)
    assert_layout(buf, info, **fields)
    assert_parsed(parse(buf), info, **fields)
    assert check(buf) == (info, len(fields["payload"]))


# --- robustness: untrusted bytes raise only WireError ----------------------------------

def assert_sane_or_wire_error(buf):
    """parse/check either raise WireError or return a Packet whose payload
    is a view lying exactly inside ``buf``."""
    try:
        info, plen = check(buf)
    except WireError as e:
        assert isinstance(e.reason, str) and e.reason
        with pytest.raises(WireError) as ei:
            parse(buf)
        assert ei.value.reason == e.reason
        return None
    pkt = parse(buf)
    assert pkt.info is info and len(pkt.payload) == plen
    assert isinstance(pkt.payload, memoryview)
    assert info.length + plen + pkt.pad == len(buf)
    assert bytes(pkt.payload) == bytes(buf[info.length:info.length + plen])
    # every header the row names lies within the buffer
    sizes = {"reth": 16, "aeth": 4, "atmeth": 28, "atmack": 8, "deth": 8, "immdt": 4, "ieth": 4}
    for attr, size in sizes.items():
        off = getattr(info, attr)
        if off >= 0:
            assert 12 <= off and off + size <= info.length <= len(buf)
    assert pkt.tver == 0
    return pkt


@PROPS
@given(st.binary(max_size=128))
def test_property_arbitrary_bytes(data):
    assert_sane_or_wire_error(data)
    assert_sane_or_wire_error(bytearray(data))


VALID_CODES = [info.opcode for info in ALL_OPS]


@PROPS
@given(code=st.sampled_from(VALID_CODES), flags=st.integers(0, 255), rest=st.binary(max_size=80))
def test_property_known_opcode_random_rest(code, flags, rest):
    """Random bytes behind a valid opcode reach the length/pad checks."""
    assert_sane_or_wire_error(bytes([code, flags]) + rest)


@PROPS
@given(packets(ops=ALL_OPS), st.data())
def test_property_bit_flips_and_truncation(case, data):
    info, fields = case
    if info.opcode == Opcode.CNP:
        buf = build_cnp(fields["dqpn"])
    else:
        buf = do_build(info, fields)
    n = len(buf)
    cut = data.draw(st.integers(0, n), label="cut")
    assert_sane_or_wire_error(bytes(buf[:cut]))
    flips = data.draw(st.lists(st.integers(0, 8 * n - 1), min_size=1, max_size=4), label="flips")
    bad = bytearray(buf)
    for bit in flips:
        bad[bit // 8] ^= 1 << (bit % 8)
    assert_sane_or_wire_error(bad)
    extra = data.draw(st.binary(min_size=1, max_size=8), label="extra")
    assert_sane_or_wire_error(bytes(buf) + extra)


@pytest.mark.parametrize("info", ALL_OPS, ids=lambda i: i.name)
def test_every_truncation(info):
    if info.opcode == Opcode.CNP:
        buf = build_cnp(0x123)
    else:
        buf = build(info.opcode, 0x123, 0x456, b"0123456" if info.has_payload else b"",
                    **sample_headers(info))
    for cut in range(len(buf)):
        pkt = assert_sane_or_wire_error(buf[:cut])
        if cut < info.length:
            assert pkt is None              # headers cut: always rejected
    assert assert_sane_or_wire_error(buf) is not None


# --- build() input checking -------------------------------------------------------------

@pytest.mark.parametrize("info", DATA_OPS, ids=lambda i: i.name)
def test_build_rejects_missing_and_extra_headers(info):
    full = sample_headers(info)
    base_payload = b"ab" if info.has_payload else b""
    build(info.opcode, 1, 2, base_payload, **full)          # the full set is accepted
    for kw in full:
        partial = {k: v for k, v in full.items() if k != kw}
        with pytest.raises(WireError) as ei:
            build(info.opcode, 1, 2, base_payload, **partial)
        assert ei.value.reason == "bad_header"
    spare = {"reth": (1, 2, 3), "aeth": (0, 1), "atmeth": (1, 2, 3, 4), "atmack": 5,
             "deth": (6, 7), "imm": 8, "ieth": 9}
    for kw, value in spare.items():
        if kw in full:
            continue
        with pytest.raises(WireError) as ei:
            build(info.opcode, 1, 2, base_payload, **full, **{kw: value})
        assert ei.value.reason == "bad_header"


@pytest.mark.parametrize("info", [i for i in ALL_OPS if not i.has_payload], ids=lambda i: i.name)
def test_build_rejects_payload_where_none_is_carried(info):
    hdrs = sample_headers(info)
    with pytest.raises(WireError) as ei:
        build(info.opcode, 1, 2, b"x", **hdrs)
    assert ei.value.reason == "bad_length"


@pytest.mark.parametrize("code", [0x15, 0x18, 0x2C, 0x40, 0x4A, 0x60, 0x66, 0x80, 0xFF])
def test_build_rejects_unknown_opcode(code):
    with pytest.raises(WireError) as ei:
        build(code, 1, 2)
    assert ei.value.reason == "bad_opcode"


def test_wire_error_type():
    assert issubclass(WireError, ValueError)
    e = WireError("truncated", "3 bytes")
    assert e.reason == "truncated" and "truncated" in str(e) and "3 bytes" in str(e)
    assert WireError("bad_opcode").reason == "bad_opcode"


# --- parse() rejection reasons -------------------------------------------------------------

def _reason(buf) -> str:
    with pytest.raises(WireError) as ei:
        check(buf)
    with pytest.raises(WireError) as ej:
        parse(buf)
    assert ei.value.reason == ej.value.reason
    return ei.value.reason


def test_parse_rejections():
    send = build(Opcode.RC_SEND_ONLY, 1, 2, b"abcde")            # 12 + 5 + 3 pad
    assert _reason(b"") == "truncated"
    assert _reason(bytes(send[:11])) == "truncated"
    assert _reason(b"\x40" + bytes(send[1:])) == "bad_opcode"     # RD
    assert _reason(b"\x15" + bytes(send[1:])) == "bad_opcode"     # reserved RC
    assert _reason(build(Opcode.RC_SEND_ONLY, 1, 2, b"abcd", tver=1)) == "bad_tver"
    assert _reason(bytes(send[:-1])) == "bad_length"              # not a 4-byte multiple
    # pad larger than what follows the headers
    bad = bytearray(build(Opcode.RC_SEND_ONLY, 1, 2))
    bad[1] |= 3 << 4
    assert _reason(bad) == "bad_length"
    # header-only opcodes: trailing bytes or a pad count are errors
    ack = build(Opcode.RC_ACKNOWLEDGE, 1, 2, aeth=(0x1F, 1))
    assert _reason(bytes(ack) + b"\0\0\0\0") == "bad_length"
    ack2 = bytearray(ack)
    ack2[1] |= 1 << 4
    assert _reason(ack2) == "bad_length"
    assert _reason(bytes(ack[:15])) == "truncated"
    rd = build(Opcode.RC_RDMA_READ_REQUEST, 1, 2, reth=(1, 2, 3))
    assert _reason(bytes(rd[:27])) == "truncated"
    assert _reason(bytes(build_cnp(1)[:24])) == "truncated"
    assert _reason(bytes(build_cnp(1)) + bytes(4)) == "bad_length"
    # pad 3 with a 4-byte tail is fine (1 payload byte), pad 3 with nothing is not
    ok = bytearray(build(Opcode.RC_SEND_ONLY, 1, 2, b"q"))
    assert check(ok)[1] == 1


# --- CNP -------------------------------------------------------------------------------

def test_cnp():
    b = build_cnp(0x0000A1)
    assert isinstance(b, bytearray) and len(b) == 28
    assert b[0] == 0x81
    assert b[1] == 0                       # SE/M/Pad/TVer clear
    assert b[2:4] == b"\xff\xff"           # default P_Key
    assert b[4] == 0x40                    # BECN set, FECN clear
    assert be(b, 5, 3) == 0xA1
    assert b[8:12] == bytes(4)             # AckReq 0, PSN 0
    assert b[12:28] == bytes(16)
    p = parse(b)
    assert p.opcode == Opcode.CNP and p.name == "CNP"
    assert p.becn and not p.fecn and not p.ackreq and p.psn == 0 and p.dqpn == 0xA1
    assert len(p.payload) == 0 and p.pkey == 0xFFFF
    assert check(b) == (OPCODE_TABLE[0x81], 0)
    b2 = build_cnp(0xFFFFFF, pkey=0x8001)
    assert b2[2:4] == b"\x80\x01" and be(b2, 5, 3) == 0xFFFFFF and b2[4] == 0x40
    # the same bytes as scapy.contrib.roce's cnp() (minus scapy's ICRC field)
    from scapy.compat import raw
    from scapy.contrib.roce import cnp
    assert raw(cnp(0xA1))[:28] == bytes(b)
