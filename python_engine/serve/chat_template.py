"""The model's chat template (tokenizer_config.json `chat_template`), rendered as
transformers' `apply_chat_template` renders it: a sandboxed jinja2 environment with
trim_blocks / lstrip_blocks and loop controls, its `tojson` (no HTML escaping),
`raise_exception` and `strftime_now`, the special tokens by name (`bos_token`, ...), and
`add_generation_prompt`. The rendered text is then tokenized without adding special
tokens (the template writes them), as transformers does."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from python_engine.errors import KdtreeError

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ChatTemplateError(ValueError):
    """The template refused the conversation (its raise_exception) or failed rendering it."""


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class ChatTemplate:
    def __init__(self, source: str, special_tokens: dict[str, str]):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.template = env.from_string(source)
        self.special_tokens = special_tokens

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        try:
            return self.template.render(messages=messages, tools=None, documents=None,
                                        add_generation_prompt=add_generation_prompt, **self.special_tokens)
        except jinja2.exceptions.TemplateError as exc:
            raise ChatTemplateError(str(exc)) from None


def load_chat_template(model_dir: Path) -> ChatTemplate | None:
    """The model's default chat template, or None when it has none."""
    path = Path(model_dir) / "tokenizer_config.json"
    if not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KdtreeError(f"{path}: cannot read: {exc}") from None
    source = settings.get("chat_template")
    if isinstance(source, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    if not isinstance(source, str) or not source:
        return None
    special = {name: text for name in SPECIAL_TOKEN_NAMES if (text := _token_text(settings.get(name))) is not None}
    try:
        return ChatTemplate(source, special)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise KdtreeError(f"{path}: the chat_template does not parse: {exc}") from None
