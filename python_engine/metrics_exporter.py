"""A Prometheus endpoint for long runs (`kdtree run --prometheus PORT`), fed by the same
metrics events the monitor reads, so both engines export the same figures. Names follow
vLLM's and SGLang's speculative-decoding metrics where one exists (prefix kdtree_):

  kdtree_spec_decode_num_drafts_total              verify steps (vLLM: spec_decode_num_drafts)
  kdtree_spec_decode_num_accepted_tokens_total     accepted drafted tokens (vLLM)
  kdtree_spec_decode_num_accepted_tokens_per_pos_total{position}   accepted at tree depth d (vLLM)
  kdtree_spec_decode_num_drafted_per_pos_total{position}           rounds whose tree reached depth d
  kdtree_spec_accept_length                        histogram of accepted length incl. the bonus
                                                   (SGLang: spec_accept_length, its mean)
  kdtree_generation_tokens_total                   generated tokens (vLLM: generation_tokens)
  kdtree_gen_throughput                            tokens/s over the last few seconds (SGLang)
  kdtree_round_stage_seconds{stage}                draft, tree_build, verify, commit per round
  kdtree_requests_finished_total{reason}           requests ended: stop, length, abort, error
                                                   (vLLM: request_success{finished_reason})
  kdtree_time_to_first_token_seconds               histogram, where the writer knows it (vLLM)
  kdtree_e2e_request_latency_seconds               histogram, arrival to end (vLLM)

`kdtree serve` keeps the same metrics without a port of their own (port None) and answers
them at its `GET /metrics`.
"""

from __future__ import annotations

import collections
import time

from python_engine.errors import KdtreeError

THROUGHPUT_WINDOW_S = 5.0
ACCEPT_LENGTH_BUCKETS = tuple(range(1, 34))  # 1 .. block size 33
# Requests whose token count is remembered (to count what each round adds): a server's request
# can end without a final round (a client that hung up), so the oldest are forgotten past this,
# far above what runs at once (KD_MAX_BATCH slots and a bounded queue).
TRACKED_REQUESTS_MAX = 4096
STAGE_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
# a request's time to first token and end to end: milliseconds (a short prompt on an idle
# server) to minutes (a long generation behind a full queue)
LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0, 120.0, 300.0)


class PrometheusExporter:
    def __init__(self, port: int | None, addr: str = "0.0.0.0"):
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
        except ImportError as exc:
            raise KdtreeError(f"--prometheus needs the prometheus-client package: {exc}") from None
        if port is not None and not 0 < port < 65536:
            raise KdtreeError(f"--prometheus {port}: a TCP port is 1..65535")
        self.registry = r = CollectorRegistry()
        self.drafts = Counter("kdtree_spec_decode_num_drafts", "Verify steps (target forwards of a tree)", registry=r)
        self.accepted = Counter("kdtree_spec_decode_num_accepted_tokens", "Accepted drafted tokens", registry=r)
        self.accepted_pos = Counter("kdtree_spec_decode_num_accepted_tokens_per_pos",
                                    "Accepted drafted tokens by tree depth", ["position"], registry=r)
        self.drafted_pos = Counter("kdtree_spec_decode_num_drafted_per_pos",
                                   "Rounds whose tree reached this depth", ["position"], registry=r)
        self.accept_length = Histogram("kdtree_spec_accept_length", "Accepted length per round, bonus included",
                                       buckets=ACCEPT_LENGTH_BUCKETS, registry=r)
        self.tokens = Counter("kdtree_generation_tokens", "Generated tokens", registry=r)
        self.throughput = Gauge("kdtree_gen_throughput", "Generated tokens per second, last few seconds", registry=r)
        self.stage = Histogram("kdtree_round_stage_seconds", "Time of a round's stage", ["stage"],
                               buckets=STAGE_BUCKETS, registry=r)
        self.finished = Counter("kdtree_requests_finished", "Requests ended, by why", ["reason"], registry=r)
        self.ttft = Histogram("kdtree_time_to_first_token_seconds", "Request arrival to its first token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("kdtree_e2e_request_latency_seconds", "Request arrival to its end",
                             buckets=LATENCY_BUCKETS, registry=r)
        self._last_tokens: collections.OrderedDict = collections.OrderedDict()
        self._recent: collections.deque = collections.deque()
        self.server = self.thread = None
        if port is None:
            return
        try:
            self.server, self.thread = start_http_server(port, addr=addr, registry=r)
        except OSError as exc:
            raise KdtreeError(f"--prometheus {port}: cannot listen: {exc.strerror or exc}") from None

    def observe(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "round":
            self._round(event)
        elif kind == "request_end":
            self.finished.labels(reason=str(event["reason"])).inc()
            for key, histogram in (("ttft_s", self.ttft), ("e2e_s", self.e2e)):
                if event.get(key) is not None:
                    histogram.observe(float(event[key]))
            self._last_tokens.pop(event.get("request"), None)

    def _round(self, e: dict) -> None:
        accept, depth = int(e["accept_len"]), int(e.get("tree_depth", 0))
        self.drafts.inc()
        self.accepted.inc(accept - 1)
        self.accept_length.observe(accept)
        for d in range(1, depth + 1):
            self.drafted_pos.labels(position=str(d)).inc()
            if accept - 1 >= d:
                self.accepted_pos.labels(position=str(d)).inc()
        for stage, us in e.get("times_us", {}).items():
            if us is not None:  # null: a rank share's collectives, not run
                self.stage.labels(stage=stage).observe(float(us) / 1e6)
        key = e.get("request")
        grown = int(e["tokens"]) - self._last_tokens.get(key, int(e["tokens"]) - accept)
        self._last_tokens[key] = int(e["tokens"])
        self._last_tokens.move_to_end(key)
        if len(self._last_tokens) > TRACKED_REQUESTS_MAX:
            self._last_tokens.popitem(last=False)
        self.tokens.inc(max(grown, 0))
        now = time.monotonic()
        self._recent.append((now, max(grown, 0)))
        while self._recent and now - self._recent[0][0] > THROUGHPUT_WINDOW_S:
            self._recent.popleft()
        span = now - self._recent[0][0] if len(self._recent) > 1 else 0.0
        if span > 0:
            self.throughput.set(sum(n for _, n in self._recent) / span)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
