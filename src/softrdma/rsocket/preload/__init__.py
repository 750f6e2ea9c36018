"""The directory ``softrdma run --sockets`` puts first on PYTHONPATH: its
``sitecustomize`` makes the program's TCP sockets AccelSockets
(``softrdma.rsocket.accel``) before the program runs."""
