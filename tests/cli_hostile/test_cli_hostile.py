"""Hostile input for the command line: each case feeds a value a user could type or a file a
user could hand over, and names what must come out. The rule for all of them: a clear
error naming what is wrong and where (option, file, key), exit status 1, never a
traceback, nothing allocated in proportion to a bad number."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from native_toolchain import needs_toolchain
from typer.testing import CliRunner

from kdtree_cli.app import app
from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
from python_engine.demo.engines import Generated
from python_engine.demo.runner import DemoResult
from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT

ROOT = PROJECT_ROOT
PAIR = ["--model", str(DEFAULT_TARGET), "--drafter", str(DEFAULT_DRAFTER)]
CHILD_MEMORY_LIMIT = 2 << 30  # a refused run loads the tiny pair and stops: far below this
NAN, INF = float("nan"), float("inf")
runner = CliRunner()


def kdtree_measured(*args: str, env: dict | None = None, timeout: int = 300) -> tuple[int, str, str, int]:
    """`kdtree ARGS` in a child: exit status, stdout, stderr and its peak memory (bytes)."""
    proc = subprocess.Popen([sys.executable, "-m", "kdtree_cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
    code = proc.returncode if usage is None else os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss * 1024 if usage is not None else 0
    return code, out, err, peak


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), err[-3000:]
    return lines[-1]


# ------------------------------------------------------------------------- run / demo values
@pytest.mark.parametrize("args,option", [
    (["run", *PAIR, "--prompt-ids", "5,6,7", "--max-tokens", "8", "--budget", "100000"], "--budget 100000"),
    (["run", *PAIR, "--prompt-ids", "5,6,7", "--max-tokens", "8", "--block-size", "1000000"],
     "--block-size 1000000"),
    (["demo", "--device", "cpu", "--max-tokens", "8", "--budget", "100000"], "--budget 100000"),
], ids=["run_budget_100000", "run_block_size_1000000", "demo_budget_100000"])
def test_a_round_that_cannot_fit_is_refused_up_front_with_the_limit(args, option):
    status, _, err, peak = kdtree_measured(*args)
    assert status == 1
    line = one_error_line(err)
    assert line.startswith(f"error: {option}: one decode round would need about "), line
    assert re.search(r"has [\d.]+ [GM]B free .* the largest (budget|block size) that fits is \d+", line), line
    assert peak < CHILD_MEMORY_LIMIT, f"the refused run still took {peak / 2**30:.1f} GiB"


@pytest.mark.parametrize("args", [
    ["run", *PAIR, "--prompt-ids", "5,6,7", "--max-tokens", "8", "--budget", "0"],
    ["demo", "--device", "cpu", "--max-tokens", "8", "--budget", "0"],
], ids=["run_budget_0", "demo_budget_0"])
def test_budget_zero_is_refused_and_says_what_to_use(args):
    status, _, err, _ = kdtree_measured(*args)
    assert status == 1
    line = one_error_line(err)
    assert "error: --budget 0: DDTree needs a node budget >= 1" in line and "kdtree run --ar" in line


# ------------------------------------------------------------------------- config.json
def model_copy(tmp_path: Path, source: Path, change) -> Path:
    """A copy of a model directory (weights linked) whose config.json is `change(config)`,
    or the text (or bytes) `change` returns when it returns some."""
    out = tmp_path / source.name
    out.mkdir()
    for f in source.iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f.resolve())
    config = json.loads((source / "config.json").read_text())
    changed = change(config)
    if isinstance(changed, bytes):
        (out / "config.json").write_bytes(changed)
    else:
        (out / "config.json").write_text(changed if isinstance(changed, str) else json.dumps(config, indent=1))
    return out


def setting(path: str, value):
    """change() for model_copy: set a key (a.b for nested) to value."""
    def change(config):
        *outer, last = path.split(".")
        node = config
        for key in outer:
            node = node[key]
        node[last] = value
    return change


TARGET_CASES = [
    ("rms_norm_eps_NaN", setting("rms_norm_eps", NAN), "rms_norm_eps must be a finite number, got nan"),
    ("rms_norm_eps_Infinity", setting("rms_norm_eps", INF), "rms_norm_eps must be a finite number, got inf"),
    ("rms_norm_eps_1e400", lambda c: json.dumps(c).replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e400'),
     "rms_norm_eps must be a finite number"),
    ("rms_norm_eps_zero", setting("rms_norm_eps", 0), "rms_norm_eps must be > 0, got 0"),
    ("rms_norm_eps_negative", setting("rms_norm_eps", -1e-6), "rms_norm_eps must be > 0"),
    ("rms_norm_eps_a_string", setting("rms_norm_eps", "1e-6"), "rms_norm_eps must be a number, got '1e-6'"),
    ("rms_norm_eps_true", setting("rms_norm_eps", True), "rms_norm_eps must be a number, got True"),
    ("routed_scaling_factor_NaN", setting("routed_scaling_factor", NAN), "routed_scaling_factor must be a finite"),
    ("routed_scaling_factor_a_list", setting("routed_scaling_factor", [2.5]),
     "routed_scaling_factor must be a number"),
    ("rope_theta_negative", setting("rope_parameters.rope_theta", -10000.0), "rope_theta must be > 0"),
    ("rope_factor_zero", setting("rope_parameters.factor", 0), "rope factor must be > 0"),
    ("rope_beta_fast_NaN", setting("rope_parameters.beta_fast", NAN), "rope beta_fast must be a finite number"),
    ("rope_mscale_a_string", setting("rope_parameters.mscale", "1"), "rope mscale must be a number"),
    ("rope_attention_factor_Infinity", setting("rope_parameters.attention_factor", INF),
     "rope attention_factor must be a finite number"),
    ("rope_original_max_positions_a_float", setting("rope_parameters.original_max_position_embeddings", 512.5),
     "original_max_position_embeddings must be an integer"),
    ("max_position_embeddings_a_string", setting("max_position_embeddings", "2048"),
     "max_position_embeddings must be an integer >= 1, got '2048'"),
    ("n_group_a_string", setting("n_group", "4"), "n_group must be an integer >= 1, got '4'"),
    ("bos_token_id_a_string", setting("bos_token_id", "0"), "bos_token_id must be an integer >= 0"),
    ("eos_token_id_list_with_a_string", setting("eos_token_id", [0, "x"]), "eos_token_id must be an integer >= 0"),
    ("vocab_size_integer_of_5000_digits", lambda c: json.dumps(c).replace('"vocab_size": 4096',
                                                                          '"vocab_size": ' + "9" * 5000),
     "cannot be read as JSON"),
    ("json_nested_100000_deep", lambda c: "[" * 100_000 + "]" * 100_000, "cannot be read as JSON"),
    ("not_utf8", lambda c: json.dumps(c).encode().replace(b"deepseek_v3", b"deepseek\xff"), "is not UTF-8 text"),
]


@pytest.mark.parametrize("case,change,message", TARGET_CASES, ids=[c[0] for c in TARGET_CASES])
def test_bad_target_config_is_an_error_naming_the_file_and_key(tmp_path, case, change, message):
    model = model_copy(tmp_path, DEFAULT_TARGET, change)
    result = runner.invoke(app, ["run", "--model", str(model), "--ar", "--prompt-ids", "1,2", "--max-tokens", "2"])
    assert isinstance(result.exception, KdtreeError), result.output
    text = str(result.exception)
    assert str(model / "config.json") in text and message in text, text


DRAFTER_CASES = [
    ("rms_norm_eps_NaN", setting("rms_norm_eps", NAN), "rms_norm_eps must be a finite number, got nan"),
    ("rms_norm_eps_negative", setting("rms_norm_eps", -1.0), "rms_norm_eps must be > 0"),
    ("output_multiplier_zero", setting("output_multiplier", 0), "output_multiplier must be > 0"),
    ("input_embedding_scale_a_string", setting("input_embedding_scale", "1"),
     "input_embedding_scale must be a number"),
    ("final_logit_softcapping_negative", setting("final_logit_softcapping", -30.0),
     "final_logit_softcapping must be > 0"),
    ("block_size_a_float", setting("block_size", 16.0), "block_size must be an integer >= 1, got 16.0"),
    ("rope_theta_Infinity", setting("rope_theta", INF), "rope_theta must be a finite number"),
]


@pytest.mark.parametrize("case,change,message", DRAFTER_CASES, ids=[c[0] for c in DRAFTER_CASES])
def test_bad_drafter_config_is_an_error_naming_the_file_and_key(tmp_path, case, change, message):
    drafter = model_copy(tmp_path, DEFAULT_DRAFTER, change)
    result = runner.invoke(app, ["run", "--model", str(DEFAULT_TARGET), "--drafter", str(drafter),
                                 "--prompt-ids", "1,2", "--max-tokens", "2"])
    assert isinstance(result.exception, KdtreeError), result.output
    text = str(result.exception)
    assert str(drafter / "config.json") in text and message in text, text


def test_nan_rms_norm_eps_stops_the_run_with_one_line(tmp_path):
    """Before: the run went ahead and printed garbage."""
    model = model_copy(tmp_path, DEFAULT_TARGET, setting("rms_norm_eps", NAN))
    status, out, err, _ = kdtree_measured("run", "--model", str(model), "--ar", "--prompt-ids", "1,2")
    assert status == 1 and out == ""
    assert one_error_line(err) == (f"error: {model / 'config.json'}: rms_norm_eps must be a finite "
                                   "number, got nan")


# ------------------------------------------------------------------------- prompts, threads
def test_run_and_demo_tokenize_a_prompt_the_same_way():
    prompt = "def parse(line):\n    "
    status, out, err, _ = kdtree_measured("demo", "--device", "cpu", "--json", "--prompt", prompt,
                                          "--max-tokens", "24", "--ignore-eos")
    assert status == 0, err[-2000:]
    demo = json.loads(out)
    from python_engine.decode.prompts import TextCodec

    assert demo["prompt_ids"] == TextCodec(DEFAULT_TARGET).encode(prompt)
    assert demo["prompt_ids"][0] == 0, "the demo target's BOS comes first"
    status, out, err, _ = kdtree_measured("run", *PAIR, "--device", "cpu", "--prompt", prompt,
                                          "--max-tokens", "24", "--ignore-eos")
    assert status == 0, err[-2000:]
    assert f"request 0 (24 tokens, " in out and demo["text"] in out, (out, demo["text"])


@pytest.mark.parametrize("settings,expected", [
    (None, [0, 586, 525]),  # no tokenizer_config.json: the config's BOS
    ({"add_bos_token": True}, [0, 586, 525]),
    ({"add_bos_token": False}, [586, 525]),
], ids=["no_tokenizer_config", "add_bos_token_true", "add_bos_token_false"])
def test_the_text_prompt_rule(tmp_path, settings, expected):
    from python_engine.decode.prompts import TextCodec

    model = model_copy(tmp_path, DEFAULT_TARGET, lambda c: None)
    (model / "tokenizer_config.json").unlink()
    if settings is not None:
        (model / "tokenizer_config.json").write_text(json.dumps(settings))
    codec = TextCodec(model)
    assert codec.tokenizer.encode("import os").ids == [586, 525]
    assert codec.encode("import os") == expected
    assert codec.encode("<|endoftext|>import os") == [0, 586, 525], "a BOS already there is not doubled"


def test_a_bad_add_bos_token_names_the_file(tmp_path):
    from python_engine.decode.prompts import TextCodec

    model = model_copy(tmp_path, DEFAULT_TARGET, lambda c: None)
    (model / "tokenizer_config.json").unlink()
    (model / "tokenizer_config.json").write_text('{"add_bos_token": "yes"}')
    with pytest.raises(KdtreeError, match=r"tokenizer_config.json: add_bos_token must be true or false"):
        TextCodec(model).encode("import os")


@pytest.mark.parametrize("command", ["run", "demo"])
@pytest.mark.parametrize("extra,threads", [([], 1), (["--threads", "3"], 3)], ids=["default", "threads_3"])
def test_user_commands_run_torch_on_one_thread_unless_told(monkeypatch, command, extra, threads):
    seen = {}
    before = torch.get_num_threads()

    def record(*args, **kwargs):
        seen["threads"] = torch.get_num_threads()
        raise KdtreeError("stop here")

    monkeypatch.setattr("python_engine.run.run_command", record)
    monkeypatch.setattr("python_engine.demo.report.run_with_metrics", record)
    args = ["run", "--model", "m", "--ar", "--prompt-ids", "1"] if command == "run" else ["demo"]
    try:
        torch.set_num_threads(2)
        result = runner.invoke(app, [*args, *extra])
    finally:
        torch.set_num_threads(before)
    assert str(result.exception) == "stop here", result.output
    assert seen["threads"] == threads


def test_threads_zero_is_refused():
    result = runner.invoke(app, ["demo", "--threads", "0"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "Invalid value for '--threads'" in result.output and "greater than or equal to 1" in result.output


# ------------------------------------------------------------------------- demo's identity check
def fake_result(ar_tokens: list[int], temperature: float = 0.0) -> DemoResult:
    ddtree = Generated([5, 6, 7, 8], 2.0, 3, 0.1, 0.01, 2)
    ar = Generated(ar_tokens, 1.0, 3, 0.2, 0.01, 3)
    return DemoResult("torch", "cpu", "float32", "p", [0, 1], "text", "ar text", ddtree, ar, 32, temperature)


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_demo_exits_non_zero_when_ddtree_differs_from_ar_at_temperature_0(monkeypatch, json_out):
    monkeypatch.setattr("python_engine.demo.report.run_with_metrics", lambda *a, **k: fake_result([5, 6, 9, 8]))
    result = runner.invoke(app, ["demo", *(["--json"] if json_out else [])])
    assert result.exit_code != 0
    assert isinstance(result.exception, KdtreeError)
    assert "differs from AR's at temperature 0 (first difference at token 2)" in str(result.exception)
    assert ("DIFFERS from AR" in result.output) if not json_out else '"identical_to_ar": false' in result.output


def test_demo_exits_zero_when_identical_or_sampling(monkeypatch):
    monkeypatch.setattr("python_engine.demo.report.run_with_metrics", lambda *a, **k: fake_result([5, 6, 7, 8]))
    assert runner.invoke(app, ["demo"]).exit_code == 0
    monkeypatch.setattr("python_engine.demo.report.run_with_metrics",
                        lambda *a, **k: fake_result([5, 6, 9, 8], temperature=0.7))
    assert runner.invoke(app, ["demo", "--temperature", "0.7"]).exit_code == 0


# ------------------------------------------------------------------------- kdtree build
@needs_toolchain
@pytest.mark.parametrize("where", ["under_proc", "under_a_file"])
def test_build_dir_that_cannot_be_created_is_a_clear_error(tmp_path, where):
    if where == "under_proc":
        build_dir = Path("/proc/kdtree-build-test")
    else:
        (tmp_path / "a-file").write_text("x")
        build_dir = tmp_path / "a-file" / "build"
    status, _, err, _ = kdtree_measured("build", "--build-dir", str(build_dir), "--dry-run")
    assert status == 1
    line = one_error_line(err)
    assert f"error: build directory {build_dir}/release cannot be created or written" in line, line
    assert "--build-dir DIR where you can write" in line


@needs_toolchain
def test_an_unusable_cuda_home_is_said_without_verbose(tmp_path):
    env = dict(os.environ, CUDA_HOME=str(tmp_path / "no-toolkit"))
    status, out, err, _ = kdtree_measured("build", "--build-dir", str(tmp_path / "b"), "--list", env=env)
    assert status == 0, err
    assert f"warning: {tmp_path / 'no-toolkit'} ($CUDA_HOME): no bin/nvcc; using " in err, err
