"""kdtree's helper that runs ON the remote host, with the host's Python and only its
standard library. releases.py sends this file's source as `python -I -S -c SOURCE COMMAND JSON`
(nothing is installed there), so a deploy needs no tool beyond a Python on the remote.

Layout under the host's directory D:

    D/current -> releases/<name>       the release in use (a relative symlink)
    D/releases/<name>/                 complete releases, each with .kdtree-release.json
    D/releases/<name>/.venv -> ../../envs/<key>   its Python environment (venv = true)
    D/envs/<key>/                      environments, named by the hash of what they hold
    D/runs/<run id>/                   detached runs (kdtree tui --host): metrics.jsonl,
                                       run.log, pid (the watcher), exit_status
    D/releases/.partial-<name>/        a release being assembled (never used, removed
                                       by the next deploy)
    D/.deploy.lock (+ .owner)          the deploy lock

Commands print one JSON object on stdout (`pack` prints a tar stream instead; `lock`
prints status lines). Errors go to stderr with exit status 2.
"""

import hashlib
import json
import os
import shutil
import sys
import tarfile
import time

MANIFEST = ".kdtree-release.json"
PARTIAL = ".partial-"


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _safe_rel(path):
    """A relative path inside the release: no absolute paths, no '..', no empty parts."""
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("unsafe path in request: %r" % path)
    return path


def _releases(d):
    return os.path.join(d, "releases")


def _current_name(d):
    try:
        target = os.readlink(os.path.join(d, "current"))
    except OSError:
        return None
    return os.path.basename(target.rstrip("/"))


def _read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _complete(rel):
    if not os.path.isdir(rel):
        return []
    return sorted(
        n for n in os.listdir(rel)
        if not n.startswith(".") and os.path.isfile(os.path.join(rel, n, MANIFEST))
    )


def cmd_state(a):
    """The releases, and the base of the next one: the newest complete release, current or
    not (a deploy whose build or tests failed leaves a complete release that never became
    current; its files and build are still the closest to what comes next)."""
    d = a["dir"]
    rel = _releases(d)
    cur = _current_name(d)
    cur_dir = os.path.join(rel, cur) if cur else None
    cur_ok = bool(cur_dir) and os.path.isfile(os.path.join(cur_dir, MANIFEST))
    partials = sorted(n for n in os.listdir(rel) if n.startswith(PARTIAL)) if os.path.isdir(rel) else []
    complete = _complete(rel)  # names sort by creation time
    base = complete[-1] if complete else None
    _emit({
        "current": cur,
        "current_ok": cur_ok,
        "releases": complete,
        "partials": partials,
        "base": base,
        "manifest": _read_json(os.path.join(rel, base, MANIFEST)) if base and a.get("manifest") else None,
    })


def _copy_verified(src, dst, sha256, mode):
    """Copy src to dst in one pass, hashing as it goes; keep src's times (so a build
    carried over sees the file unchanged). False, and no dst, when the hash differs."""
    h = hashlib.sha256()
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            for block in iter(lambda: fin.read(1 << 20), b""):
                h.update(block)
                fout.write(block)
    except BaseException:
        os.unlink(dst)
        raise
    if h.hexdigest() != sha256:
        os.unlink(dst)
        return False
    st = os.stat(src)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.chmod(dst, mode)
    return True


def cmd_stage(a):
    """Start .partial-<name> (with an empty results/): drop stale partials, copy the
    unchanged files from the previous release, checking each against its manifest hash on
    the way (a copy, never a hard link: nothing the new release's steps write can reach
    the live release), and copy the carried folders. Files whose copy fails its hash (or
    that are gone) are reported back as missing: the local side uploads them."""
    a = json.load(sys.stdin)
    rel = _releases(a["dir"])
    os.makedirs(rel, exist_ok=True)
    for n in os.listdir(rel):
        if n.startswith(PARTIAL):
            shutil.rmtree(os.path.join(rel, n), ignore_errors=True)
    name = a["name"]
    suffix = 1
    while os.path.lexists(os.path.join(rel, name)):
        name = "%s-%d" % (a["name"], suffix)
        suffix += 1
    part = os.path.join(rel, PARTIAL + name)
    os.mkdir(part)
    os.mkdir(os.path.join(part, "results"))  # where the steps leave reports (fetched home)
    prev = os.path.join(rel, a["prev"]) if a.get("prev") else None
    reused = 0
    missing = []
    for path, sha256, mode in a.get("reuse", []):
        src = os.path.join(prev, _safe_rel(path))
        dst = os.path.join(part, path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            ok = not os.path.islink(src) and _copy_verified(src, dst, sha256, mode)
        except OSError:
            ok = False
        if ok:
            reused += 1
        else:
            missing.append(path)
    carried = []
    for folder in a.get("carry", []):
        src = os.path.join(prev, _safe_rel(folder)) if prev else None
        if src and os.path.isdir(src) and not os.path.islink(src):
            shutil.copytree(src, os.path.join(part, folder), symlinks=True)
            carried.append(folder)
    _emit({"name": name, "partial": part, "reused": reused, "missing": missing, "carried": carried})


def _extract_member(tf, member, dest):
    if hasattr(tarfile, "data_filter"):
        tf.extract(member, dest, filter="data")
        return
    _safe_rel(member.name)  # Pythons before 3.11.4: check by hand
    if member.issym() and (member.linkname.startswith("/") or ".." in member.linkname.split("/")):
        raise ValueError("link leaves the release: %s -> %s" % (member.name, member.linkname))
    if not (member.isfile() or member.isdir() or member.issym()):
        raise ValueError("unsupported member type: %s" % member.name)
    tf.extract(member, dest)


def cmd_extract(a):
    """Unpack a tar stream from stdin into dest. Regular files get the remote's current
    time as mtime, so a build carried over from the previous release rebuilds what
    changed even when the two machines' clocks disagree."""
    dest = a["dest"]
    now = time.time()
    count = 0
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tf:
        for member in tf:
            _extract_member(tf, member, dest)
            if member.isfile():
                os.utime(os.path.join(dest, member.name), (now, now))
            count += 1
    _emit({"extracted": count})


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cmd_finalize(a):
    """Check every file of the partial release against its manifest (content hash, or
    link target), then rename it into place."""
    rel = _releases(a["dir"])
    part = os.path.join(rel, PARTIAL + a["name"])
    manifest = _read_json(os.path.join(part, MANIFEST))
    if not manifest:
        raise ValueError("the partial release has no readable manifest")
    bad = []
    for path, e in manifest["files"].items():
        full = os.path.join(part, path)
        try:
            if e.get("link") is not None:
                ok = os.readlink(full) == e["link"]
            else:
                ok = (os.path.isfile(full) and not os.path.islink(full)
                      and os.stat(full).st_size == e["size"] and _sha256(full) == e["sha256"])
        except OSError:
            ok = False
        if not ok:
            bad.append(path)
    if bad:
        raise ValueError("incomplete release, %d file(s) missing or wrong: %s" % (len(bad), ", ".join(bad[:10])))
    final = os.path.join(rel, a["name"])
    os.rename(part, final)
    _emit({"release": final, "files": len(manifest["files"])})


def cmd_switch(a):
    """Point current at releases/<name> atomically: a new symlink renamed over the old."""
    d = a["dir"]
    target = "releases/" + a["name"]
    if not os.path.isfile(os.path.join(d, target, MANIFEST)):
        raise ValueError("release %s is not complete" % a["name"])
    previous = _current_name(d)
    tmp = os.path.join(d, ".current.tmp-%d" % os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, os.path.join(d, "current"))
    _emit({"previous": previous, "current": a["name"]})


def cmd_prune(a):
    """Keep the newest `keep` complete releases and the current one; drop the rest, then
    the environments that no release left (complete or partial) links to."""
    d = a["dir"]
    rel = _releases(d)
    names = _complete(rel)
    keep = set(names[-int(a["keep"]):]) | {_current_name(d)}
    removed = [n for n in names if n not in keep]
    for n in removed:
        shutil.rmtree(os.path.join(rel, n), ignore_errors=True)
    envs = os.path.join(d, "envs")
    used = set()
    for n in os.listdir(rel) if os.path.isdir(rel) else []:
        try:
            used.add(os.path.basename(os.readlink(os.path.join(rel, n, ".venv")).rstrip("/")))
        except OSError:
            pass
    dropped_envs = sorted(e for e in os.listdir(envs) if e not in used) if os.path.isdir(envs) else []
    for e in dropped_envs:
        shutil.rmtree(os.path.join(envs, e), ignore_errors=True)
    _emit({"removed": removed, "kept": sorted(n for n in names if n in keep),
           "removed_envs": dropped_envs})


def cmd_parent_env(a):
    """Run by the host's Python, with `site` (it sets sys.prefix in a venv): when it is itself a virtual environment (the H200 image's
    /opt/torch/.venv, a conda env), a venv made from it with --system-site-packages sees
    the base interpreter's packages, not its own. Make them visible with a .pth file in the
    new venv; prints the folders added (none when the host's Python is not a venv)."""
    import site

    added = []
    if sys.prefix != sys.base_prefix:
        added = [p for p in site.getsitepackages() if os.path.isdir(p)]
        version = "python%d.%d" % sys.version_info[:2]
        target = os.path.join(a["venv"], "lib", version, "site-packages", "kdtree-parent-env.pth")
        with open(target, "w") as fh:
            fh.write("".join(p + "\n" for p in added))
    _emit({"added": added})


def _download_size(url):
    """Bytes pip will fetch for url: a local file's size, else the server's Content-Length
    (a HEAD request); None when neither says."""
    import urllib.parse
    import urllib.request

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        try:
            return os.path.getsize(urllib.request.url2pathname(parsed.path))
        except OSError:
            return None
    if parsed.scheme in ("http", "https"):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15) as resp:
                length = resp.headers.get("Content-Length")
                return int(length) if length else None
        except (OSError, ValueError):
            return None
    return None


def cmd_install_plan(a):
    """What `pip install` of a["requirements"] with the pip argv a["pip"] (plus a["options"],
    in the environment plus a["env"]) would download, without installing: pip's own
    resolution (--dry-run --report), each package with its size. Prints
    {"packages": [{name, version, bytes}]} or {"error": why}."""
    import subprocess

    # one retry, 20 s per connection: an offline host answers "unknown" in under a minute
    argv = list(a["pip"]) + ["install", "--dry-run", "--quiet", "--disable-pip-version-check", "--no-input",
                             "--retries", "1", "--timeout", "20", "--report", "-"]
    argv += list(a.get("options", [])) + list(a["requirements"])
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=dict(os.environ, **a.get("env", {})), timeout=float(a.get("timeout", 600)))
    except (OSError, subprocess.TimeoutExpired) as exc:
        _emit({"error": "%s: %s" % (type(exc).__name__, exc)})
        return
    errors = [l for l in proc.stderr.decode("utf-8", "replace").splitlines()
              if l.strip() and not l.startswith("WARNING")]
    try:
        report = json.loads(proc.stdout.decode("utf-8", "replace")) if proc.returncode == 0 else None
    except ValueError:
        report = None
    if report is None:
        _emit({"error": errors[-1].strip() if errors else "pip exited with status %d" % proc.returncode})
        return
    packages = []
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        packages.append({"name": meta.get("name", "?"), "version": meta.get("version", "?"),
                         "bytes": _download_size(item.get("download_info", {}).get("url", ""))})
    _emit({"packages": packages})


def cmd_pack(a):
    """Write a tar stream of src's contents to stdout (empty when src does not exist)."""
    src = a["src"]
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tf:
        if os.path.isdir(src):
            for n in sorted(os.listdir(src)):
                tf.add(os.path.join(src, n), arcname=n)
    sys.stdout.flush()


def cmd_files(a):
    """Regular files directly in a folder, with size and sha256 (to skip re-uploads)."""
    out = {}
    d = a["dir"]
    if os.path.isdir(d):
        for n in sorted(os.listdir(d)):
            full = os.path.join(d, n)
            if os.path.isfile(full) and not os.path.islink(full):
                h = hashlib.sha256()
                with open(full, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                out[n] = {"size": os.path.getsize(full), "sha256": h.hexdigest()}
    _emit({"files": out})


def cmd_lock(a):
    """Hold an exclusive flock on a["path"] while the deploy lives. The deploy keeps this
    process's stdin open and writes a heartbeat byte every few seconds; EOF (the deploy
    finished, or its SSH connection dropped) or no heartbeat for a["stale"] seconds (a
    link that died silently) ends the process and so frees the lock: it cannot go stale.
    Prints `WAIT <owner>` while another deploy holds it, then `LOCKED`; exits 75 with
    `BUSY <owner>` after a["wait"] seconds."""
    import fcntl
    import select

    path = a["path"]
    os.makedirs(os.path.dirname(path), exist_ok=True)  # a first deploy creates the host dir
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def owner():
        try:
            with open(path + ".owner") as fh:
                return fh.read().strip() or "unknown"
        except OSError:
            return "unknown"

    def try_lock():
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    if not try_lock():
        sys.stdout.write("WAIT %s\n" % owner())
        sys.stdout.flush()
        deadline = time.time() + float(a["wait"])
        while not try_lock():
            if time.time() > deadline:
                sys.stdout.write("BUSY %s\n" % owner())
                sys.stdout.flush()
                sys.exit(75)
            time.sleep(0.1)
    with open(path + ".owner", "w") as fh:
        fh.write(a["owner"] + "\n")
    sys.stdout.write("LOCKED\n")
    sys.stdout.flush()
    stdin = sys.stdin.buffer.raw
    while True:
        ready, _, _ = select.select([stdin], [], [], float(a["stale"]))
        if not ready or not os.read(stdin.fileno(), 4096):
            break  # silent for too long, or EOF: let go


def _run_files(d):
    return {k: os.path.join(d, n) for k, n in (("metrics", "metrics.jsonl"), ("log", "run.log"),
                                               ("status", "exit_status"), ("pid", "pid"))}


def cmd_start_run(a):
    """Start `sh -c COMMAND` detached (its own session, stdin /dev/null, output to run.log)
    unless a["dir"] exists already: the same run id never starts twice. A small watcher
    process (this one, forked) waits for it and writes its exit status. Prints
    {"started": bool, "pid": watcher pid}."""
    import subprocess

    d = a["dir"]
    files = _run_files(d)
    os.makedirs(os.path.dirname(d), exist_ok=True)
    try:
        os.mkdir(d)
    except FileExistsError:
        _emit({"started": False, "pid": _read_pid(files["pid"])})
        return
    open(files["metrics"], "wb").close()  # exists from the start: a follower can open it
    pid = os.fork()
    if pid == 0:  # the watcher: detach from the SSH session, run, record the status
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            log = os.open(files["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for fd, src in ((0, null), (1, log), (2, log)):
                os.dup2(src, fd)
            code = subprocess.call(["sh", "-c", a["command"]])
            with open(files["status"] + ".tmp", "w") as fh:
                fh.write("%d\n" % code)
            os.rename(files["status"] + ".tmp", files["status"])
        finally:
            os._exit(0)
    with open(files["pid"], "w") as fh:
        fh.write("%d\n" % pid)
    _emit({"started": True, "pid": pid})


def _read_pid(path):
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid):
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a finished child of nobody that nobody reaped yet is not alive
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def cmd_follow(a):
    """Copy a run's metrics file to stdout from byte a["offset"] as it grows, until the run
    has ended (its status is written, or its watcher is gone); then exit 0."""
    files = _run_files(a["dir"])
    out = sys.stdout.buffer
    poll = float(a.get("poll", 0.1))
    pid = _read_pid(files["pid"])
    with open(files["metrics"], "rb") as fh:
        fh.seek(int(a["offset"]))
        while True:
            data = fh.read(1 << 16)
            if data:
                out.write(data)
                out.flush()
                continue
            if os.path.exists(files["status"]) or not _alive(pid):
                rest = fh.read()  # written just before the end
                if rest:
                    out.write(rest)
                    out.flush()
                return
            time.sleep(poll)


def cmd_run_status(a):
    """{"status": exit status or null (the run died unrecorded), "log_tail": last lines}."""
    files = _run_files(a["dir"])
    status = None
    try:
        with open(files["status"]) as fh:
            status = int(fh.read().strip())
    except (OSError, ValueError):
        pass
    tail = ""
    try:
        with open(files["log"], "rb") as fh:
            fh.seek(max(0, os.path.getsize(files["log"]) - 2000))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        pass
    _emit({"status": status, "log_tail": tail, "alive": _alive(_read_pid(files["pid"]))})


def cmd_stop_run(a):
    """SIGTERM the run's process group (its watcher leads it) unless it has ended."""
    import signal

    files = _run_files(a["dir"])
    pid = _read_pid(files["pid"])
    stopped = False
    if pid is not None and not os.path.exists(files["status"]) and _alive(pid):
        try:
            os.killpg(pid, signal.SIGTERM)
            stopped = True
        except OSError:
            pass
    _emit({"stopped": stopped})


COMMANDS = {
    "state": cmd_state, "stage": cmd_stage, "extract": cmd_extract, "finalize": cmd_finalize,
    "switch": cmd_switch, "prune": cmd_prune, "pack": cmd_pack, "files": cmd_files,
    "lock": cmd_lock, "parent_env": cmd_parent_env, "install_plan": cmd_install_plan, "start_run": cmd_start_run,
    "follow": cmd_follow, "run_status": cmd_run_status, "stop_run": cmd_stop_run,
}


def main(argv):
    if len(argv) != 3 or argv[1] not in COMMANDS:
        sys.stderr.write("usage: release_tool {%s} JSON\n" % ",".join(COMMANDS))
        return 2
    try:
        COMMANDS[argv[1]](json.loads(argv[2]))
    except Exception as exc:  # one line the local side can show
        sys.stderr.write("release_tool %s: %s: %s\n" % (argv[1], type(exc).__name__, exc))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
