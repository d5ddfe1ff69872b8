"""`kdtree deploy`: put the local tree on a host, build and test it there, bring the
results back. One host per call of deploy_host(); parallel.py runs several.

The steps, each a plain function of the open Connection (see releases.py for why a cut
connection at any point leaves the previous release current and working):

    preflight   remote $HOME, Python >= 3.11, nvcc (when building)  - nothing written yet
    lock        <dir>/.deploy.lock, held until the end
    sync        stage (verified copies from current) + upload (one tar of what changed)
                + finalize (verify against the manifest, rename into releases/)
    env         the release's own environment, <release>/.venv (pyenv.py); what pip will
                install, and its size, is said before it starts; the step is timed
    build/test  in the new release, output streamed as `[host] line`
    check       the native engine's smoke check, on GPU hosts whose tree has it (steps.py)

Which of build/test/check run, and how, depends on the host (plan_steps()): on a host
without GPUs (gpus = 0) the build makes only what can run there (the emulated engine and
kernel tests), the tests are the Python suite, and the engine check is skipped. The deploy
says up front which steps run and which are skipped and why, and the summary repeats it.

A new release starts from the newest complete release (its unchanged files and its build/),
whether or not that one became current: a deploy that failed its tests leaves the closest
tree and build there is.
    fetch       <release>/results/ -> the deploy's work folder (also after a failed step)
    switch      `current` -> the new release, only when build and test passed
    prune       keep the newest N releases and current

Locally, everything lands in a work folder that replaces results/<host>/ only when the
deploy succeeded; a failed deploy's folder is kept elsewhere and named (results.py).

Test hooks: DeployOptions.hook(host, point) is called at each point named in POINTS,
so fault tests can cut the connection exactly there.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from fabric import Connection

from remote import channel, pyenv, releases
from remote.connection import connect
from remote.errors import RemoteError
from remote.inventory import HostConfig
from remote.lock import RemoteLock
from remote.manifest import Manifest, SyncPlan, build_manifest, check_symlinks, plan_sync
from remote.output import HostOutput, Reporter
from remote.paths import RemotePaths, resolve_paths
from remote.results import SUMMARY, ResultsFolder
from remote.shell import q
from remote.steps import EMULATED_TARGETS, ENGINE_CHECK_MODULE, RESULTS_SUBDIR, check_template, step_command
from python_engine.errors import KdtreeError

POINTS = ("connected", "preflight", "locked", "staged", "uploaded", "finalized", "env",
          "build", "test", "check", "fetched", "switch", "switched", "done")


@dataclass
class DeployOptions:
    project_root: Path
    results_root: Path  # results/<host>/ go under it
    work_root: Path | None = None  # where a deploy's files gather (results.py); None: the default
    build: bool = True
    test: bool = True
    dry_run: bool = False
    keep: int | None = None  # None: the host's `keep`
    wheels: Path | None = None
    accept_new_host_key: bool = False
    hook: Callable[[str, str], None] | None = None


@dataclass
class StepResult:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class HostResult:
    host: str
    ok: bool = False
    error: str | None = None
    release: str | None = None
    previous: str | None = None  # current before this deploy
    base: str | None = None  # the release this one was assembled from (the newest, current or not)
    switched: bool = False
    uploaded: int = 0
    upload_bytes: int = 0
    reused: int = 0  # unchanged files copied from the base release
    removed_releases: list[str] = field(default_factory=list)
    steps: list[StepResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # step -> why it does not run here
    results_dir: str | None = None  # results/<host>/, or the kept work folder of a failure
    plan: dict | None = None  # --dry-run: what would happen

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"


class StepFailed(RemoteError):
    """A build or test command exited non-zero (its output has been streamed already)."""


@dataclass(frozen=True)
class PlannedStep:
    name: str  # build, test or check
    runs: bool
    why: str  # how it runs on this host, or why it is skipped


def plan_steps(host: HostConfig, opts: DeployOptions) -> list[PlannedStep]:
    """build, test and check as they go on this host: each runs or is skipped, with why."""
    no_gpu = host.gpus == 0
    if not opts.build:
        build = PlannedStep("build", False, "--no-build")
    elif host.build:
        build = PlannedStep("build", True, "the host's build command")
    elif no_gpu:
        build = PlannedStep("build", True, f"{' '.join(EMULATED_TARGETS)} only, as gpus = 0: no GPU code could "
                                           "run there; set build = [...] to compile it anyway")
    else:
        build = PlannedStep("build", True, f"for {'sm_' + host.arch_str if host.arch else 'the GPUs it sees'}")
    if not opts.test:
        test = PlannedStep("test", False, "--no-test")
    elif host.test:
        test = PlannedStep("test", True, "the host's test command")
    else:
        test = PlannedStep("test", True, "the Python suite, the native engine emulated, as gpus = 0" if no_gpu
                           else "the native test programs on the GPU")
    if not opts.test:
        check = PlannedStep("check", False, "--no-test")
    elif host.check is not None and not host.check:
        check = PlannedStep("check", False, "check = [] for this host")
    elif check_template(host, opts.project_root) is not None:
        check = PlannedStep("check", True, "the host's check command" if host.check else
                            f"kdtree engine-check --emulated, as gpus = 0 with profile {host.profile}: the emulated "
                            "engine under that device's plans" if no_gpu else "kdtree engine-check")
    elif no_gpu:
        check = PlannedStep("check", False, "no GPU, as gpus = 0: the engine check runs the native engine on one "
                            "(a profile = \"rtx-pro-6000\" host rehearses it on the emulated engine)")
    else:
        check = PlannedStep("check", False, f"this tree has no {ENGINE_CHECK_MODULE}, `kdtree engine-check`")
    return [build, test, check]


def describe_plan(planned: list[PlannedStep]) -> str:
    runs = ", ".join(f"{p.name} ({p.why})" for p in planned if p.runs)
    skipped = "; ".join(f"{p.name} ({p.why})" for p in planned if not p.runs)
    return f"steps: sync, env{', ' + runs if runs else ''}" + (f"; skipped: {skipped}" if skipped else "")


def deploy_host(host: HostConfig, opts: DeployOptions, reporter: Reporter) -> HostResult:
    """Deploy to one host; never raises: the outcome, or the error, is in the result."""
    result = HostResult(host.name)
    folder = ResultsFolder(opts.results_root, host.name, opts.work_root)
    out = HostOutput(reporter, host.name, None)
    conn = None
    try:
        if not opts.dry_run:
            folder.check_replaceable()
            out.log_dir = folder.start() / "logs"
        check_symlinks(opts.project_root)  # a tree that cannot be a release: say so first
        conn = connect(host, accept_new_host_key=opts.accept_new_host_key)
        _hook(opts, host, "connected")
        deploy_over(conn, host, opts, out, result, folder.work)
        result.ok = True
    except KdtreeError as exc:
        result.error = str(exc)
    except Exception as exc:  # a bug, or an error we did not map: keep the host's report going
        result.error = f"unexpected {type(exc).__name__}: {exc}"
        if folder.work is not None:
            (folder.work / "traceback.txt").write_text(traceback.format_exc())
    finally:
        if conn is not None:
            conn.close()
    if result.error and result.switched:  # e.g. the link dropped while pruning
        result.error = f"current was switched to {result.release}, but then: {result.error}"
    if opts.dry_run:
        if result.error:
            out.note(f"FAILED: {result.error}")
        return result
    if folder.work is None:  # refused before anything was written
        out.note(f"FAILED: {result.error}")
        return result
    if result.error:
        result.error += f" (logs and fetched results: {folder.work})"
        out.note(f"FAILED: {result.error}")
        result.results_dir = str(folder.work)
        (folder.work / SUMMARY).write_text(result.to_json())
        return result
    result.results_dir = str(folder.final)
    (folder.work / SUMMARY).write_text(result.to_json())
    folder.commit()
    out.log_dir = folder.final / "logs"
    out.note(f"results in {folder.final}")
    return result


def _hook(opts: DeployOptions, host: HostConfig, point: str) -> None:
    if opts.hook is not None:
        opts.hook(host.name, point)


def preflight(conn: Connection, host: HostConfig, build: bool) -> tuple[RemotePaths, str]:
    """Resolve the remote paths and check Python (and nvcc when building) in one round
    trip; returns the paths and a one-line summary. Raises RemoteEnvError saying what to
    install."""
    paths = resolve_paths(conn, host)
    answers = pyenv.query_versions(conn, [paths.python] + ([paths.nvcc] if build else []))
    version = pyenv.python_version(host, paths.python, answers[0])
    summary = f"python {'.'.join(map(str, version))}"
    if build:
        nv = pyenv.nvcc_version(host, paths.nvcc, answers[1])
        summary += f", nvcc {nv[0]}.{nv[1]}"
    return paths, summary


def deploy_over(conn: Connection, host: HostConfig, opts: DeployOptions, out: HostOutput,
                result: HostResult, work: Path | None = None) -> None:
    """The deploy over an open connection; local files go to `work` (None: dry run)."""
    paths, summary = preflight(conn, host, opts.build)
    layout = paths.layout
    out.note(f"{host.describe_target()} -> {layout.dir} ({summary})")
    planned = plan_steps(host, opts)
    result.skipped = {p.name: p.why for p in planned if not p.runs}
    out.note(describe_plan(planned))
    _hook(opts, host, "preflight")
    if opts.dry_run:
        _dry_run(conn, host, opts, out, result, paths, build_manifest(opts.project_root))
        return
    lock = RemoteLock(conn, paths.python, layout.lock, wait_s=host.lock_timeout,
                      on_wait=lambda owner: out.note(f"waiting for the deploy lock held by {owner}"))
    with lock:
        _hook(opts, host, "locked")
        manifest = build_manifest(opts.project_root)  # the tree as it is once it is our turn
        state = releases.read_state(conn, paths.python, layout)
        previous = state.current if state.current_ok else None
        result.previous, result.base = previous, state.base
        plan = plan_sync(manifest, state.manifest if state.base else None)
        name = _sync(conn, host, opts, out, result, paths, manifest, plan, state.base, previous)
        release = layout.release(name)

        _hook(opts, host, "env")
        python = _env_step(conn, host, opts, out, result, paths, release)
        failure = None
        try:
            for step in (p.name for p in planned if p.runs):
                _hook(opts, host, step)
                _run_step(conn, host, out, result, paths, python, release, step, opts.project_root)
        except StepFailed as exc:
            failure = exc
        finally:
            _fetch(conn, host, opts, out, paths, release, work)
        if failure is not None:
            raise StepFailed(f"{failure}; current stays {previous or '(none)'}; the new release "
                             f"is kept at {release} for a look")
        _hook(opts, host, "switch")
        releases.switch(conn, paths.python, layout, name)
        result.switched = True
        _hook(opts, host, "switched")
        out.note(f"current -> {name}" + (f" (was {previous})" if previous else ""))
        keep = opts.keep if opts.keep is not None else host.keep
        result.removed_releases = releases.prune(conn, paths.python, layout, keep)
        if result.removed_releases:
            out.note(f"removed {len(result.removed_releases)} old release(s), keeping {keep}")
    _hook(opts, host, "done")


def _env_step(conn, host, opts, out, result, paths, release: str) -> str:
    """The release's environment (pyenv.setup_env), timed like the other steps."""
    started = time.monotonic()
    ok = False
    try:
        with out.step_sink("env") as sink:
            python = pyenv.setup_env(conn, host, paths.layout, paths.python, opts.project_root,
                                     opts.wheels, release, out.note, sink)
        ok = True
    finally:
        seconds = time.monotonic() - started
        result.steps.append(StepResult("env", ok, round(seconds, 3)))
    out.note(f"env: ok ({seconds:.1f}s)")
    return python


def _base_note(base: str | None, previous: str | None) -> str:
    if base is None:
        return "nothing"
    return base if base == previous else f"{base} (the newest release; current is {previous or 'none'})"


def _sync(conn, host, opts, out, result, paths, manifest: Manifest, plan: SyncPlan,
          base: str | None, previous: str | None) -> str:
    layout = paths.layout
    staged = releases.stage(conn, paths.python, layout, releases.release_name(manifest),
                            base, plan, manifest, host.carry)
    _hook(opts, host, "staged")
    send = sorted(set(plan.upload) | set(staged.missing))
    result.release = staged.name
    result.uploaded = len(send)
    result.upload_bytes = sum(manifest.files[p].size for p in send)
    result.reused = staged.reused
    out.note(f"sync {staged.name}: {len(send)} file(s) to upload "
             f"({result.upload_bytes / 1e6:.2f} MB), {result.reused} unchanged from "
             f"{_base_note(base, previous)}" + (f", carried {', '.join(staged.carried)}" if staged.carried else ""))
    meta = {"name": staged.name, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    releases.upload(conn, paths.python, staged.partial, opts.project_root, send, manifest,
                    manifest.to_json(**meta))
    _hook(opts, host, "uploaded")
    releases.finalize(conn, paths.python, layout, staged.name)
    _hook(opts, host, "finalized")
    return staged.name


def _run_step(conn, host, out, result, paths, python, release, step, project_root) -> None:
    command = step_command(host, paths, python, release, step, project_root)
    out.note(f"{step}: {command.split(' && exec ', 1)[-1]}")
    started = time.monotonic()
    with out.step_sink(step) as sink:
        code = channel.stream(conn, command, on_line=sink, what=f"the {step} step")
    seconds = time.monotonic() - started
    result.steps.append(StepResult(step, code == 0, round(seconds, 3), f"exit {code}"))
    if code != 0:
        raise StepFailed(f"{step} failed (exit {code}) after {seconds:.1f}s; its output is in "
                         f"logs/{step}.log")
    out.note(f"{step}: ok ({seconds:.1f}s)")


def _fetch(conn, host, opts, out, paths, release, dest: Path) -> None:
    """Bring <release>/results/ home; a lost connection here must not hide the step error."""
    try:
        warnings = releases.fetch_dir(conn, paths.python, f"{release}/{RESULTS_SUBDIR}", dest)
    except RemoteError as exc:
        out.note(f"could not fetch the results: {exc}")
        return
    for w in warnings:
        out.note(f"results: {w}")
    _hook(opts, host, "fetched")


def _dry_run(conn, host, opts, out, result, paths, manifest: Manifest) -> None:
    layout = paths.layout
    exists = channel.run(conn, f"test -d {q(layout.dir)}", what="looking at the remote dir").exit_code == 0
    state = releases.read_state(conn, paths.python, layout) if exists else None
    previous = state.current if state and state.current_ok else None
    base = state.base if state else None
    plan = plan_sync(manifest, state.manifest if base else None)
    release = layout.release(releases.release_name(manifest))
    python = pyenv.release_python(release) if host.venv else paths.python
    commands = {p.name: step_command(host, paths, python, release, p.name, opts.project_root)
                for p in plan_steps(host, opts) if p.runs}
    env = pyenv.plan_env(conn, host, layout, paths.python, opts.project_root, opts.wheels)
    result.previous, result.base = previous, base
    result.plan = {
        "upload": plan.upload, "upload_bytes": plan.upload_bytes(manifest),
        "unchanged": len(plan.reuse), "dropped": plan.removed, "commands": commands,
        "env": env.describe(), "env_download_bytes": env.download_bytes,
    }
    out.note(f"dry run: would upload {len(plan.upload)} file(s) "
             f"({plan.upload_bytes(manifest) / 1e6:.2f} MB), reuse {len(plan.reuse)} from "
             f"{_base_note(base, previous)}, drop {len(plan.removed)}")
    out.note(f"would set up the environment: {env.describe()}")
    for path in plan.upload[:20]:
        out.note(f"  upload {path}")
    if len(plan.upload) > 20:
        out.note(f"  ... and {len(plan.upload) - 20} more")
    for step, command in commands.items():
        out.note(f"would run {step}: {command.split(' && exec ', 1)[-1]}")
    out.note("dry run: nothing was changed")
