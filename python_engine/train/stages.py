"""The stages of `kdtree train-demo` and their files. Each stage reads what the previous ones
wrote under data_dir (corpus, tokenizer: built once on a development machine and carried to
the GPU) or work_dir (checkpoints, histories, evaluation), so a later call resumes where an
earlier one stopped. `export` copies the pair and the results where they are shipped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from python_engine.errors import KdtreeError
from python_engine.train.recipe import Recipe, validate

STAGES = ("corpus", "tokenizer", "target", "drafter", "eval", "export")
TF32_STAGES = ("target", "drafter")  # training: TF32 on (precision.py says why only there)


@dataclass(frozen=True)
class DemoPaths:
    data_dir: Path  # corpus.jsonl.xz, corpus-manifest.json, tokenizer.json, tokens.npz
    work_dir: Path  # demo-target/, demo-drafter/, histories, eval.json, plots
    models_dir: Path  # export: <models_dir>/demo-target, <models_dir>/demo-drafter
    results_dir: Path  # export: eval.json, summary.md, loss curves, histories, manifests

    @property
    def target_dir(self) -> Path:
        return self.work_dir / "demo-target"

    @property
    def drafter_dir(self) -> Path:
        return self.work_dir / "demo-drafter"

    @property
    def eval_json(self) -> Path:
        return self.work_dir / "eval.json"


def stage_done(stage: str, p: DemoPaths) -> bool:
    done = {
        "corpus": [p.data_dir / "corpus.jsonl.xz", p.data_dir / "corpus-manifest.json"],
        "tokenizer": [p.data_dir / "tokenizer.json", p.data_dir / "tokens.npz"],
        "target": [p.target_dir / "config.json", p.work_dir / "target-history.json"],
        "drafter": [p.drafter_dir / "config.json", p.work_dir / "drafter-history.json"],
        "eval": [p.eval_json],
        "export": [],
    }[stage]
    return bool(done) and all(f.exists() for f in done)


def check_recipe(recipe: Recipe, p: DemoPaths, fresh: bool) -> None:
    """A work dir belongs to one recipe: resuming with another one would mix their stages."""
    p.work_dir.mkdir(parents=True, exist_ok=True)
    path = p.work_dir / "recipe.json"
    current = recipe.to_dict()
    if path.exists() and not fresh:
        recorded = json.loads(path.read_text())
        if recorded != json.loads(json.dumps(current)):
            raise KdtreeError(
                f"{p.work_dir} holds stages of another recipe ({recorded.get('name')}, other settings); "
                "pass --force to start over there, or another --work-dir"
            )
    path.write_text(json.dumps(current, indent=1) + "\n")


def check_data(recipe: Recipe, p: DemoPaths, rebuilding: set[str]) -> None:
    """The data dir must have been built with this recipe's corpus and vocabulary settings."""
    manifest_path = p.data_dir / "corpus-manifest.json"
    if not manifest_path.exists() or "corpus" in rebuilding:
        return
    m = json.loads(manifest_path.read_text())
    if m.get("max_files") != recipe.max_files or m.get("heldout_every") != recipe.heldout_every:
        raise KdtreeError(f"{p.data_dir} holds a corpus built with other settings (max_files {m.get('max_files')}, "
                          f"heldout_every {m.get('heldout_every')}); use another --data-dir or rebuild it "
                          "with --stage corpus --stage tokenizer")
    if "tokenizer" not in rebuilding and "vocab_size" in m and m["vocab_size"] != recipe.vocab_size:
        raise KdtreeError(f"{p.data_dir}: the tokenizer has {m['vocab_size']} tokens, the recipe wants "
                          f"{recipe.vocab_size}; rebuild it with --stage tokenizer")


def run_stages(requested: list[str], recipe: Recipe, p: DemoPaths, device: str, stdlib: Path | None = None,
               experts: str = "eager", force: bool = False, say: Callable[[str], None] = print) -> list[str]:
    """Run the requested stages in pipeline order. "all" resumes: finished stages are skipped
    (unless force) until one runs, after which every later stage runs too. Stages named
    explicitly always run. Returns the stages that ran."""
    validate(recipe)
    quiet_transformers()
    resume = requested == ["all"]
    wanted = list(STAGES) if resume else [s for s in STAGES if s in requested]
    unknown = [s for s in requested if s != "all" and s not in STAGES]
    if unknown:
        raise KdtreeError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)} or all")
    if set(wanted) & {"target", "drafter", "eval", "export"}:
        check_recipe(recipe, p, fresh=force or not any(stage_done(s, p) for s in ("target", "drafter", "eval")))
    check_data(recipe, p, rebuilding={s for s in wanted if force or not resume or not stage_done(s, p)})
    from python_engine.model.target_loader import resolve_device
    from python_engine.train.precision import tf32

    dev = resolve_device(device)
    ran, rerun_rest = [], False
    for stage in wanted:
        if resume and not force and not rerun_rest and stage_done(stage, p):
            say(f"[{stage}] done earlier; skipping (delete its files or pass --force to redo it)")
            continue
        say(f"[{stage}] starting")
        with tf32(stage in TF32_STAGES and dev.type == "cuda"):  # restored after the stage
            STAGE_FUNCTIONS[stage](recipe, p, dev, stdlib=stdlib, experts=experts, say=say)
        ran.append(stage)
        rerun_rest = stage != "export"
    return ran


def quiet_transformers() -> None:
    """No per-shard progress bars or advisory warnings in the stage logs."""
    import warnings

    warnings.filterwarnings("ignore", message=".*deprecated.*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def _corpus(recipe, p, device, stdlib=None, say=print, **_):
    from python_engine.train.corpus import default_stdlib_root, select_files, write_corpus

    root = Path(stdlib) if stdlib else default_stdlib_root()
    files = select_files(root, recipe.heldout_every, recipe.max_files)
    m = write_corpus(files, p.data_dir, root, settings={"max_files": recipe.max_files,
                                                        "heldout_every": recipe.heldout_every})
    say(f"[corpus] {m['files']} files ({m['train_files']} train, {m['heldout_files']} held out), "
        f"{m['chars'] / 1e6:.1f} M characters from {root} (Python {m['python']}); sha256 {m['sha256'][:16]}")


def _tokenizer(recipe, p, device, say=print, **_):
    from python_engine.train.corpus import read_corpus
    from python_engine.train.tokenizer import file_sha256, save_tokenizer, save_tokens, tokenize_corpus, train_tokenizer

    files = read_corpus(p.data_dir)
    tok = train_tokenizer(files, recipe.vocab_size)
    path = save_tokenizer(tok, p.data_dir)
    corpus = tokenize_corpus(tok, files)
    save_tokens(corpus, p.data_dir)
    manifest = json.loads((p.data_dir / "corpus-manifest.json").read_text())
    manifest.update(tokenizer_sha256=file_sha256(path), vocab_size=tok.get_vocab_size(),
                    train_tokens=int(len(corpus.train)), heldout_tokens=int(len(corpus.heldout)))
    (p.data_dir / "corpus-manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    say(f"[tokenizer] byte-level BPE, {tok.get_vocab_size()} tokens; corpus = {len(corpus.train) / 1e6:.2f} M train "
        f"+ {len(corpus.heldout) / 1e6:.2f} M held-out tokens")


def _target(recipe, p, device, experts="eager", say=print, **_):
    from python_engine.train.curves import plot_curves
    from python_engine.train.target_train import train_target
    from python_engine.train.tokenizer import load_tokens

    h = train_target(recipe, load_tokens(p.data_dir), p.data_dir, p.target_dir, device, experts)
    plot_curves(p.work_dir / "target-loss.png", f"demo target ({h['parameters'] / 1e6:.3g} M params, "
                f"{h['tokens_seen'] / 1e6:.3g} M tokens, {h['steps_run']} steps)",
                {"train": (h["train"]["step"], h["train"]["loss"]),
                 "held-out": (h["heldout"]["step"], h["heldout"]["loss"])})


def _drafter(recipe, p, device, say=print, **_):
    from python_engine.train.curves import plot_curves
    from python_engine.train.drafter_train import train_drafter
    from python_engine.train.tokenizer import load_tokens

    if not stage_done("target", p):
        raise KdtreeError(f"no trained target in {p.target_dir}: run the target stage first")
    h = train_drafter(recipe, load_tokens(p.data_dir), p.target_dir, p.drafter_dir, device)
    plot_curves(p.work_dir / "drafter-loss.png", "demo DFlash drafter: block loss, position-weighted "
                f"({h['parameters'] / 1e6:.3g} M params, {h['steps_run']} steps)",
                {"train": (h["train"]["step"], h["train"]["loss"]), "validation": (h["val"]["step"], h["val"]["loss"])})
    v = h["val"]
    plot_curves(p.work_dir / "drafter-acceptance.png", f"demo drafter: T=0 tau on {h['val_prompts']} held-out prompts",
                {f"DDTree budget {h['val_budget']} (engine rounds)": (v["step"], v["tau_budget"]),
                 "chain (engine rounds)": (v["step"], v["chain_tau"]),
                 "chain, mean over every anchor (overstates tau)": (v["step"], v["chain_tau_uniform"])},
                ylabel="tokens per target forward")


def _eval(recipe, p, device, say=print, **_):
    from python_engine.train.evaluate import evaluate, summary_markdown
    from python_engine.train.tokenizer import load_tokens

    for stage in ("target", "drafter"):
        if not stage_done(stage, p):
            raise KdtreeError(f"the {stage} stage has not finished in {p.work_dir}: run it first")
    partial_path = p.work_dir / "eval.partial.json"
    result = evaluate(recipe, load_tokens(p.data_dir), p.target_dir, p.drafter_dir, device,
                      partial=lambda done: partial_path.write_text(json.dumps(done, indent=1) + "\n"))
    partial_path.unlink(missing_ok=True)
    result["recipe"] = recipe.name
    manifest = json.loads((p.data_dir / "corpus-manifest.json").read_text())
    result["corpus"] = {k: manifest.get(k) for k in ("python", "files", "sha256", "tokenizer_sha256",
                                                     "train_tokens", "heldout_tokens")}
    for name in ("target", "drafter"):
        h = json.loads((p.work_dir / f"{name}-history.json").read_text())
        result[f"{name}_training"] = {k: h.get(k) for k in ("parameters", "steps_planned", "steps_run", "time_guard",
                                                            "seconds", "tokens_seen", "continuations",
                                                            "continuation_tokens", "generation_seconds", "saved_step",
                                                            "val_prompts", "val_budget", "saved_val")
                                     if k in h}
    p.eval_json.write_text(json.dumps(result, indent=1) + "\n")
    summary = summary_markdown(result)
    (p.work_dir / "summary.md").write_text(summary)
    say(summary)


def _export(recipe, p, device, say=print, **_):
    from python_engine.train.export import export_pair

    export_pair(p, say)


STAGE_FUNCTIONS = {"corpus": _corpus, "tokenizer": _tokenizer, "target": _target, "drafter": _drafter,
                   "eval": _eval, "export": _export}
