"""`kdtree bench serve`: load a running `kdtree serve` (or any OpenAI-compatible server)
at several concurrencies and report what `vllm bench serve` reports (serve_load.py does
the requests); with --compare-run, the same prompts also go through `kdtree run --prompts`
in the same run, and the report gives the server's output tokens/s over the run's: what
serving costs over the engine alone. JSON, Markdown and a plot."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from python_engine.errors import KdtreeError

EVENTS_WAIT_S = 5.0


def serve_bench(
    url: Annotated[str, typer.Option(help="The server, e.g. http://127.0.0.1:8000.")],
    concurrency: Annotated[str, typer.Option(help="Comma-separated request concurrencies, one level each.")] = "1,4,16",
    requests: Annotated[int, typer.Option(min=1, help="Requests per level.")] = 32,
    prompts: Annotated[Optional[Path], typer.Option(
        "--prompts", help="Prompts, as `kdtree run --prompts` reads them (a text per line, or JSON lines "
        "{\"prompt\": ...} / {\"ids\": [...]}) \\[default: lines of Python the demo pair knows, from --seed].",
        show_default=False)] = None,
    max_tokens: Annotated[int, typer.Option(min=1, help="max_tokens of every request.")] = 128,
    seed: Annotated[int, typer.Option(help="Seed of the default prompts.")] = 0,
    api_key: Annotated[Optional[str], typer.Option(envvar="KDTREE_API_KEY", help="The server's API key.",
                                                   show_default=False)] = None,
    compare_run: Annotated[bool, typer.Option(
        "--compare-run", help="Also decode the same prompts with `kdtree run --prompts` (needs --model; give it "
        "the server's --drafter, --budget or --ar too) and report server tokens/s over run tokens/s.")] = False,
    model: Annotated[Optional[Path], typer.Option(help="For --compare-run: the model dir the server serves.",
                                                  show_default=False)] = None,
    drafter: Annotated[Optional[Path], typer.Option(help="For --compare-run: the server's drafter.",
                                                    show_default=False)] = None,
    budget: Annotated[Optional[int], typer.Option(help="For --compare-run: the server's --budget.",
                                                  show_default=False)] = None,
    ar: Annotated[bool, typer.Option("--ar", help="For --compare-run: the server serves --ar.")] = False,
    out: Annotated[Optional[Path], typer.Option(
        "--out", file_okay=False, help="Where serve.json, serve.md and serve.png go \\[default: "
        "results/<server device>/serve].", show_default=False)] = None,
) -> None:
    """Load a running server at each concurrency: request and output throughput, TTFT, TPOT, ITL, E2EL (mean, median, p99) and acceptance length, as `vllm bench serve` reports them.

    With --compare-run the same prompts also go through `kdtree run --prompts` before and after each level, and each level reports the server's output tokens/s over the run's (the cost of serving). Example: kdtree bench serve --url http://127.0.0.1:8000 --compare-run --model refs/models/demo-target --drafter refs/models/demo-drafter
    """
    from rich.console import Console

    from kdtree_cli.bench.provenance import run_record
    from kdtree_cli.bench.serve_load import run_level

    levels = _levels(concurrency)
    if compare_run and model is None:
        raise KdtreeError("--compare-run needs --model DIR (the model the server serves)")
    err = Console(stderr=True, highlight=False)
    url = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    served_model, server = _server_facts(url, headers)
    prompt_list = _prompts(prompts, seed, requests)
    err.print(f"server: {served_model} ({server.get('engine', '?')} engine, {server.get('mode', '?')}, "
              f"{server.get('device', '?')}); {requests} requests per level, max_tokens {max_tokens}")
    same_prompts = [prompt_list[i % len(prompt_list)] for i in range(requests)]
    results, runs = [], []
    for c in levels:
        before = _kdtree_run(same_prompts, model, drafter, budget, ar, max_tokens, server, c, err) \
            if compare_run else None
        r = asyncio.run(run_level(url, served_model, prompt_list, c, requests, max_tokens, api_key))
        ratio = ""
        if compare_run:  # a run before and after each level: on a shared machine both see its load
            runs += [before, _kdtree_run(same_prompts, model, drafter, budget, ar, max_tokens, server, c, err)]
            around = (runs[-2]["tokens_per_s"] + runs[-1]["tokens_per_s"]) / 2
            r["kdtree_run_tokens_per_s"] = around
            r["over_kdtree_run"] = r["output_throughput"] / around if around else None
            ratio = f", {r['over_kdtree_run']:.3f}x kdtree run ({around:.1f} tokens/s)"
        results.append(r)
        err.print(f"concurrency {c:>3}: {r['output_throughput']:8.1f} output tokens/s{ratio}, "
                  f"{r['request_throughput']:.2f} req/s, TTFT median {_ms(r['ttft_ms']['median'])}, "
                  f"TPOT median {_ms(r['tpot_ms']['median'])}, acceptance length "
                  f"{_num(r['spec_decode']['acceptance_length'])}, failed {r['failed']}")
    run = runs[0] if runs else None
    report = {"run": run_record(), "server": {"url": url, "model": served_model, **server},
              "max_tokens": max_tokens, "levels": results, "kdtree_run": run, "kdtree_runs": runs}
    folder = out or Path("results") / _device_folder(server.get("device", "unknown")) / "serve"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "serve.json").write_text(json.dumps(report, indent=2) + "\n")
    (folder / "serve.md").write_text(_markdown(report))
    _plot(report, folder / "serve.png")
    Console(highlight=False).print(f"wrote {folder}/serve.json, serve.md, serve.png")


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise KdtreeError(f"--concurrency {text!r}: expected comma-separated integers, e.g. 1,4,16") from None
    if not levels or min(levels) < 1:
        raise KdtreeError(f"--concurrency {text!r}: each level must be >= 1")
    return levels


def _server_facts(url: str, headers: dict) -> tuple[str, dict]:
    """The served model id, and the server's run_start event (engine, device, mode...) when
    it has the kdtree events stream."""
    import httpx

    try:
        r = httpx.get(f"{url}/v1/models", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise KdtreeError(f"--url {url}: no server answers ({exc})") from None
    if r.status_code != 200:
        raise KdtreeError(f"--url {url}: /v1/models answered {r.status_code}: {r.text[:200]}")
    model = r.json()["data"][0]["id"]
    facts: dict = {}
    try:
        with httpx.stream("GET", f"{url}/v1/kdtree/events", headers=headers, timeout=EVENTS_WAIT_S) as ev:
            for line in ev.iter_lines():
                if line.startswith("data: "):
                    first = json.loads(line[6:])
                    if first.get("event") == "run_start":
                        keep = ("engine", "device", "dtype", "mode", "budget", "block_size", "drafter", "host")
                        facts = {k: first[k] for k in keep if k in first}
                    break
    except (httpx.HTTPError, ValueError):
        pass  # not a kdtree server: the report goes without its facts
    return model, facts


def _prompts(path: Optional[Path], seed: int, count: int) -> list:
    if path is None:
        from python_engine.demo.code_prompts import code_texts

        return code_texts(count, seed)
    from python_engine.decode.run_command import read_prompts_file

    texts, ids = read_prompts_file(path)
    return list(texts) + list(ids)


def _kdtree_run(prompt_list: list, model: Path, drafter: Optional[Path], budget: Optional[int], ar: bool,
                max_tokens: int, server: dict, concurrency: int, err) -> dict:
    """`kdtree run --prompts` on the same prompts, with the server's engine and dtype (from its
    run_start event; `kdtree run` alone defaults to the torch engine) and, on the native
    engine, as many requests at once as the level's concurrency (--max-slots), so that each
    level is compared with the engine batching the same number of requests; tokens/s over its
    decoding time (prefill and decode of every request: the torch engine runs them one after
    the other, the native engine batches them and reports its wall time)."""
    with tempfile.TemporaryDirectory(prefix="kdtree-bench-serve-") as tmp:
        file = Path(tmp) / "prompts.jsonl"
        file.write_text("".join(json.dumps({"prompt": p} if isinstance(p, str) else {"ids": p}) + "\n"
                                for p in prompt_list))
        metrics = Path(tmp) / "run.jsonl"
        cmd = [sys.executable, "-m", "kdtree_cli", "run", "--model", str(model), "--prompts", str(file),
               "--max-tokens", str(max_tokens), "--metrics", str(metrics)]
        cmd += ["--ar"] if ar else (["--drafter", str(drafter)] if drafter else [])
        cmd += ["--budget", str(budget)] if budget is not None and not ar else []
        cmd += [x for key in ("engine", "dtype") if server.get(key) for x in (f"--{key}", str(server[key]))]
        cmd += ["--max-slots", str(concurrency)] if server.get("engine") == "native" else []
        err.print("running: kdtree " + " ".join(cmd[3:]))
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise KdtreeError(f"kdtree run failed ({done.returncode}): {done.stderr[-500:]}")
        events = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    start = next(e for e in events if e["event"] == "run_start")
    end = next(e for e in events if e["event"] == "run_end")
    n = len(prompt_list)
    seconds = end["decode_s"] if start["engine"] == "native" else end["decode_s"] + end["ttft_s"] * n
    return {"command": "kdtree " + " ".join(cmd[3:]), "engine": start["engine"], "requests": n,
            "tokens": end["tokens"], "seconds": seconds, "tokens_per_s": end["tokens"] / seconds if seconds else 0.0,
            "tau": end.get("tau")}


def _device_folder(device: str) -> str:
    return "cpu" if device.startswith("cpu") else device.replace(":", "").replace(" ", "_").lower()


def _ms(v) -> str:
    return "-" if v is None else f"{v:.1f} ms"


def _num(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _markdown(report: dict) -> str:
    s, run = report["server"], report["run"]
    lines = [f"# kdtree bench serve: {s['model']} ({s.get('engine', '?')} engine, {s.get('mode', '?')}, "
             f"{s.get('device', '?')})", "",
             f"`{run['command']}` at {run['commit']}, {run['date']}; max_tokens {report['max_tokens']}, "
             "temperature 0, streamed completions.", "",
             "| concurrency | requests | req/s | output tok/s | peak tok/s | TTFT mean / median / p99 ms | "
             "TPOT mean / median / p99 ms | ITL mean / median / p99 ms | E2EL mean / median / p99 ms | "
             "acceptance length | server / kdtree run |",
             "|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|"]

    def three(d: dict) -> str:
        return " / ".join("-" if d[k] is None else f"{d[k]:.1f}" for k in ("mean", "median", "p99"))

    for r in report["levels"]:
        ratio = r.get("over_kdtree_run")
        lines.append(f"| {r['concurrency']} | {r['completed']}/{r['requests']} | {r['request_throughput']:.2f} | "
                     f"{r['output_throughput']:.1f} | {r['peak_output_throughput']:.1f} | {three(r['ttft_ms'])} | "
                     f"{three(r['tpot_ms'])} | {three(r['itl_ms'])} | {three(r['e2el_ms'])} | "
                     f"{_num(r['spec_decode']['acceptance_length'])} | {'-' if ratio is None else f'{ratio:.3f}'} |")
    if report["kdtree_runs"]:
        k = report["kdtree_run"]
        each = ", ".join(f"{x['tokens_per_s']:.1f}" for x in report["kdtree_runs"])
        lines += ["", f"`{k['command']}` (the same {k['requests']} prompts, run before and after each level, "
                      f"on the native engine with --max-slots = the level's concurrency; the ratio against the mean of the two, so that both see the same machine): {k['tokens']} tokens, {each} tokens/s ({k['engine']} engine, "
                      "prefill and decode time of every request)."]
    return "\n".join(lines) + "\n"


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = report["levels"]
    c = [r["concurrency"] for r in levels]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(c, [r["output_throughput"] for r in levels], "o-", label="kdtree serve")
    if report["kdtree_runs"]:
        a.plot(c, [r["kdtree_run_tokens_per_s"] for r in levels], "s--", color="gray", label="kdtree run --prompts")
    a.set(xscale="log", xlabel="concurrency", ylabel="output tokens/s", title="throughput")
    a.set_ylim(bottom=0)
    a.set_xticks(c, [str(x) for x in c])
    a.legend()
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
        b.plot(c, [r[key]["median"] or 0 for r in levels], "o-", label=f"{label} median")
    b.set(xscale="log", yscale="log", xlabel="concurrency", ylabel="ms", title="latency")
    b.set_xticks(c, [str(x) for x in c])
    b.legend()
    s = report["server"]
    fig.suptitle(f"{s['model']}: {s.get('engine', '?')} {s.get('mode', '')} on {s.get('device', '?')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def register(bench_app: typer.Typer) -> None:
    bench_app.command("serve")(serve_bench)
