"""The compiled bit-field codec (wire/_bitfields.c) against Layout's Python
reference: every layout softrdma defines, random bytes and random values,
the same dicts and the same bytes; bad values leave the buffer untouched and
get the reference's WireError."""

import gc
import os

import pytest
from hypothesis import given, settings, strategies as st

from softrdma.wire import sa, smp, smp_virt  # noqa: F401  (their layouts)
from softrdma.wire.errors import WireError
from softrdma.wire.smp import Layout

try:
    import softrdma.wire._bitfields  # noqa: F401
except ImportError:
    if os.environ.get("CI") == "true":
        raise RuntimeError("softrdma.wire._bitfields was not built (gcc and the Python headers are "
                           "installed in CI)") from None
    pytest.skip("softrdma.wire._bitfields was not built", allow_module_level=True)
LAYOUTS = sorted({id(o): o for o in gc.get_objects() if isinstance(o, Layout)}.values(),
                 key=lambda lay: (lay.name, lay.size))
COMPILED = [lay for lay in LAYOUTS if lay._codec is not None]


def test_every_narrow_layout_is_compiled():
    assert {"PortInfo", "NodeInfo", "SwitchInfo", "SMInfo"} <= {lay.name for lay in COMPILED}
    for lay in LAYOUTS:
        assert (lay._codec is not None) == all(w <= 64 for _, _, w in lay.fields), lay.name


@pytest.mark.parametrize("lay", COMPILED, ids=lambda lay: lay.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decode_and_encode_match_the_reference(lay, data):
    raw = data.draw(st.binary(min_size=lay.size + 8, max_size=lay.size + 8))
    off = data.draw(st.integers(0, 8))
    got = lay.decode(raw, off)
    assert got == lay.decode_reference(raw, off)
    assert list(got) == [n for n, _, _ in lay.fields]
    # a partial encode over random bytes: named fields written, the rest kept
    names = data.draw(st.lists(st.sampled_from([n for n, _, _ in lay.fields]), unique=True))
    vals = {n: data.draw(st.integers(0, lay._mask[n])) for n in names}
    a, b = bytearray(raw), bytearray(raw)
    lay.encode_into(a, off, vals)
    lay.encode_into_reference(b, off, vals)
    assert a == b
    c = bytearray(lay.size + 8)
    c[off:off + lay.size] = raw[off:off + lay.size]
    lay.encode_into(c, off, got)               # every field back: the same bytes
    assert c[off:off + lay.size] == raw[off:off + lay.size]
    assert lay.encode(got) == _ref_encode(lay, got)


def _ref_encode(lay, values):
    out = bytearray(lay.size)
    lay.encode_into_reference(out, 0, values)
    return out


@pytest.mark.parametrize("lay", COMPILED, ids=lambda lay: lay.name)
def test_bad_values_change_nothing_and_say_why(lay):
    name, _, width = lay.fields[-1]
    for bad, why in (({name: 1 << width}, "does not fit"), ({name: -1}, "does not fit"),
                     ({"NoSuchField": 0}, "has no field")):
        buf = bytearray(range(lay.size))
        with pytest.raises(WireError, match=why):
            lay.encode_into(buf, 0, bad)
        assert buf == bytearray(range(lay.size))
    with pytest.raises(WireError, match="truncated"):
        lay.decode(bytes(lay.size - 1))
