"""Fixtures for the server tests: a `kdtree serve` app on a free 127.0.0.1 port, run by
uvicorn in a thread of this process (the SIGTERM test starts a real `kdtree serve`
process instead), and prompts the demo pair knows how to continue."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from torch_threads import single_thread  # noqa: F401 (autouse fixture for this folder)

from python_engine.demo.code_prompts import code_texts
from python_engine.demo.defaults import DEFAULT_TARGET, MODELS_DIR
from python_engine.serve.server import ServeOptions, Serving

DEMO_DRAFTER = MODELS_DIR / "demo-drafter"
START_TIMEOUT_S = 60.0
# a chat template in the style of ChatML, with the model's BOS first: what the chat tests
# give a copy of the demo model (the shipped one has none)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(**overrides):
    """A server on a free loopback port; yields (base URL, the Serving)."""
    opts = ServeOptions(model=DEFAULT_TARGET, drafter=DEMO_DRAFTER, port=free_port(), drain_s=5.0)
    for k, v in overrides.items():
        setattr(opts, k, v)
    serving = Serving(opts)
    server = serving.uvicorn_server()
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{opts.port}", serving
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def demo_server():
    """The demo pair served with the defaults (DDTree, 16 slots)."""
    with served() as (url, serving):
        yield url, serving


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory) -> Path:
    """A copy of the demo target whose tokenizer_config.json has a chat template."""
    import json

    dst = tmp_path_factory.mktemp("chat-model") / "demo-chat"
    shutil.copytree(DEFAULT_TARGET, dst)
    cfg_path = dst / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return dst


def code_text_prompts(rng: np.random.Generator, count: int, max_lines: int = 3) -> list[str]:
    """`count` runs of 1..max_lines lines of Python the demo pair continues well."""
    return code_texts(count, rng, max_lines)


PROMPT_DRAWS = 20  # prompts drawn before a test gives up finding one that makes a round


def completion_with_rounds(openai_client, rng: np.random.Generator, **create):
    """A greedy completion of the first drawn prompt that makes at least one DDTree round. A
    prompt whose prefill already yields the end of text makes none (so no round event to
    follow); a round adds at least one token, so one completion token means no round ran."""
    for _ in range(PROMPT_DRAWS):
        done = openai_client.completions.create(model="demo-target", prompt=code_text_prompts(rng, 1)[0],
                                                temperature=0, **create)
        if done.usage.completion_tokens > 1:
            return done
    raise AssertionError(f"{PROMPT_DRAWS} prompts all ended at the prefill")


def ended_request_rounds(events: list[dict]) -> list[dict] | None:
    """The rounds of the first request in `events` that made rounds and then ended (its
    `request_end` seen); None while there is none. The requests before it that
    completion_with_rounds drew and their prefill ended have a request_end and no round."""
    with_rounds = {e["request"] for e in events if e["event"] == "round"}
    end = next((e for e in events if e["event"] == "request_end" and e["request"] in with_rounds), None)
    return None if end is None else [e for e in events if e["event"] == "round" and e["request"] == end["request"]]


def finished_by_reason(metrics_text: str) -> dict[str, float]:
    """/metrics' kdtree_requests_finished_total by its reason label."""
    out = {}
    for line in metrics_text.splitlines():
        if line.startswith('kdtree_requests_finished_total{reason="'):
            out[line.split('"')[1]] = float(line.split()[-1])
    return out


def wait_idle(serving: Serving, timeout_s: float = 30.0) -> dict:
    """Wait until no request runs or waits; the loop's counts then."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = serving.loop.counts()
        if counts["running"] == 0 and counts["waiting"] == 0:
            return counts
        if time.monotonic() > deadline:
            return counts
        time.sleep(0.05)
