"""A TCP proxy in front of the test sshd that the fault tests control: `cut()` resets every
connection through it at once (as a dropped link would), and `limit` cuts a connection
once that many bytes have gone from client to server."""

from __future__ import annotations

import socket
import struct
import threading


def _reset(sock: socket.socket) -> None:
    """Abort a connection: RST, not a polite FIN. SO_LINGER 0 makes close() send RST;
    shutdown(SHUT_RD) first wakes the pipe thread blocked in recv() on it (a close()
    alone would wait for that recv, and the peer would notice nothing)."""
    for action in (
        lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)),
        lambda: sock.shutdown(socket.SHUT_RD),
        sock.close,
    ):
        try:
            action()
        except OSError:
            pass


class CuttableProxy:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self.limit: int | None = None
        self.bytes_up = 0  # client -> server bytes of the latest connection
        self.cuts = 0
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._live: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def cut(self) -> None:
        with self._lock:
            live, self._live = self._live, []
            self.cuts += 1
        for s in live:
            _reset(s)

    def close(self) -> None:
        self._closed = True
        self.cut()
        _reset(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._live += [client, upstream]
                self.bytes_up = 0
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if upstream:
                with self._lock:
                    allowed = len(data) if self.limit is None else max(0, self.limit - self.bytes_up)
                    self.bytes_up += len(data)
                if allowed < len(data):
                    try:
                        dst.sendall(data[:allowed])
                    except OSError:
                        pass
                    self.cut()
                    return
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
