"""`kdtree serve`: an OpenAI-compatible HTTP server over either engine, with continuous
batching (engine_loop.py), streaming text (text_stream.py), chat templates
(chat_template.py), and the metrics events as a live stream (event_hub.py)."""

# the line `kdtree serve` prints once it accepts connections (what `kdtree serve --host`
# waits for before forwarding the port)
READY_PREFIX = "kdtree serve: listening on"
