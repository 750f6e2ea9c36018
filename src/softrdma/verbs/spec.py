"""pyverbs.spec: flow steering specs (pyverbs/spec.pyx) -- the header fields
a Flow matches on, each a value and a mask (the mask defaults to all ones
when only a value is given, none when neither is).

``Spec.to_wire`` is the spec as create_flow carries it (``wire.flow``:
every field an integer of its width -- a MAC "aa:bb:..." as 48 bits, an
address as 32 or 128)."""

import ipaddress

from ..enums import (IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_INNER, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_IPV4_EXT,
                     IBV_FLOW_SPEC_IPV6, IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP)
from ..wire.flow import SPEC_FIELDS
from .errors import PyverbsError

_TYPE_NAMES = {IBV_FLOW_SPEC_ETH: "IBV_FLOW_SPEC_ETH", IBV_FLOW_SPEC_IPV4: "IBV_FLOW_SPEC_IPV4",
               IBV_FLOW_SPEC_IPV4_EXT: "IBV_FLOW_SPEC_IPV4_EXT",
               IBV_FLOW_SPEC_IPV6: "IBV_FLOW_SPEC_IPV6", IBV_FLOW_SPEC_TCP: "IBV_FLOW_SPEC_TCP",
               IBV_FLOW_SPEC_UDP: "IBV_FLOW_SPEC_UDP"}


class Spec:
    """Base of the specs; ``size`` is the C struct's (ibv_flow_spec_*)."""

    def __init__(self):
        raise NotImplementedError('This class is abstract.')

    def _init(self, spec_type, size, is_inner, fields):
        self.spec_type = spec_type | (IBV_FLOW_SPEC_INNER if is_inner else 0)
        self.size = size
        for name, (default_mask, val, mask) in fields.items():
            v, m = self._set_val_mask(default_mask, val, mask)
            setattr(self, name, v)
            setattr(self, name + "_mask", m)

    @staticmethod
    def _set_val_mask(default_mask, val=None, val_mask=None):
        if val is None:
            return 0, 0
        return val, default_mask if val_mask is None else val_mask

    @staticmethod
    def type_to_str(spec_type):
        res = "IBV_FLOW_SPEC_INNER " if spec_type & IBV_FLOW_SPEC_INNER else ""
        s_type = spec_type & ~IBV_FLOW_SPEC_INNER
        if s_type not in _TYPE_NAMES:
            raise PyverbsError(f'This type {s_type} is not implemented yet')
        return res + _TYPE_NAMES[s_type]

    def to_wire(self) -> dict:
        """``{"type": ..., "fields": {name: [value, mask]}}`` for create_flow
        (fields whose mask is 0 match anything and are left out)."""
        fields = {}
        for name, bits in SPEC_FIELDS.get(self.spec_type & ~IBV_FLOW_SPEC_INNER, {}).items():
            val = _to_int(getattr(self, name, 0), bits)
            mask = _to_int(getattr(self, name + "_mask", 0), bits)
            if mask:
                fields[name] = [val, mask]
        return {"type": int(self.spec_type), "fields": fields}

    def __str__(self):
        return f"{'Spec type':<16}: {self.type_to_str(self.spec_type):<20}\n" \
               f"{'Size':<16}: {self.size:<20}\n"


def _to_int(v, bits: int) -> int:
    """A spec field's value as an integer: a MAC, an IPv4 or IPv6 address
    in text, or a number."""
    if isinstance(v, str):
        if bits == 48:
            return int(v.replace(":", "").replace("-", ""), 16)
        try:
            return int(ipaddress.ip_address(v))
        except ValueError:
            raise PyverbsError(f"Invalid address {v!r}") from None
    if isinstance(v, (bytes, bytearray)):
        return int.from_bytes(v, "big")
    return int(v)


MAC_MASK = "ff:ff:ff:ff:ff:ff"
IPV4_MASK = "255.255.255.255"
IPV6_MASK = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"


class EthSpec(Spec):
    MAC_MASK = MAC_MASK

    def __init__(self, dst_mac=None, dst_mac_mask=None, src_mac=None, src_mac_mask=None, ether_type=None,
                 ether_type_mask=None, vlan_tag=None, vlan_tag_mask=None, is_inner=0):
        self._init(IBV_FLOW_SPEC_ETH, 40, is_inner, {
            "dst_mac": (MAC_MASK, dst_mac, dst_mac_mask), "src_mac": (MAC_MASK, src_mac, src_mac_mask),
            "ether_type": (0xffff, ether_type, ether_type_mask), "vlan_tag": (0xffff, vlan_tag, vlan_tag_mask)})


class Ipv4Spec(Spec):
    def __init__(self, dst_ip=None, dst_ip_mask=None, src_ip=None, src_ip_mask=None, is_inner=False):
        self._init(IBV_FLOW_SPEC_IPV4, 16, is_inner, {
            "dst_ip": (IPV4_MASK, dst_ip, dst_ip_mask), "src_ip": (IPV4_MASK, src_ip, src_ip_mask)})


class Ipv4ExtSpec(Spec):
    def __init__(self, dst_ip=None, dst_ip_mask=None, src_ip=None, src_ip_mask=None, proto=None, proto_mask=None,
                 tos=None, tos_mask=None, ttl=None, ttl_mask=None, flags=None, flags_mask=None, is_inner=False):
        self._init(IBV_FLOW_SPEC_IPV4_EXT, 32, is_inner, {
            "dst_ip": (IPV4_MASK, dst_ip, dst_ip_mask), "src_ip": (IPV4_MASK, src_ip, src_ip_mask),
            "proto": (0xff, proto, proto_mask), "tos": (0xff, tos, tos_mask), "ttl": (0xff, ttl, ttl_mask),
            "flags": (0xff, flags, flags_mask)})


class TcpUdpSpec(Spec):
    def __init__(self, spec_type, dst_port=None, dst_port_mask=None, src_port=None, src_port_mask=None,
                 is_inner=False):
        if spec_type not in (IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP):
            raise PyverbsError('Spec type must be IBV_FLOW_SPEC_TCP or IBV_FLOW_SPEC_UDP')
        self._init(spec_type, 16, is_inner, {
            "dst_port": (0xffff, dst_port, dst_port_mask), "src_port": (0xffff, src_port, src_port_mask)})


class Ipv6Spec(Spec):
    def __init__(self, dst_ip=None, dst_ip_mask=None, src_ip=None, src_ip_mask=None, flow_label=None,
                 flow_label_mask=None, next_hdr=None, next_hdr_mask=None, traffic_class=None,
                 traffic_class_mask=None, hop_limit=None, hop_limit_mask=None, is_inner=False):
        self._init(IBV_FLOW_SPEC_IPV6, 88, is_inner, {
            "dst_ip": (IPV6_MASK, dst_ip, dst_ip_mask), "src_ip": (IPV6_MASK, src_ip, src_ip_mask),
            "flow_label": (0xfffff, flow_label, flow_label_mask), "next_hdr": (0xff, next_hdr, next_hdr_mask),
            "traffic_class": (0xff, traffic_class, traffic_class_mask),
            "hop_limit": (0xff, hop_limit, hop_limit_mask)})
