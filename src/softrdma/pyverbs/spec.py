from ..verbs.spec import EthSpec, Ipv4ExtSpec, Ipv4Spec, Ipv6Spec, Spec, TcpUdpSpec  # noqa: F401
