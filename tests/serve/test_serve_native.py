"""`kdtree serve --engine native` on the emulated native engine (the engine's own sources
on the CPU, lib/libkdtree_engine_emu.so): completions, streamed and not, equal at
temperature 0 to the torch engine's AR decoding (`kdtree run --ar`) of the same prompt.
Skipped where the emulated engine is not built (`kdtree build engine_emu`)."""

from __future__ import annotations

import openai
import pytest
from conftest import code_text_prompts, served, wait_idle

from python_engine.decode.ar import ar_generate
from python_engine.demo.defaults import DEFAULT_TARGET
from python_engine.native import library as L

# the emulator runs a demo-sized forward in about a second: few slots, few tokens
EMU_SLOTS = 2
EMU_CONTEXT = 192


@pytest.fixture(scope="module")
def emu_server():
    if not L.library_path("emu").is_file():
        pytest.skip(f"{L.library_path('emu')} is not built: run `kdtree build engine_emu`")
    with served(engine="native", native_variant="emu", dtype="float32", max_slots=EMU_SLOTS,
                max_model_len=EMU_CONTEXT) as (url, serving):
        yield url, serving


@pytest.fixture(scope="module")
def torch_target():
    import torch

    from python_engine.model.target_loader import load_target

    return load_target(DEFAULT_TARGET, "cpu", torch.float32)


def _torch_ar_text(serving, target, prompt: str, max_tokens: int) -> tuple[str, int]:
    ids = serving.state.codec.encode(prompt)
    tokens = ar_generate(target, ids, max_tokens, temperature=0.0, stop_ids=serving.state.stop_ids).tokens
    shown = tokens[:-1] if tokens and tokens[-1] in serving.state.stop_ids else tokens
    return serving.state.tokenizer.decode(shown), len(tokens)


def test_native_completion_equals_torch_ar(emu_server, torch_target, rng):
    url, serving = emu_server
    assert serving.loop.backend.engine == "native"
    c = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
    prompts = code_text_prompts(rng, 2, max_lines=1)
    max_tokens = int(rng.integers(3, 9))
    want = [_torch_ar_text(serving, torch_target, p, max_tokens) for p in prompts]

    got = c.completions.create(model="demo-target", prompt=prompts[0], max_tokens=max_tokens, temperature=0)
    assert (got.choices[0].text, got.usage.completion_tokens) == want[0]

    chunks = list(c.completions.create(model="demo-target", prompt=prompts[1], max_tokens=max_tokens,
                                       temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == want[1][0]
    assert chunks[-1].usage.completion_tokens == want[1][1]
    assert wait_idle(serving)["running"] == 0


def test_native_batch_with_a_disconnect_frees_its_slot(emu_server, torch_target, rng):
    """Both slots at once: one client hangs up after its first chunk (its request is
    cancelled and released in the engine), the other's text is still AR's."""
    import threading

    url, serving = emu_server
    prompts = code_text_prompts(rng, 2, max_lines=1)
    keep_tokens = int(rng.integers(3, 7))
    want = _torch_ar_text(serving, torch_target, prompts[0], keep_tokens)
    got: dict[str, str] = {}

    def stream(prompt: str, max_tokens: int, hang_up: bool) -> None:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        s = c.completions.create(model="demo-target", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                 stream=True)
        parts = []
        for chunk in s:
            parts.append(chunk.choices[0].text)
            if hang_up:
                s.close()
                return
        got["kept"] = "".join(parts)

    threads = [threading.Thread(target=stream, args=(prompts[0], keep_tokens, False)),
               threading.Thread(target=stream, args=(prompts[1], EMU_CONTEXT // 2, True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert got["kept"] == want[0]
    counts = wait_idle(serving, timeout_s=120)
    assert counts["running"] == 0 and counts["waiting"] == 0, counts
