"""What `kdtree run` asks for (RunRequest, read by both engines' runs), its prompts file, and
its run on the torch engine: load the models (with progress), encode the prompts, run the
requests with metrics events, print each request's output and a summary. Which engine runs a
request is python_engine/run.py's to decide.

Results go to stdout, progress and diagnostics to stderr; when the metrics stream is
stdout (--metrics -), the results go to stderr so stdout stays pure JSON lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from python_engine.errors import KdtreeError
from python_engine.events import EventWriter


@dataclass
class RunRequest:
    model: Path
    drafter: Path | None = None
    prompts: list[str] = field(default_factory=list)
    prompt_ids: list[str] = field(default_factory=list)
    budget: int | str = 32  # or "auto" (torch engine): chosen per round
    max_budget: int = 64  # with budget "auto": the largest tree considered
    block_size: int | None = None
    temperature: float = 0.0
    max_tokens: int = 128
    seed: int = 0
    device: str | None = None
    dtype: str | None = None
    metrics: str | None = None
    ar: bool = False
    ignore_eos: bool = False
    engine: str = "torch"  # torch | native | auto (native when built and a GPU answers)
    prompts_file: Path | None = None  # one prompt per line (text), or JSON lines {"prompt": ...} / {"ids": [...]}
    prometheus: int | None = None  # serve Prometheus metrics on this port
    max_slots: int | None = None  # native: requests decoded at once (default: all, up to 64)
    gpus: int = 1  # native: GPUs the model is split over, one process each (cuda:0..gpus-1)
    # native: "dummy" makes the weights on the GPU from --seed (no safetensors: timing and memory only)
    load_format: str = "checkpoint"
    world_size: int = 1  # native, with comm "none": this process is one rank's share of world_size
    rank: int = 0
    gpu_memory_limit_gib: float | None = None  # native: GiB the engine may use on its GPU


def read_prompts_file(path: Path) -> tuple[list[str], list[list[int]]]:
    """Prompts from a file: one text per line, or JSON lines with "prompt" (text) or "ids"."""
    from python_engine.json_text import parse_json

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise KdtreeError(f"--prompts {path}: cannot read: {exc.strerror or exc}") from None
    texts, ids = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            obj = parse_json(line, f"--prompts {path}:{n}")
            if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
                texts.append(obj["prompt"])
            elif isinstance(obj, dict) and isinstance(obj.get("ids"), list) and all(
                    isinstance(i, int) and not isinstance(i, bool) for i in obj["ids"]) and obj["ids"]:
                ids.append(obj["ids"])
            else:
                raise KdtreeError(f'--prompts {path}:{n}: expected {{"prompt": "text"}} or {{"ids": [1, 2, ...]}}')
        else:
            texts.append(line.replace("\\n", "\n"))
    if not texts and not ids:
        raise KdtreeError(f"--prompts {path}: no prompts in the file")
    return texts, ids


def run_torch_command(req: RunRequest, events: EventWriter, stdout: IO[str], stderr: IO[str]) -> list:
    """`kdtree run` on the torch engine: load, encode, decode every prompt, print each output and a summary."""
    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from python_engine.decode.prompts import TextCodec, parse_ids
    from python_engine.decode.runner import RunSettings, run_requests
    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target, parse_dtype, resolve_device

    file_texts, file_ids = read_prompts_file(req.prompts_file) if req.prompts_file is not None else ([], [])
    if not req.prompts and not req.prompt_ids and not file_texts and not file_ids:
        raise KdtreeError("give at least one --prompt TEXT, --prompt-ids 1,2,3 or --prompts FILE")
    if not req.ar and req.drafter is None:
        raise KdtreeError("DDTree needs --drafter DIR (or pass --ar for plain autoregressive decoding)")
    device = resolve_device(req.device)
    dtype = parse_dtype(req.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    torch.manual_seed(req.seed)

    out_console = Console(file=stderr if req.metrics == "-" else stdout, highlight=False, soft_wrap=True)
    err_console = Console(file=stderr, highlight=False)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err_console, transient=True)
    with progress:
        task = progress.add_task(f"loading {req.model.name}", total=None)
        target = load_target(req.model, device, dtype,
                             progress=lambda done, total: progress.update(task, completed=done, total=total))
        drafter = None if req.ar else load_drafter(req.drafter, target)
        progress.remove_task(task)

        codec = TextCodec(req.model)
        prompts = [codec.encode(p) for p in list(req.prompts) + file_texts]
        prompts += [parse_ids(p, target.cfg.vocab_size) for p in req.prompt_ids]
        prompts += [parse_ids(",".join(map(str, ids)), target.cfg.vocab_size) for ids in file_ids]
        settings = RunSettings(
            max_new_tokens=req.max_tokens, budget=req.budget, max_budget=req.max_budget, block_size=req.block_size,
            temperature=req.temperature, seed=req.seed, ar=req.ar,
            stop_ids=() if req.ignore_eos else target.cfg.eos_token_ids,
        )
        gen_task = progress.add_task("generating (tokens)", total=len(prompts) * req.max_tokens)
        produced = [0] * len(prompts)

        def round_done(r, info):
            progress.advance(gen_task, info.tokens - produced[r])
            produced[r] = info.tokens

        def done(r, gen):
            progress.advance(gen_task, req.max_tokens - produced[r])  # stopped early: the rest
            text = codec.decode(gen.tokens)
            shown = text if text is not None else " ".join(str(t) for t in gen.tokens)
            out_console.print(f"[bold]request {r}[/] ({len(gen.tokens)} tokens, tau {gen.tau:.2f}):")
            out_console.print(shown, markup=False)

        generations, summary = run_requests(target, drafter, prompts, settings, events, done, round_done)
    mode = "AR" if req.ar else f"DDTree budget {req.budget}"
    if req.budget == "auto" and not req.ar:
        chosen = [r.budget for g in generations for r in g.rounds]
        mode += f" (<= {req.max_budget}, mean {sum(chosen) / max(1, len(chosen)):.1f})"
    out_console.print(
        f"[bold]summary[/] {mode}, {device.type}, {str(dtype).removeprefix('torch.')}: "
        f"{summary.tokens} tokens in {len(generations)} request(s), tau {summary.tau:.2f}, "
        f"{summary.tokens_per_s:.1f} tokens/s (decode {summary.decode_s:.2f} s)"
    )
    return generations
