"""The HTTP side of `kdtree serve` (FastAPI): OpenAI's /v1/completions,
/v1/chat/completions and /v1/models, /health (no key needed), /metrics (Prometheus, the
names of `kdtree run --prometheus`), and /v1/kdtree/events (the metrics events of
docs/events.md as server-sent events, what `kdtree tui --url` follows)."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from dataclasses import dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sse_starlette import EventSourceResponse
from tokenizers import Tokenizer

from python_engine.decode.prompts import TextCodec
from python_engine.errors import KdtreeError
from python_engine.metrics_exporter import PrometheusExporter
from python_engine.serve.api_error import ApiError, install_error_handlers
from python_engine.serve.body_limit import BodyLimit
from python_engine.serve.chat_template import ChatTemplate, ChatTemplateError
from python_engine.serve.engine_loop import EngineLoop
from python_engine.serve.event_hub import EventHub
from python_engine.serve.generation import Delta, generate, sampling_params, submit
from python_engine.serve.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields

DISCONNECT_POLL_S = 0.5  # how often a non-streamed request checks that its client is still there
EVENTS_IDLE_S = 1.0  # an events stream wakes this often to notice a shutdown
SSE_PING_S = 15  # keep-alive comments on idle streams


@dataclass
class ServeState:
    loop: EngineLoop
    codec: TextCodec
    tokenizer: Tokenizer
    chat_template: ChatTemplate | None
    model_name: str
    vocab_size: int
    stop_ids: tuple[int, ...]
    default_max_tokens: int
    default_temperature: float
    exporter: PrometheusExporter
    hub: EventHub
    api_key: str | None = None
    created: int = 0


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def create_app(state: ServeState, lifespan=None) -> FastAPI:
    app = FastAPI(title="kdtree", lifespan=lifespan)
    app.state.serve = state
    install_error_handlers(app)
    app.add_middleware(BodyLimit)
    bearer = HTTPBearer(auto_error=False)

    async def require_key(cred: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if state.api_key is None:
            return
        given = cred.credentials if cred is not None else ""
        if not hmac.compare_digest(given.encode(), state.api_key.encode()):
            raise ApiError(401, "a valid API key is needed: send the header 'Authorization: Bearer KEY'",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    keyed = [Depends(require_key)]

    @app.get("/health")
    async def health():
        counts = state.loop.counts()
        if state.loop.failure:
            return JSONResponse({"status": "failed", "error": state.loop.failure, **counts}, status_code=503)
        if state.loop.draining:
            return JSONResponse({"status": "draining", **counts}, status_code=503)
        return {"status": "ok", **counts}

    @app.get("/v1/models", dependencies=keyed)
    async def models():
        return {"object": "list", "data": [{
            "id": state.model_name, "object": "model", "created": state.created, "owned_by": "kdtree",
            "max_model_len": state.loop.backend.capacity}]}

    @app.get("/metrics", dependencies=keyed)
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(state.exporter.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/kdtree/events", dependencies=keyed)
    async def events():
        queue = state.hub.subscribe()

        async def stream():
            try:
                while not state.loop.closing:
                    try:
                        event = await asyncio.wait_for(queue.get(), EVENTS_IDLE_S)
                    except asyncio.TimeoutError:
                        continue
                    yield json.dumps(event, separators=(",", ":"))
            finally:
                state.hub.unsubscribe(queue)

        return EventSourceResponse(stream(), sep="\n", ping=SSE_PING_S)

    @app.post("/v1/completions", dependencies=keyed)
    async def completions(body: CompletionRequest, request: Request):
        _check_model_and_params(state, body)
        prompt = _completion_prompt(state, body.prompt)
        return await _respond(state, request, body, prompt, body.max_tokens, chat=False)

    @app.post("/v1/chat/completions", dependencies=keyed)
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        _check_model_and_params(state, body)
        if state.chat_template is None:
            raise ApiError(400, f"model {state.model_name!r} has no chat_template in its tokenizer_config.json, "
                                "so it cannot take chat messages: use /v1/completions with a prompt",
                           param="messages", code="no_chat_template")
        try:
            text = state.chat_template.render([m.as_template_data() for m in body.messages])
        except ChatTemplateError as exc:
            raise ApiError(400, f"the model's chat template refused the messages: {exc}", param="messages") from None
        prompt = state.tokenizer.encode(text, add_special_tokens=False).ids
        if not prompt:
            raise ApiError(400, "the messages render to no tokens", param="messages")
        return await _respond(state, request, body, prompt, body.token_limit(), chat=True)

    return app


def _check_model_and_params(state: ServeState, body: SamplingFields) -> None:
    if body.model != state.model_name:
        raise ApiError(404, f"model {body.model!r} is not served here: this server serves {state.model_name!r}",
                       param="model", code="model_not_found")
    bad = body.unsupported()
    if bad:
        name, instead = bad[0]
        raise ApiError(400, f"parameter {name!r} is not supported: {instead}", param=name, code="unsupported_parameter")


def _completion_prompt(state: ServeState, prompt) -> list[int]:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise ApiError(400, f"one prompt per request (got {len(prompt)}): send them as separate requests",
                           param="prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        try:
            return state.codec.encode(prompt)
        except KdtreeError as exc:
            raise ApiError(400, f"the prompt cannot be encoded: {exc}", param="prompt") from None
    if not prompt:
        raise ApiError(400, "the prompt is empty: send text or at least one token id", param="prompt")
    bad = [t for t in prompt if not 0 <= t < state.vocab_size]
    if bad:
        raise ApiError(400, f"token ids {bad[:5]} are outside the vocabulary 0..{state.vocab_size - 1}",
                       param="prompt")
    return list(prompt)


async def _respond(state: ServeState, request: Request, body: SamplingFields, prompt: list[int],
                   max_tokens: int | None, chat: bool):
    capacity = state.loop.backend.capacity
    room = capacity - len(prompt)
    if room < 1:
        raise ApiError(400, f"the prompt is {len(prompt)} tokens; a slot holds {capacity} tokens, prompt and "
                            "completion together: shorten the prompt", param="prompt", code="context_length_exceeded")
    if max_tokens is None:
        max_tokens = min(state.default_max_tokens, room)
    elif max_tokens > room:
        raise ApiError(400, f"the prompt ({len(prompt)} tokens) plus max_tokens ({max_tokens}) exceed a slot's "
                            f"{capacity} tokens: ask for at most {room} tokens or shorten the prompt",
                       param="max_tokens", code="context_length_exceeded")
    temperature = state.default_temperature if body.temperature is None else body.temperature
    params = sampling_params(max_tokens, temperature, body.seed, state.stop_ids)
    ticket = submit(state.loop, prompt, params)
    deltas = generate(state.loop, ticket, state.tokenizer, body.stop_strings())
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    created = int(time.time())
    if body.stream:
        return EventSourceResponse(_stream(state, deltas, rid, created, len(prompt), chat), sep="\n", ping=SSE_PING_S)
    return await _collect(state, request, deltas, rid, created, len(prompt), chat)


async def _collect(state: ServeState, request: Request, deltas, rid: str, created: int, prompt_tokens: int,
                   chat: bool):
    async def consume() -> Delta:
        parts, last = [], Delta("")
        async for d in deltas:
            parts.append(d.text)
            last = d
        return Delta("".join(parts), last.finish_reason, last.completion_tokens, last.error)

    task = asyncio.ensure_future(consume())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                break
            if await request.is_disconnected():
                task.cancel()
                return Response(status_code=499)
    finally:
        if not task.done():
            task.cancel()
    result = task.result()
    if result.error:
        raise ApiError(500, f"the engine failed the request: {result.error}", code="engine_error")
    usage = _usage(prompt_tokens, result.completion_tokens)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": result.text},
                  "finish_reason": result.finish_reason, "logprobs": None}
        return {"id": rid, "object": "chat.completion", "created": created, "model": state.model_name,
                "choices": [choice], "usage": usage}
    choice = {"index": 0, "text": result.text, "finish_reason": result.finish_reason, "logprobs": None}
    return {"id": rid, "object": "text_completion", "created": created, "model": state.model_name,
            "choices": [choice], "usage": usage}


async def _stream(state: ServeState, deltas, rid: str, created: int, prompt_tokens: int, chat: bool):
    """SSE chunks as OpenAI shapes them; the last carries the finish reason and the usage,
    then `data: [DONE]`."""
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(text: str | None, finish: str | None, usage: dict | None = None, role: bool = False) -> str:
        if chat:
            delta = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        body = {"id": rid, "object": kind, "created": created, "model": state.model_name, "choices": [choice]}
        if usage is not None:
            body["usage"] = usage
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    try:
        if chat:
            yield chunk(None, None, role=True)
        async for d in deltas:
            if d.error:
                yield json.dumps({"error": {"message": f"the engine failed the request: {d.error}",
                                            "type": "server_error", "param": None, "code": "engine_error"}})
                break
            if d.finish_reason is None:
                yield chunk(d.text, None)
                continue
            if d.text:
                yield chunk(d.text, None)
            yield chunk(None if chat else "", d.finish_reason, _usage(prompt_tokens, d.completion_tokens))
        yield "[DONE]"
    finally:
        await deltas.aclose()
