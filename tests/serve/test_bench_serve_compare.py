"""`kdtree bench serve --compare-run`: the `kdtree run` it compares with decodes on the
server's engine and dtype, and on the native engine with as many requests at once as the
level's concurrency (so that the ratio measures the server, not a different batch)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from rich.console import Console

from kdtree_cli.bench import serve_cli


def _fake_run(seen: list, tokens: int, decode_s: float):
    def run(cmd, **kw):
        seen.append(cmd)
        metrics = Path(cmd[cmd.index("--metrics") + 1])
        engine = cmd[cmd.index("--engine") + 1] if "--engine" in cmd else "torch"
        metrics.write_text(
            json.dumps({"event": "run_start", "engine": engine}) + "\n"
            + json.dumps({"event": "run_end", "tokens": tokens, "decode_s": decode_s, "ttft_s": 0.0}) + "\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def _option(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def test_compare_run_takes_the_servers_engine_dtype_and_concurrency(monkeypatch, rng):
    seen: list = []
    tokens, decode_s = int(rng.integers(10, 10_000)), float(rng.uniform(0.1, 10.0))
    monkeypatch.setattr(serve_cli.subprocess, "run", _fake_run(seen, tokens, decode_s))
    concurrency = int(rng.integers(1, 65))
    dtype = str(rng.choice(["bfloat16", "float32"]))
    quiet = Console(quiet=True)
    native = serve_cli._kdtree_run(["a", [1, 2]], Path("m"), Path("d"), None, False, 8,
                                   {"engine": "native", "dtype": dtype}, concurrency, quiet)
    cmd = seen[-1]
    assert (_option(cmd, "--engine"), _option(cmd, "--dtype")) == ("native", dtype)
    assert _option(cmd, "--max-slots") == str(concurrency) and _option(cmd, "--drafter") == "d"
    assert native["tokens_per_s"] == tokens / decode_s and native["engine"] == "native"

    serve_cli._kdtree_run(["a"], Path("m"), None, None, True, 8, {"engine": "torch", "dtype": dtype}, concurrency,
                          quiet)
    cmd = seen[-1]
    assert _option(cmd, "--engine") == "torch" and "--max-slots" not in cmd and "--ar" in cmd
    serve_cli._kdtree_run(["a"], Path("m"), None, None, True, 8, {}, concurrency, quiet)  # not a kdtree server
    assert "--engine" not in seen[-1] and "--dtype" not in seen[-1]
