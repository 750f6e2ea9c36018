"""The one exception type the wire layer raises on untrusted bytes."""


class WireError(ValueError):
    """A packet that cannot be parsed (truncated, unknown opcode, bad field).

    ``reason`` is a short stable token (e.g. ``"truncated"``, ``"bad_opcode"``)
    that receivers use as a drop-counter key; the message says what was seen.
    Parsing never raises anything else and never reads past the buffer.
    """

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
