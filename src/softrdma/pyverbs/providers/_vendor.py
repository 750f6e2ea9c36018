"""How a vendor object fails on softrdma's device: as on any device of
another vendor -- the direct-verbs call is not supported (EOPNOTSUPP)."""

from .._unsupported import unsupported


def bitmask_to_str(bits, values):
    """pyverbs' rendering of a bitmask: the names of the set bits, unknown
    bits as ??(hex), then the number in hex."""
    numeric_bits = bits
    flags = []
    for k, v in sorted(values.items()):
        if bits & k:
            flags.append(v)
            bits -= k
    if bits:
        flags.append(f'??({bits:x})')
    if not flags:
        flags.append('None')
    return ', '.join(flags) + f' ({numeric_bits:x})'


def other_vendor(vendor: str, *names: str) -> dict:
    """Classes named ``names`` whose construction fails with EOPNOTSUPP,
    as the vendor's direct verbs do on a device of another vendor."""
    return {n: unsupported(n, f"softrdma's device is not an {vendor} device") for n in names}
