"""The server's text pieces against their oracles: streamed detokenisation (never a split
character, the same text as decoding all the tokens at once), stop strings across
token boundaries (str.find on the whole text), and chat templates (transformers'
apply_chat_template)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from python_engine.demo.defaults import DEFAULT_TARGET
from python_engine.serve.chat_template import ChatTemplate, ChatTemplateError
from python_engine.serve.text_stream import TextStream

# characters of 1 to 4 UTF-8 bytes: the demo's byte-level tokenizer splits the long ones
# over several tokens
ALPHABET = list("ab c\n") + list("éöñ") + list("✓€→") + list("日本語") + ["😀", "🐍", "𝔸"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(DEFAULT_TARGET / "tokenizer.json"))


def _random_text(rng, n: int) -> str:
    return "".join(rng.choice(ALPHABET, size=n).tolist())


def _feed_in_pieces(stream: TextStream, ids: list[int], rng) -> list[str]:
    out, i = [], 0
    while i < len(ids):
        k = int(rng.integers(1, 4))  # a round emits 1..3 tokens here
        out.append(stream.feed(ids[i:i + k]))
        i += k
    out.append(stream.finish())
    return out


def test_streamed_text_never_splits_a_character(tokenizer, rng):
    for _ in range(20):
        text = _random_text(rng, int(rng.integers(1, 40)))
        ids = tokenizer.encode(text).ids
        pieces = _feed_in_pieces(TextStream(tokenizer), ids, rng)
        assert "".join(pieces) == tokenizer.decode(ids)
        assert not any("\ufffd" in p for p in pieces)


def test_stop_strings_match_across_tokens(tokenizer, rng):
    for _ in range(20):
        text = _random_text(rng, int(rng.integers(6, 40)))
        ids = tokenizer.encode(text).ids
        full = tokenizer.decode(ids)
        a = int(rng.integers(0, len(full) - 1))
        stop = full[a:a + int(rng.integers(1, 4))]
        other = _random_text(rng, 3)  # most likely absent: a second stop string that must not matter
        stream = TextStream(tokenizer, [other, stop])
        got = "".join(_feed_in_pieces(stream, ids, rng))
        cuts = [i for i in (full.find(stop), full.find(other)) if i >= 0]
        assert got == full[: min(cuts)]
        assert stream.stopped


def test_chat_template_renders_as_transformers(rng):
    from transformers import PreTrainedTokenizerFast

    template = ("{% for m in messages %}{% if loop.first and m['role'] != 'system' %}{{ bos_token }}{% endif %}"
                "<|{{ m['role'] }}|>\n  {{ m['content'] | trim }}{{ eos_token }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>\n{% endif %}{{ {'n': messages | length} | tojson }}")
    oracle = PreTrainedTokenizerFast(tokenizer_file=str(DEFAULT_TARGET / "tokenizer.json"), bos_token="<s>",
                                     eos_token="</s>")
    ours = ChatTemplate(template, {"bos_token": "<s>", "eos_token": "</s>"})
    roles = ["system", "user", "assistant"]
    for _ in range(5):
        messages = [{"role": roles[int(rng.integers(0, 3))], "content": _random_text(rng, int(rng.integers(0, 12)))}
                    for _ in range(int(rng.integers(1, 5)))]
        for gen_prompt in (True, False):
            want = oracle.apply_chat_template(messages, chat_template=template, tokenize=False,
                                              add_generation_prompt=gen_prompt)
            assert ours.render(messages, add_generation_prompt=gen_prompt) == want


def test_chat_template_refusal_is_an_error():
    ours = ChatTemplate("{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}", {})
    with pytest.raises(ChatTemplateError, match="user first"):
        ours.render([{"role": "assistant", "content": "x"}])
