"""An ordinary pyverbs program that waits for a port's async events: it
opens the device named in argv[1], prints ``ready``, then prints each
async event's type as it comes (and acks it) until one of the types given
after the name (numbers, ibv_event_type) has come.  It imports ``pyverbs``,
not softrdma."""

import sys

from pyverbs.device import Context

ctx = Context(name=sys.argv[1])
wanted = {int(a) for a in sys.argv[2:]}
print("ready", flush=True)
while wanted:
    ev = ctx.get_async_event()
    print(ev.event_type, flush=True)
    ev.ack()
    wanted.discard(ev.event_type)
ctx.close()
