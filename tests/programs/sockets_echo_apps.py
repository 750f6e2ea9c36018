"""Unmodified socket programs for ``softrdma run --sockets`` (nothing
here knows about rsockets):

    sockets_echo_apps.py socketserver-server PORT    a socketserver echo, one connection
    sockets_echo_apps.py socketserver-client PORT    send 1 MB, read it back, print its sha256
    sockets_echo_apps.py asyncio-server PORT         an asyncio stream echo, one connection
    sockets_echo_apps.py asyncio-client PORT         as socketserver-client, with asyncio streams
    sockets_echo_apps.py urllib URL                  fetch URL, print the body's sha256

Servers print "listening" once they listen.
"""

import asyncio
import hashlib
import random
import socket
import socketserver
import sys
import urllib.request

DATA = random.Random(7).randbytes(1 << 20)


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            b = self.request.recv(65536)
            if not b:
                return
            self.request.sendall(b)


def socketserver_server(port):
    with socketserver.TCPServer(("127.0.0.1", port), Echo) as srv:
        print("listening", flush=True)
        srv.handle_request()


def socketserver_client(port):
    s = socket.create_connection(("127.0.0.1", port))
    got = bytearray()
    for i in range(0, len(DATA), 65536):
        s.sendall(DATA[i:i + 65536])
        while len(got) < i + 65536:
            got += s.recv(1 << 20)
    s.shutdown(socket.SHUT_WR)
    assert s.recv(10) == b""
    s.close()
    print(hashlib.sha256(got).hexdigest())


async def asyncio_server(port):
    done = asyncio.Event()

    async def handle(r, w):
        while b := await r.read(65536):
            w.write(b)
            await w.drain()
        w.close()
        done.set()

    srv = await asyncio.start_server(handle, "127.0.0.1", port)
    print("listening", flush=True)
    await done.wait()
    srv.close()


async def asyncio_client(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(DATA)
    await w.drain()
    got = await r.readexactly(len(DATA))
    w.close()
    print(hashlib.sha256(got).hexdigest())


if __name__ == "__main__":
    mode, arg = sys.argv[1], sys.argv[2]
    if mode == "urllib":
        print(hashlib.sha256(urllib.request.urlopen(arg, timeout=60).read()).hexdigest())
    elif mode.startswith("asyncio"):
        asyncio.run({"asyncio-server": asyncio_server, "asyncio-client": asyncio_client}[mode](int(arg)))
    else:
        {"socketserver-server": socketserver_server, "socketserver-client": socketserver_client}[mode](int(arg))
