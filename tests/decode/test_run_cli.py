"""`kdtree run` as a user meets it: outputs equal to the decode loops', well-formed metrics
events, text prompts through tokenizer.json, and clear errors on bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from kdtree_cli.app import app
from python_engine.decode.ar import ar_generate
from python_engine.decode.ddtree_loop import ddtree_generate
from python_engine.events import iter_events
from python_engine.model.drafter import load_drafter
from python_engine.model.target_loader import load_target

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["run", *map(str, args)], env={"COLUMNS": "200"})


def kdtree(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdtree_cli", "run", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_run_prints_the_loops_tokens_and_writes_valid_metrics(decode_models, tmp_path, seed):
    tdir, ddir = decode_models["no_q_lora"]
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 96, (n,), generator=g).tolist() for n in (3, 9)]
    metrics = tmp_path / "m.jsonl"
    result = invoke("--model", tdir, "--drafter", ddir, "--budget", 12, "--max-tokens", 10,
                    "--ignore-eos", "--metrics", metrics,
                    *[x for p in prompts for x in ("--prompt-ids", ",".join(map(str, p)))])
    assert result.exit_code == 0, result.output
    target = load_target(tdir)
    drafter = load_drafter(ddir, target)
    for r, p in enumerate(prompts):
        expected = ddtree_generate(target, drafter, p, 10, budget=12).tokens
        assert expected == ar_generate(target, p, 10).tokens
        assert " ".join(map(str, expected)) in result.output
    assert "summary" in result.output and "tau" in result.output and "tokens/s" in result.output

    parsed = list(iter_events(metrics.read_text().splitlines()))
    assert all(p.warning is None for p in parsed)
    events = [p.event for p in parsed]
    assert events[0]["event"] == "run_start" and events[-1]["event"] == "run_end"
    assert events[0]["engine"] == "torch" and events[0]["block_size"] == 6 and events[0]["budget"] == 12
    rounds = [e for e in events if e["event"] == "round"]
    assert {e["request"] for e in rounds} == {0, 1}
    assert events[-1]["rounds"] == len(rounds) and events[-1]["tokens"] == 20
    tau = sum(e["accept_len"] for e in rounds) / len(rounds)
    assert events[-1]["tau"] == pytest.approx(tau, abs=1e-4)
    # tokens so far grow by accept_len per round within a request
    for req in (0, 1):
        rs = [e for e in rounds if e["request"] == req]
        assert rs[-1]["tokens"] == 10
        end = [e for e in events if e["event"] == "request_end" and e["request"] == req]
        assert len(end) == 1 and (end[0]["tokens"], end[0]["reason"], end[0]["rounds"]) == (10, "length", len(rs))
        assert events.index(end[0]) > events.index(rs[-1])
        assert 0 < end[0]["ttft_s"] <= end[0]["e2e_s"]


def test_a_request_its_prefill_ends_has_a_request_end_and_no_round(decode_models, tmp_path, seed):
    """--max-tokens 1: the prefill's token is the whole answer; no round, one request_end."""
    tdir, _ = decode_models["no_q_lora"]
    prompt = torch.randint(0, 96, (5,), generator=torch.Generator().manual_seed(seed)).tolist()
    metrics = tmp_path / "m.jsonl"
    result = invoke("--model", tdir, "--ar", "--max-tokens", 1, "--ignore-eos", "--metrics", metrics,
                    "--prompt-ids", ",".join(map(str, prompt)))
    assert result.exit_code == 0, result.output
    events = [p.event for p in iter_events(metrics.read_text().splitlines())]
    assert [e["event"] for e in events] == ["run_start", "request_end", "run_end"]
    assert (events[1]["request"], events[1]["tokens"], events[1]["reason"], events[1]["rounds"]) == (0, 1, "length", 0)


def test_text_prompt_through_tokenizer_and_metrics_on_stdout(decode_models, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tdir, _ = decode_models["groups_yarn"]
    model_dir = tmp_path / "with-tokenizer"
    model_dir.mkdir()
    for f in tdir.iterdir():
        (model_dir / f.name).symlink_to(f)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(96)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(model_dir / "tokenizer.json"))

    proc = kdtree("--model", model_dir, "--ar", "--prompt", "w5 w17 w3", "--max-tokens", 6,
                  "--ignore-eos", "--metrics", "-", "--seed", 3, "--temperature", 0.8)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # stdout: events only
    assert [e["event"] for e in events][0] == "run_start" and events[-1]["event"] == "run_end"
    target = load_target(model_dir)
    assert target.cfg.bos_token_id == 0  # the text rule: the model's BOS, then the text's tokens
    gen = ar_generate(target, [0, 5, 17, 3], 6, 0.8, torch.Generator().manual_seed(3))
    assert " ".join(f"w{t}" for t in gen.tokens) in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--prompt-ids", "1,2"], "DDTree needs --drafter"),
    (["--ar"], "give at least one --prompt"),
    (["--ar", "--prompt-ids", "1,500"], r"outside the vocab 0\.\.95"),
    (["--ar", "--prompt-ids", "1,two"], "comma-separated integers"),
    (["--ar", "--prompt", "hello"], "tokenizer.json .not found"),
    (["--ar", "--prompt-ids", "1", "--dtype", "float8"], "dtype 'float8' is not supported"),
    (["--ar", "--prompt-ids", "1", "--device", "tpu"], "not a torch device"),
    (["--ar", "--prompt-ids", "1", "--max-tokens", "0"], "max tokens must be >= 1"),
    (["--prompt-ids", "1", "--engine", "warp-drive"], "choose torch, native or auto"),
    (["--prompt-ids", "1", "--engine", "native", "--device", "cpu"], "runs on CUDA devices"),
])
def test_bad_input_fails_with_a_clear_message(decode_models, args, message, tmp_path):
    """In-process (fast): the KdtreeError the CLI entry point turns into 'error: ...'."""
    from python_engine.errors import KdtreeError

    tdir, _ = decode_models["no_q_lora"]
    metrics = tmp_path / "m.jsonl"
    result = invoke("--model", tdir, "--metrics", metrics, *args)
    assert isinstance(result.exception, KdtreeError), result.output
    assert re.search(message, str(result.exception)), str(result.exception)
    if metrics.exists() and metrics.read_text():
        assert json.loads(metrics.read_text().splitlines()[-1])["event"] == "error"


def test_error_reaches_the_user_as_one_line_and_exit_1(tmp_path):
    metrics = tmp_path / "m.jsonl"
    proc = kdtree("--model", tmp_path / "missing", "--ar", "--prompt-ids", "1", "--metrics", metrics)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error:") and "does not exist" in proc.stderr
    event = json.loads(metrics.read_text().splitlines()[-1])
    assert event["event"] == "error" and "does not exist" in event["message"]
