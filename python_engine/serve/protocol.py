"""The OpenAI request bodies the server accepts, as pydantic models. Every field OpenAI
defines is declared, so that a parameter the server cannot honour (logprobs, n > 1, tools,
penalties, ...) is refused by name instead of being silently ignored; a field OpenAI does
not define is refused too (extra="forbid")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: StrictBool | None = None
    continuous_usage_stats: StrictBool | None = None


class SamplingFields(BaseModel):
    """What completions and chat share."""
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: StrictInt | None = Field(default=None, ge=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: StrictInt | None = Field(default=None, ge=0, le=2**63 - 1)
    user: str | None = None
    # declared to be refused by name when set (UNSUPPORTED below)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: Any = None

    def unsupported(self) -> list[tuple[str, str]]:
        """(parameter, what to do instead) for each parameter set to what the server cannot do."""
        out = []
        if self.n not in (None, 1):
            out.append(("n", "only n = 1 is served: send n separate requests"))
        if self.top_p not in (None, 1.0):
            out.append(("top_p", "nucleus sampling is not served: leave top_p at 1"))
        if self.frequency_penalty not in (None, 0.0):
            out.append(("frequency_penalty", "penalties are not served: leave it at 0"))
        if self.presence_penalty not in (None, 0.0):
            out.append(("presence_penalty", "penalties are not served: leave it at 0"))
        if self.logit_bias:
            out.append(("logit_bias", "logit biases are not served: leave it out"))
        if self.logprobs not in (None, False):
            out.append(("logprobs", "log-probabilities are not returned: leave it out"))
        return out

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    echo: StrictBool | None = None
    best_of: StrictInt | None = None
    suffix: str | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        out = super().unsupported()
        if self.echo:
            out.append(("echo", "the prompt is not echoed: leave echo out"))
        if self.best_of not in (None, 1):
            out.append(("best_of", "only best_of = 1 is served"))
        if self.suffix:
            out.append(("suffix", "insertion (suffix) is not served: leave it out"))
        return out


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    def as_template_data(self) -> dict:
        """The message as templates expect it: content as one string."""
        text = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        data = {"role": self.role, "content": text}
        if self.name is not None:
            data["name"] = self.name
        return data


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    top_logprobs: StrictInt | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: StrictBool | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: Any = None

    def unsupported(self) -> list[tuple[str, str]]:
        out = super().unsupported()
        if self.top_logprobs is not None:
            out.append(("top_logprobs", "log-probabilities are not returned: leave it out"))
        for name in ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"):
            if getattr(self, name) is not None:
                out.append((name, "tool and function calling is not served: leave it out"))
        if self.response_format not in (None, {"type": "text"}):
            out.append(("response_format", "structured output is not served: leave it out"))
        return out

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
