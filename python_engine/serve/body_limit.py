"""A request body larger than the server takes is refused with 413 in OpenAI's error shape
before the app sees it: by its Content-Length, or, for a body sent in chunks with no length, as
soon as the chunks read pass the limit. The body is read here and handed to the app whole
(later messages, such as a client's disconnect, pass through). A prompt of a model's whole
context is a few MB of JSON; far more is a mistake or an attack."""

from __future__ import annotations

from python_engine.serve.api_error import error_response

MAX_BODY_BYTES = 16 << 20  # 16 MiB: a 262k-token prompt as text is ~1-2 MB


class BodyLimit:
    """ASGI middleware around the app: HTTP bodies over `limit` bytes get 413."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = error_response(413, f"the request body is over {self.limit} bytes: send a shorter prompt",
                                 code="body_too_large")
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await refusal(scope, receive, send)
        chunks, seen, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body ended
                return
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                return await refusal(scope, receive, send)
            more = message.get("more_body", False)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)
