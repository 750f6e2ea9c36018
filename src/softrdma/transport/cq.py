"""A completion queue as the transport needs it: somewhere to push WCs.

The device's CQ is a shared-memory ring; this list-backed one serves the
simulator and tests and defines the interface (``push(wc, solicited=False)``; ``solicited`` is the BTH SE bit of the
message, for req_notify(solicited_only)).  A push beyond
``cqe`` entries sets ``overrun`` (IBV_EVENT_CQ_ERR in the device) and the
completion is lost, as on hardware.
"""

from collections import deque

from ..uapi.abi import WC


class CompletionQueue:
    def __init__(self, cqe: int = 1 << 20):
        self.cqe = cqe
        self.entries: deque[WC] = deque()
        self.overrun = False

    def push(self, wc: WC, solicited: bool = False) -> None:
        if len(self.entries) >= self.cqe:
            self.overrun = True
            return
        self.entries.append(wc)

    def poll(self, n: int = 1) -> list[WC]:
        out = []
        e = self.entries
        while e and len(out) < n:
            out.append(e.popleft())
        return out

    def __len__(self) -> int:
        return len(self.entries)
