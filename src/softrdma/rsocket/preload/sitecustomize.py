"""Loaded by Python at start-up under ``softrdma run --sockets``: TCP
sockets go over rsockets where the peer speaks them (softrdma.rsocket.accel)."""

from softrdma.rsocket import accel as _accel

_accel.install()
