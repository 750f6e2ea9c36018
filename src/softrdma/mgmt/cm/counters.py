"""The IB CM's message counters: ib_cm's sysfs groups ``cm_tx_msgs``,
``cm_tx_retries``, ``cm_rx_msgs`` and ``cm_rx_duplicates``.

Each group is a list indexed by ``CmAttr - 0x10`` (enum cm_counter_index:
CM_REQ_COUNTER ... CM_APR_COUNTER), ``COUNTER_INDEX`` of the message's
name; ``rx_drops`` counts the MADs ``wire.cm.decode`` refused.
"""

from __future__ import annotations

#: The counter index of each message (enum cm_counter_index), as sysfs names them.
COUNTER_NAMES = ("req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep",
                 "lap", "apr")
#: message name ("REQ", "SIDR_REP", ...) -> its index in every group
COUNTER_INDEX = {n.upper(): i for i, n in enumerate(COUNTER_NAMES)}


class CmCounters:
    """The four counter groups of one port's CM (mixed into ``CmAgent``)."""

    def __init__(self) -> None:
        n = len(COUNTER_NAMES)
        self.cm_tx_msgs = [0] * n
        self.cm_tx_retries = [0] * n
        self.cm_rx_msgs = [0] * n
        self.cm_rx_duplicates = [0] * n
        self.rx_drops = 0
