"""What a server must survive: many streams whose clients vanish, bad requests, no key,
a full queue, SIGTERM under load. Each ends with the server serving correctly and every
slot free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from conftest import DEMO_DRAFTER, code_text_prompts, finished_by_reason, free_port, served, wait_idle
from reference import ar_reference

from python_engine.demo.defaults import DEFAULT_TARGET
from python_engine.project import PROJECT_ROOT
from python_engine.serve import READY_PREFIX

LONG = 400  # max_tokens that would keep a slot busy for seconds if a cancel were lost


def client(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def test_concurrent_streams_with_disconnects_free_every_slot(demo_server, rng):
    """16 streams at once; a random half of them hang up after a few chunks. The others
    get the AR text; afterwards no request runs or waits, the server still answers, and
    /metrics counted each request's end once (those hung up on as abort, unless they ended first)."""
    url, serving = demo_server
    wait_idle(serving)
    before = finished_by_reason(httpx.get(f"{url}/metrics").text)
    prompts = code_text_prompts(rng, 16)
    quits = set(rng.choice(16, size=8, replace=False).tolist())
    after = {i: int(rng.integers(1, 4)) for i in quits}
    max_tokens = {i: (LONG if i in quits else int(rng.integers(8, 32))) for i in range(16)}
    texts: dict[int, str] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            stream = client(url).completions.create(model="demo-target", prompt=prompts[i],
                                                    max_tokens=max_tokens[i], temperature=0, stream=True)
            parts = []
            for n, chunk in enumerate(stream):
                parts.append(chunk.choices[0].text)
                if i in quits and n + 1 >= after[i]:
                    stream.close()  # the client hangs up mid-stream
                    return
            texts[i] = "".join(parts)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    counts = wait_idle(serving, timeout_s=30)
    assert counts["running"] == 0 and counts["waiting"] == 0, counts
    for i in sorted(set(range(16)) - quits):
        assert texts[i] == ar_reference(serving, serving.state.codec.encode(prompts[i]), max_tokens[i])[0]
    again = client(url).completions.create(model="demo-target", prompt=prompts[0], max_tokens=8, temperature=0)
    assert again.choices[0].text == ar_reference(serving, serving.state.codec.encode(prompts[0]), 8)[0]
    after = finished_by_reason(httpx.get(f"{url}/metrics").text)
    ended = {r: after.get(r, 0) - before.get(r, 0) for r in after}
    assert sum(ended.values()) == 17 and ended.get("abort", 0) <= len(quits) and not ended.get("error"), ended


BAD_REQUESTS = [
    # (path, raw body or JSON object, expected status)
    ("/v1/completions", b"{not json", 400),
    ("/v1/completions", b"[1, 2, 3]", 400),
    ("/v1/completions", b"", 400),
    ("/v1/completions", {"model": "demo-target"}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "max_tokens": "10"}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "max_tokens": 2.5}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "max_tokens": 0}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "max_tokens": 10**9}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "temperature": "hot"}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "temperature": -1}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "stream": "yes"}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": 5}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": []}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": ["a", "b"]}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": [1, -4, 99999999]}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "n": 2}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "logprobs": 3}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "best_of": 3}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "echo": True}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "top_p": 0.5}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "presence_penalty": 1.0}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "no_such_param": 1}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "stop": [1, 2]}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "seed": 2**64}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "seed": -1}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "temperature": 2.5}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": "x", "max_tokens": True}, 400),
    ("/v1/completions", {"model": "demo-target", "prompt": ""}, 400),
    ("/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404),
    ("/v1/completions", {"model": "demo-target", "prompt": "x" * 20000}, 400),
    ("/v1/chat/completions", {"model": "demo-target", "messages": []}, 400),
    ("/v1/chat/completions", {"model": "demo-target", "messages": [{"role": "wizard", "content": "x"}]}, 400),
    ("/v1/chat/completions", {"model": "demo-target", "messages": "hello"}, 400),
    ("/v1/chat/completions", {"model": "demo-target", "messages": [{"role": "user", "content": "x"}],
                              "tools": [{"type": "function"}]}, 400),
    ("/v1/chat/completions", {"model": "demo-target", "messages": [{"role": "user", "content": "x"}]}, 400),
    ("/v1/nothing-here", {"model": "demo-target"}, 404),
]


def test_bad_requests_get_4xx_and_the_server_keeps_serving(demo_server, rng):
    url, serving = demo_server
    order = rng.permutation(len(BAD_REQUESTS))
    with httpx.Client(base_url=url, timeout=60) as http:
        for k in order:
            path, body, status = BAD_REQUESTS[k]
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            r = http.post(path, content=raw, headers={"content-type": "application/json"})
            assert r.status_code == status, (path, body, r.text)
            if path.startswith("/v1/c"):
                error = r.json()["error"]
                assert isinstance(error["message"], str) and error["message"]
                assert set(error) == {"message", "type", "param", "code"}
        assert http.get("/v1/completions").status_code == 405
    assert wait_idle(serving)["running"] == 0
    prompt = code_text_prompts(rng, 1)[0]
    got = client(url).completions.create(model="demo-target", prompt=prompt, max_tokens=8, temperature=0)
    assert got.choices[0].text == ar_reference(serving, serving.state.codec.encode(prompt), 8)[0]


def test_api_key(rng):
    key = f"sk-{rng.integers(0, 2**62):x}"
    with served(api_key=key, max_slots=1) as (url, _):
        with pytest.raises(openai.AuthenticationError):
            client(url, key=key + "x").models.list()
        r = httpx.get(f"{url}/v1/models")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        for path in ("/metrics", "/v1/kdtree/events"):
            assert httpx.get(f"{url}{path}").status_code == 401
        assert httpx.post(f"{url}/v1/completions", json={"model": "demo-target", "prompt": "x"}).status_code == 401
        assert httpx.get(f"{url}/health").status_code == 200
        assert [m.id for m in client(url, key=key).models.list().data] == ["demo-target"]
        got = client(url, key=key).completions.create(model="demo-target", prompt="def f(x):\n", max_tokens=4)
        assert got.usage.completion_tokens >= 1


def test_full_queue_answers_429(rng):
    """One slot, a queue of one: with one request running and one waiting, the next is
    refused with Retry-After; the first two finish. (The model's EOS is ignored so that the
    running request cannot end before the third arrives.)"""
    prompts = code_text_prompts(rng, 3)
    with served(max_slots=1, max_queue=1, ignore_eos=True) as (url, serving):
        results: dict[int, httpx.Response] = {}

        def post(i: int) -> None:
            results[i] = httpx.post(f"{url}/v1/completions", timeout=120, json={
                "model": "demo-target", "prompt": prompts[i], "max_tokens": LONG, "temperature": 0})

        def until(what: str, n: int) -> None:
            deadline = time.monotonic() + 30
            while serving.loop.counts()[what] < n:
                assert time.monotonic() < deadline, serving.loop.counts()
                time.sleep(0.01)

        first = [threading.Thread(target=post, args=(i,)) for i in (0, 1)]
        first[0].start()
        until("running", 1)
        first[1].start()
        until("waiting", 1)
        post(2)
        for t in first:
            t.join(timeout=120)
        assert results[2].status_code == 429
        assert int(results[2].headers["retry-after"]) >= 1
        assert results[2].json()["error"]["type"] == "rate_limit_error"
        assert results[0].status_code == results[1].status_code == 200
        assert results[0].json()["usage"]["completion_tokens"] == LONG
        assert wait_idle(serving)["running"] == 0


def test_sigterm_under_load_drains_and_exits_0(tmp_path, rng):
    """A real `kdtree serve` process: SIGTERM while streams run; they finish (the drain),
    a new request is refused, and the process exits with status 0."""
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kdtree_cli", "serve", "--model", str(DEFAULT_TARGET), "--drafter", str(DEMO_DRAFTER),
         "--port", str(port), "--drain-s", "60"],
        cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        assert f"{READY_PREFIX} {url}" in (tmp_path / "serve.log").read_text()  # what --host waits for
        prompts = code_text_prompts(rng, 4)
        finishes: dict[int, str | None] = {}
        started = threading.Barrier(5)

        def one(i: int) -> None:
            stream = client(url).completions.create(model="demo-target", prompt=prompts[i], max_tokens=96,
                                                    temperature=0, stream=True)
            last = None
            for n, chunk in enumerate(stream):
                if n == 0:
                    started.wait(timeout=60)
                last = chunk
            finishes[i] = last.choices[0].finish_reason if last else None

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        started.wait(timeout=60)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        try:
            refused = httpx.post(f"{url}/v1/completions", json={"model": "demo-target", "prompt": "x"}, timeout=5)
            assert refused.status_code == 503
        except httpx.TransportError:
            pass  # the listening socket is already closed: refused as well
        for t in threads:
            t.join(timeout=120)
        assert proc.wait(timeout=120) == 0, (tmp_path / "serve.log").read_text()
        assert sorted(finishes) == [0, 1, 2, 3]
        assert all(f in ("stop", "length") for f in finishes.values()), finishes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def _start_serve(tmp_path, extra: list[str], env: dict) -> tuple[subprocess.Popen, str, Path]:
    """`kdtree serve` (AR on the demo target) in a process; returns once it listens."""
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kdtree_cli", "serve", "--model", str(DEFAULT_TARGET), "--ar", "--port", str(port),
             *extra], cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
    deadline = time.monotonic() + 120
    while READY_PREFIX not in log_path.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}", log_path


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_binding_beyond_loopback_warns_without_a_key(tmp_path, rng):
    """All interfaces and no key: a warning. The same with KDTREE_API_KEY set: no warning,
    and the key from the environment is required."""
    proc, url, log = _start_serve(tmp_path, ["--bind", "0.0.0.0"], {"KDTREE_API_KEY": ""})
    try:
        assert "warning: serving on 0.0.0.0 without an API key" in log.read_text()
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 200
    finally:
        assert _stop(proc) == 0
    key = f"k{rng.integers(0, 2**40):x}"
    proc, url, log = _start_serve(tmp_path, ["--bind", "0.0.0.0"], {"KDTREE_API_KEY": key})
    try:
        assert "warning" not in log.read_text()
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
        ok = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert ok.status_code == 200
    finally:
        assert _stop(proc) == 0


def test_a_body_over_the_limit_gets_413_declared_or_streamed(demo_server, rng):
    """Refused by its Content-Length, and sent in chunks with no length, both in OpenAI's shape;
    a request just under the limit is read (and answered for what it is)."""
    from python_engine.serve.body_limit import MAX_BODY_BYTES

    url, serving = demo_server
    pad = "x" * (MAX_BODY_BYTES + int(rng.integers(1, 4096)))
    body = json.dumps({"model": "demo-target", "prompt": pad, "max_tokens": 1}).encode()

    def chunks():
        for at in range(0, len(body), 1 << 20):
            yield body[at:at + (1 << 20)]

    with httpx.Client(base_url=url, timeout=120) as http:
        for content in (body, chunks()):
            r = http.post("/v1/completions", content=content, headers={"content-type": "application/json"})
            assert r.status_code == 413, r.text[:200]
            assert r.json()["error"]["code"] == "body_too_large"
        under = json.dumps({"model": "demo-target", "prompt": "def", "max_tokens": 1,
                            "user": "u" * (MAX_BODY_BYTES // 2)}).encode()
        assert http.post("/v1/completions", content=under,
                         headers={"content-type": "application/json"}).status_code in (200, 400)
    assert wait_idle(serving)["running"] == 0
