"""`kdtree bench serve`'s load generator: streamed /v1/completions requests at a fixed
concurrency, timed per chunk, with the figures `vllm bench serve` reports (request and
output-token throughput, TTFT, TPOT, ITL, E2EL: mean, median, p99) and the speculative
decoding figures read from the server's /metrics before and after (acceptance length =
1 + accepted / drafts, as vLLM computes it; per-position acceptance rates).

A small async client on httpx rather than guidellm: guidellm would pull in pandas, pyarrow,
datasets, sanic and uvloop (about thirty packages) for what is here a few dozen lines, and
it reports no acceptance length; `vllm bench serve` needs vLLM itself. The definitions
follow vLLM's benchmark_serving: TTFT is the first chunk with text, TPOT is
(E2EL - TTFT) / (output tokens - 1), ITL the gaps between chunks (a DDTree round can
bring several tokens in one chunk, as speculative decoding does in vLLM)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx
import numpy as np

REQUEST_TIMEOUT_S = 600.0
PEAK_WINDOW_S = 1.0  # output tokens/s peak: the best window of this length


@dataclass
class RequestRecord:
    ok: bool
    prompt: int = -1              # index into the prompt list
    output_tokens: int = 0
    ttft_s: float = 0.0
    e2el_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    start_s: float = 0.0          # since the level began
    chunk_times_s: list[float] = field(default_factory=list)  # since the level began
    error: str = ""


@dataclass
class SpecCounters:
    drafts: float = 0.0
    accepted: float = 0.0
    per_pos: dict[str, float] = field(default_factory=dict)

    def minus(self, before: "SpecCounters") -> "SpecCounters":
        return SpecCounters(self.drafts - before.drafts, self.accepted - before.accepted,
                            {k: v - before.per_pos.get(k, 0.0) for k, v in self.per_pos.items()})


def parse_spec_metrics(text: str) -> SpecCounters:
    """The server's spec-decode counters from its Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    c = SpecCounters()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kdtree_spec_decode_num_drafts_total":
                c.drafts = s.value
            elif s.name == "kdtree_spec_decode_num_accepted_tokens_total":
                c.accepted = s.value
            elif s.name == "kdtree_spec_decode_num_accepted_tokens_per_pos_total":
                c.per_pos[s.labels["position"]] = s.value
    return c


def stats(values: list[float], scale: float = 1000.0) -> dict:
    """mean, median, p99 (in ms by default)."""
    if not values:
        return {"mean": None, "median": None, "p99": None}
    a = np.asarray(values, dtype=float) * scale
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p99": float(np.percentile(a, 99))}


async def one_request(http: httpx.AsyncClient, model: str, prompt, max_tokens: int, t0: float,
                      index: int) -> RequestRecord:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    start = time.perf_counter()
    rec = RequestRecord(ok=False, prompt=index, start_s=start - t0)
    last = start
    try:
        async with http.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                rec.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return rec
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    rec.error = chunk["error"].get("message", "error")
                    return rec
                now = time.perf_counter()
                if chunk.get("usage"):
                    rec.output_tokens = int(chunk["usage"]["completion_tokens"])
                if chunk["choices"] and chunk["choices"][0].get("text"):
                    if not rec.chunk_times_s:
                        rec.ttft_s = now - start
                    else:
                        rec.itl_s.append(now - last)
                    rec.chunk_times_s.append(now - t0)
                    last = now
        rec.e2el_s = time.perf_counter() - start
        rec.ok = rec.output_tokens > 0
        if not rec.ok:
            rec.error = "no usage in the stream"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    return rec


async def run_level(url: str, model: str, prompts: list, concurrency: int, requests: int, max_tokens: int,
                    api_key: str | None) -> dict:
    """`requests` requests, at most `concurrency` at once, prompts in turn."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S, limits=limits) as http:
        before = parse_spec_metrics((await http.get("/metrics")).text)
        gate = asyncio.Semaphore(concurrency)
        t0 = time.perf_counter()

        async def gated(i: int) -> RequestRecord:
            async with gate:
                return await one_request(http, model, prompts[i % len(prompts)], max_tokens, t0, i % len(prompts))

        records = await asyncio.gather(*(gated(i) for i in range(requests)))
        duration = time.perf_counter() - t0
        spec = parse_spec_metrics((await http.get("/metrics")).text).minus(before)
    return summarize(records, duration, concurrency, spec)


def summarize(records: list[RequestRecord], duration: float, concurrency: int, spec: SpecCounters) -> dict:
    ok = [r for r in records if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    tpot = [(r.e2el_s - r.ttft_s) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    itl = [x for r in ok for x in r.itl_s]
    peak = 0.0
    stamps = sorted(t for r in ok for t in r.chunk_times_s)
    if stamps and duration > 0:
        # tokens land with chunks; spread each request's tokens over its chunks evenly
        per_chunk = sorted((t, r.output_tokens / len(r.chunk_times_s)) for r in ok for t in r.chunk_times_s)
        times = np.array([t for t, _ in per_chunk])
        weights = np.cumsum([w for _, w in per_chunk])
        for i, t in enumerate(times):
            j = np.searchsorted(times, t + PEAK_WINDOW_S, side="left") - 1
            got = weights[j] - (weights[i - 1] if i else 0.0)
            peak = max(peak, got / PEAK_WINDOW_S)
    accept_len = 1.0 + spec.accepted / spec.drafts if spec.drafts else None
    per_pos = {k: v / spec.drafts for k, v in sorted(spec.per_pos.items(), key=lambda kv: int(kv[0]))} \
        if spec.drafts else {}
    return {
        "concurrency": concurrency,
        "requests": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "errors": sorted({r.error for r in records if not r.ok})[:5],
        "duration_s": duration,
        "output_tokens": tokens,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "output_throughput": tokens / duration if duration else 0.0,
        "peak_output_throughput": peak,
        "ttft_ms": stats([r.ttft_s for r in ok]),
        "tpot_ms": stats(tpot),
        "itl_ms": stats(itl),
        "e2el_ms": stats([r.e2el_s for r in ok]),
        "spec_decode": {"drafts": spec.drafts, "accepted_tokens": spec.accepted, "acceptance_length": accept_len,
                        "acceptance_rate_per_position": per_pos},
    }
