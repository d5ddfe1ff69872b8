"""`kdtree serve` on the torch engine (the demo pair) through the real `openai` client:
completions and chat, streamed and not, equal at temperature 0 to `kdtree run --ar` on the
same prompt; stop strings; the events stream and the Prometheus metrics."""

from __future__ import annotations

import json

import httpx
import numpy as np
import openai
import pytest
from conftest import (CHAT_TEMPLATE, PROMPT_DRAWS, code_text_prompts, completion_with_rounds,
                      ended_request_rounds, finished_by_reason, served, wait_idle)
from reference import ar_reference

from python_engine.events import parse


def client(url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def test_completion_equals_ar(demo_server, rng):
    url, serving = demo_server
    prompt = code_text_prompts(rng, 1)[0]
    max_tokens = int(rng.integers(4, 48))
    ids = serving.state.codec.encode(prompt)
    want_text, want_tokens = ar_reference(serving, ids, max_tokens)

    got = client(url).completions.create(model="demo-target", prompt=prompt, max_tokens=max_tokens, temperature=0)
    assert got.choices[0].text == want_text
    assert got.usage.prompt_tokens == len(ids)
    assert got.usage.completion_tokens == len(want_tokens)
    stopped = want_tokens[-1] in serving.state.stop_ids
    assert got.choices[0].finish_reason == ("stop" if stopped else "length")


def test_streamed_completion_equals_ar(demo_server, rng):
    url, serving = demo_server
    prompt = code_text_prompts(rng, 1)[0]
    max_tokens = int(rng.integers(4, 48))
    want_text, want_tokens = ar_reference(serving, serving.state.codec.encode(prompt), max_tokens)

    chunks = list(client(url).completions.create(model="demo-target", prompt=prompt, max_tokens=max_tokens,
                                                 temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == want_text
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert chunks[-1].usage.completion_tokens == len(want_tokens)
    assert not any("\ufffd" in c.choices[0].text for c in chunks)


def test_stream_ends_with_done(demo_server, rng):
    """The raw SSE stream: `data:` chunks, the last one `data: [DONE]`."""
    url, serving = demo_server
    prompt = code_text_prompts(rng, 1)[0]
    body = {"model": "demo-target", "prompt": prompt, "max_tokens": int(rng.integers(2, 20)), "temperature": 0,
            "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        data = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert json.loads(data[-2])["usage"]["completion_tokens"] >= 1


def test_stop_string_across_tokens(demo_server, rng):
    """A stop string taken from inside the reference text (so it spans token boundaries more
    often than not) cuts the text right before its first occurrence; /metrics counts both
    requests' ends, as "stop" (or "length" where the engine reached max_tokens before the
    cancel that the stop string sends), never "abort"."""
    url, serving = demo_server
    wait_idle(serving)
    before = finished_by_reason(httpx.get(f"{url}/metrics").text)
    for prompt in code_text_prompts(rng, PROMPT_DRAWS):
        want_text, _ = ar_reference(serving, serving.state.codec.encode(prompt), 40)
        if len(want_text) >= 8:
            break
    else:
        raise AssertionError(f"{PROMPT_DRAWS} prompts all gave a reference text under 8 characters")
    start = int(rng.integers(1, len(want_text) - 3))
    stop = want_text[start:start + int(rng.integers(2, 4))]
    cut = want_text[: want_text.find(stop)]
    for stream in (False, True):
        out = client(url).completions.create(model="demo-target", prompt=prompt, max_tokens=40, temperature=0,
                                             stop=[stop], stream=stream)
        if stream:
            chunks = list(out)
            text, finish = "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason
        else:
            text, finish = out.choices[0].text, out.choices[0].finish_reason
        assert (text, finish) == (cut, "stop"), f"stop={stop!r}"
    assert wait_idle(serving)["running"] == 0  # the stopped requests left their slots
    after = finished_by_reason(httpx.get(f"{url}/metrics").text)
    ended = {r: n - before.get(r, 0) for r, n in after.items() if n != before.get(r, 0)}
    assert set(ended) <= {"stop", "length"} and sum(ended.values()) == 2, ended


def test_models_and_health(demo_server):
    url, serving = demo_server
    models = client(url).models.list()
    assert [m.id for m in models.data] == ["demo-target"]
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["slots"] == serving.loop.backend.max_slots


def test_chat_without_template_is_400(demo_server):
    url, _ = demo_server
    with pytest.raises(openai.BadRequestError) as err:
        client(url).chat.completions.create(model="demo-target", messages=[{"role": "user", "content": "hi"}])
    assert "chat_template" in str(err.value)


def test_chat_equals_ar_on_the_rendered_template(chat_model_dir, rng):
    """Chat: the messages rendered by the model's template as transformers renders them,
    then decoded as AR decodes those ids."""
    from transformers import PreTrainedTokenizerFast

    oracle = PreTrainedTokenizerFast(tokenizer_file=str(chat_model_dir / "tokenizer.json"),
                                     bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    oracle.chat_template = CHAT_TEMPLATE
    system, user = code_text_prompts(rng, 2)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    ids = oracle.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    max_tokens = int(rng.integers(4, 32))
    with served(model=chat_model_dir, max_slots=2) as (url, serving):
        want_text, want_tokens = ar_reference(serving, list(ids), max_tokens)
        c = client(url)
        got = c.chat.completions.create(model="demo-chat", messages=messages, max_tokens=max_tokens, temperature=0)
        assert got.choices[0].message.content == want_text
        assert got.choices[0].message.role == "assistant"
        assert got.usage.prompt_tokens == len(ids)
        chunks = list(c.chat.completions.create(model="demo-chat", messages=messages, max_tokens=max_tokens,
                                                temperature=0, stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == want_text
        assert chunks[-1].usage.completion_tokens == len(want_tokens)


def test_seeded_sampling_repeats(demo_server, rng):
    """temperature > 0 with a seed: the same text twice; the tokens are the model's own
    (sampling is checked against its distribution in tests/decode)."""
    url, _ = demo_server
    prompt = code_text_prompts(rng, 1)[0]
    seed = int(rng.integers(0, 2**31))
    texts = [client(url).completions.create(model="demo-target", prompt=prompt, max_tokens=24, temperature=0.9,
                                            seed=seed).choices[0].text for _ in range(2)]
    assert texts[0] == texts[1]


def test_events_stream_and_metrics(demo_server, rng):
    """/v1/kdtree/events hands on run_start then the round events of a request and its
    request_end (valid under the events contract); /metrics counts the same rounds."""
    url, serving = demo_server
    wait_idle(serving)  # the rounds that follow are this test's request's only
    before = _drafts(httpx.get(f"{url}/metrics").text)
    events = []
    with httpx.stream("GET", f"{url}/v1/kdtree/events", timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        events.append(parse(first.removeprefix("data: "))[0])
        got = completion_with_rounds(client(url), rng, max_tokens=24)
        for line in lines:
            if line.startswith("data: "):
                event, problems = parse(line.removeprefix("data: "))
                assert not problems
                events.append(event)
                if ended_request_rounds(events):
                    break
    assert events[0]["event"] == "run_start" and events[0]["engine"] == "torch"
    rounds = ended_request_rounds(events)
    assert rounds and rounds[-1]["tokens"] == got.usage.completion_tokens
    end = events[-1]
    assert end["event"] == "request_end" and end["request"] == rounds[-1]["request"]
    assert (end["tokens"], end["reason"]) == (got.usage.completion_tokens, got.choices[0].finish_reason)
    assert 0 < end["ttft_s"] <= end["e2e_s"]
    after = _drafts(httpx.get(f"{url}/metrics").text)
    assert after - before == len(rounds)


def test_a_request_its_prefill_ends_is_counted(demo_server, rng):
    """max_tokens 1: the prefill's token is the answer, so the request makes no round; its
    request_end still reaches the events stream and /metrics counts it as finished."""
    url, serving = demo_server
    wait_idle(serving)
    before = finished_by_reason(httpx.get(f"{url}/metrics").text)
    with httpx.stream("GET", f"{url}/v1/kdtree/events", timeout=60) as r:
        lines = (line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: "))
        assert parse(next(lines))[0]["event"] == "run_start"
        got = client(url).completions.create(model="demo-target", prompt=code_text_prompts(rng, 1)[0], max_tokens=1,
                                             temperature=0)
        events = []
        for line in lines:
            events.append(parse(line)[0])
            if events[-1]["event"] == "request_end":
                break
    assert got.usage.completion_tokens == 1
    assert [e["event"] for e in events] == ["request_end"]
    reason = "stop" if got.choices[0].finish_reason == "stop" else "length"
    assert (events[0]["tokens"], events[0]["reason"]) == (1, reason)
    after = finished_by_reason(httpx.get(f"{url}/metrics").text)
    assert {r: n - before.get(r, 0) for r, n in after.items() if n != before.get(r, 0)} == {reason: 1}


def _drafts(metrics_text: str) -> float:
    for line in metrics_text.splitlines():
        if line.startswith("kdtree_spec_decode_num_drafts_total"):
            return float(line.split()[-1])
    raise AssertionError("no kdtree_spec_decode_num_drafts_total in /metrics")
