"""Follow a running `kdtree serve`: its GET /v1/kdtree/events stream (server-sent events,
one metrics event per `data:` line, run_start first) read with httpx. The server runs for
as long as it likes, so a dropped stream (a restart, a network blip) is retried with
backoff; each new connection starts fresh figures, as the server sends its run_start again."""

from __future__ import annotations

import threading

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.backoff import Backoff
from kdtree_cli.tui.sources.base import EventSource

CONNECT_TIMEOUT_S = 5.0
EVENTS_PATH = "/v1/kdtree/events"
SSE_DATA = "data: "


class ServerSource(EventSource):
    kind = "url"

    def __init__(self, url: str, api_key: str | None = None, *, backoff: Backoff | None = None, **kw):
        super().__init__(**kw)
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.backoff = backoff or Backoff(jitter=0.1)
        self._response = None
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"server {self.url}"

    def produce(self) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=None)
        first = True
        while not self.stopping:
            self.status(SourceState.STARTING if first else SourceState.RECONNECTING, f"connecting to {self.url}")
            reason = "the server closed the events stream"
            try:
                with httpx.Client(headers=headers, timeout=timeout) as http, \
                        http.stream("GET", self.url + EVENTS_PATH) as response:
                    if response.status_code == 401:
                        self.status(SourceState.FAILED, f"{self.url} wants an API key: pass --api-key (or set "
                                                        "KDTREE_API_KEY)")
                        return
                    if response.status_code != 200:
                        self.status(SourceState.FAILED, f"{self.url}{EVENTS_PATH} answered "
                                                        f"{response.status_code}: is this a kdtree serve?")
                        return
                    with self._lock:
                        self._response = response
                    if not first:
                        self.restart(f"reconnected to {self.url}")
                    first = False
                    self.status(SourceState.STREAMING, f"following {self.url}")
                    for line in response.iter_lines():
                        if self.stopping:
                            return
                        if line.startswith(SSE_DATA):
                            self.backoff.reset()
                            self.emit(line[len(SSE_DATA):])
            except httpx.HTTPError as exc:
                reason = f"cannot reach {self.url} ({type(exc).__name__})"
            finally:
                with self._lock:
                    self._response = None
            if self.stopping:
                return
            delay = self.backoff.next_delay()
            self.status(SourceState.RECONNECTING, f"{reason}; retrying in {delay:.1f} s")
            self.wait(delay)

    def close(self) -> None:
        with self._lock:
            if self._response is not None:
                self._response.close()  # wakes the reader blocked on the stream
