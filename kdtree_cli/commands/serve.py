"""`kdtree serve`: an OpenAI-compatible HTTP server over the torch or the native engine,
with continuous batching."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.threads import DEFAULT_THREADS, Threads, use_threads

Opt = typer.Option


def serve(
    ctx: typer.Context,
    model: Annotated[Path, Opt(help="Target checkpoint dir (config.json, safetensors, tokenizer.json).")],
    drafter: Annotated[Optional[Path], Opt(help="DFlash drafter dir; not needed with --ar.")] = None,
    engine: Annotated[str, Opt(help="torch (the reference), native (the CUDA engine; needs `kdtree build` and "
                               "a GPU), or auto (native when available).")] = "torch",
    port: Annotated[int, Opt(min=1, max=65535, help="TCP port.")] = 8000,
    bind: Annotated[str, Opt(help="Address to listen on; anything beyond loopback should have an --api-key.")] = "127.0.0.1",
    api_key: Annotated[Optional[str], Opt(
        envvar="KDTREE_API_KEY", help="Require 'Authorization: Bearer KEY' on every endpoint but /health.",
        show_default=False)] = None,
    budget: Annotated[int, Opt(help="DDTree node budget N.")] = 32,
    block_size: Annotated[Optional[int], Opt(help="Drafter block size (default: the drafter's).")] = None,
    ar: Annotated[bool, Opt("--ar", help="Serve plain autoregressive decoding (no drafter).")] = False,
    max_slots: Annotated[int, Opt(min=1, help="Requests decoded at once; more wait in the queue.")] = 16,
    max_queue: Annotated[int, Opt(min=0, help="Requests that may wait for a slot; beyond that, 429.")] = 64,
    max_model_len: Annotated[Optional[int], Opt(
        min=2, help="Tokens per slot, prompt and completion together (default: the model's positions, "
        "up to 4096).", show_default=False)] = None,
    default_max_tokens: Annotated[int, Opt(min=1, help="max_tokens of a request that names none.")] = 256,
    drain_s: Annotated[float, Opt(min=0.0, help="On SIGTERM: seconds running requests may take to finish "
                                  "before they are cancelled.")] = 30.0,
    served_model_name: Annotated[Optional[str], Opt(
        help="The model id clients send (default: the model dir's name).", show_default=False)] = None,
    device: Annotated[Optional[str], Opt(help="cpu, cuda, cuda:N (default: cuda if available).")] = None,
    dtype: Annotated[Optional[str], Opt(help="float32 or bfloat16 (default: bfloat16 on cuda, float32 on cpu).")] = None,
    native_variant: Annotated[str, Opt(
        help="Native engine build: gpu, or emu (the CPU-emulated engine: slow, for tests).")] = "gpu",
    metrics: Annotated[Optional[str], Opt(help="Also write the metrics events (JSON lines) to FILE.")] = None,
    ignore_eos: Annotated[bool, Opt("--ignore-eos", help="Do not stop at the model's EOS tokens.")] = False,
    access_log: Annotated[bool, Opt("--access-log", help="Log every HTTP request.")] = False,
    threads: Threads = DEFAULT_THREADS,
    host: Annotated[Optional[str], Opt(
        "--host", help="Serve on this host from kdtree.toml (paths are the host's) and forward its port here "
        "over SSH.", show_default=False)] = None,
) -> None:
    """Serve the model over the OpenAI API: /v1/completions, /v1/chat/completions, /v1/models.

    Requests join the running batch as they arrive and stream their text as rounds emit tokens; at temperature 0 the text is `kdtree run --ar`'s. Also /health (no key needed), /metrics (Prometheus, the names of `kdtree run --prometheus`) and /v1/kdtree/events (the metrics events; `kdtree tui --url` follows them). A full queue answers 429; SIGTERM stops admission, drains for --drain-s and exits 0.

    Example, then any OpenAI client at http://127.0.0.1:8000/v1 with the model id demo-target: kdtree serve --model refs/models/demo-target --drafter refs/models/demo-drafter
    """
    if host:
        from kdtree_cli.host_forwarding import forwarded_args
        from remote.serve_forward import serve_on_host

        status = serve_on_host(host, forwarded_args(ctx, drop=("host",)), port)
        if status:
            raise typer.Exit(status)
        return
    from python_engine.serve.server import ServeOptions
    from python_engine.serve.server import serve as run_server

    use_threads(threads)
    run_server(ServeOptions(
        model=model, drafter=drafter, engine=engine, native_variant=native_variant, bind=bind, port=port,
        budget=budget, block_size=block_size, ar=ar, max_slots=max_slots, max_queue=max_queue,
        max_model_len=max_model_len, device=device, dtype=dtype, api_key=api_key, drain_s=drain_s,
        default_max_tokens=default_max_tokens, served_model_name=served_model_name, metrics=metrics,
        ignore_eos=ignore_eos, access_log=access_log), stderr=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
