"""Credit-based flow control for one connection.

The peer grants ``initial`` receive buffers at connection setup.  A data
fragment costs one credit: a sender never posts beyond the credits it holds.
The receiver reposts each buffer once it has consumed it and owes the
credit back; it returns owed credits in the header of any message it sends,
or in a credit message once ``threshold`` are owed.  Credit messages cost no
credit: each carries at least ``threshold`` credits, so at most
``initial // threshold`` are ever in flight, and the receiver keeps that many
buffers spare for them (``reserve``).
"""

from __future__ import annotations


class Credits:
    def __init__(self, initial: int):
        if initial < 2:
            raise ValueError("at least 2 credits")
        self.initial = initial
        self.available = initial        # fragments we may still post to the peer
        self.owed = 0                   # buffers of ours consumed and reposted, not yet returned
        self.threshold = max(1, initial // 2)

    @staticmethod
    def reserve(initial: int) -> int:
        """Receive buffers kept beyond ``initial`` for credit messages."""
        return initial // max(1, initial // 2) + 1

    def can_send(self) -> bool:
        return self.available > 0

    def spend(self) -> None:
        if self.available <= 0:
            raise RuntimeError("no credit left: the peer has no receive buffer for this fragment")
        self.available -= 1

    def granted(self, n: int) -> None:
        """The peer returned ``n`` credits (a header's credits field)."""
        self.available += n
        if self.available > self.initial:
            raise RuntimeError(f"peer returned more credits than granted ({self.available} > {self.initial})")

    def consumed(self, data: bool) -> None:
        """One of our buffers was consumed and reposted: a data fragment's is
        owed back to the peer; a credit message's was spare and is not."""
        if data:
            self.owed += 1

    def take_owed(self) -> int:
        """The credits to piggyback on the next message sent (all owed)."""
        n, self.owed = min(self.owed, 0xFFFF), self.owed - min(self.owed, 0xFFFF)
        return n

    def credit_message_due(self) -> bool:
        return self.owed >= self.threshold
