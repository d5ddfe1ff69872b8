"""A ProxyCommand for the tests (no netcat needed): relay stdin/stdout to HOST:PORT.

    python tcp_relay.py HOST PORT
"""

import os
import selectors
import socket
import sys


def main(host: str, port: int) -> None:
    sock = socket.create_connection((host, port))
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.buffer.raw, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is sock:
                data = sock.recv(65536)
                if not data:
                    return
                os.write(1, data)
            else:
                data = os.read(0, 65536)
                if not data:
                    sock.shutdown(socket.SHUT_WR)
                    sel.unregister(key.fileobj)
                    continue
                sock.sendall(data)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
