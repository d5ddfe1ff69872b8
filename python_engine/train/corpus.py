"""The demo corpus: Python standard-library source, an offline text every machine has.

Files are picked deterministically (sorted relative paths, fixed filters) and every
`heldout_every`-th one is held out for evaluation. The corpus is built once, on one machine,
into a compressed JSON-lines file that travels with the repo's ignored data folder, because
another Python version has another standard library. Its manifest records the interpreter,
the file list and a hash of (path, content) pairs so a rebuild can be compared.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from python_engine.errors import KdtreeError

CORPUS_NAME = "corpus.jsonl.xz"
MANIFEST_NAME = "corpus-manifest.json"

# Folders that are not the standard library's own source, or are machine-specific.
SKIP_PARTS = {"site-packages", "dist-packages", "__pycache__", "idle_test"}
SKIP_PREFIXES = ("_sysconfigdata", "config-")
MAX_FILE_BYTES = 200_000  # larger files are generated tables, not code people write
MAX_LINE_CHARS = 400  # data blobs (base64, tables) have long lines


@dataclass(frozen=True)
class CorpusFile:
    path: str  # relative to the stdlib root, '/'-separated
    split: str  # "train" | "heldout"
    text: str


def default_stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _keep(rel: Path, text: str) -> bool:
    if any(part in SKIP_PARTS for part in rel.parts):
        return False
    if rel.parts[0].startswith(SKIP_PREFIXES) or rel.name.startswith(SKIP_PREFIXES):
        return False
    if not text.strip():
        return False
    return max(len(line) for line in text.splitlines()) <= MAX_LINE_CHARS


def select_files(root: Path, heldout_every: int = 10, max_files: int | None = None) -> list[CorpusFile]:
    """The corpus: every kept *.py under root in sorted order; file k of the kept list is
    held out when k % heldout_every == heldout_every - 1. max_files keeps the first N kept
    files (the smoke path)."""
    if not root.is_dir():
        raise KdtreeError(f"standard-library folder {root} does not exist")
    if heldout_every < 2:
        raise KdtreeError(f"heldout_every must be >= 2, got {heldout_every}")
    files: list[CorpusFile] = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root)
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        text = text.replace("\r\n", "\n")
        if not _keep(rel, text):
            continue
        k = len(files)
        split = "heldout" if k % heldout_every == heldout_every - 1 else "train"
        files.append(CorpusFile(rel.as_posix(), split, text))
        if max_files is not None and len(files) >= max_files:
            break
    if len(files) < heldout_every:
        raise KdtreeError(f"{root}: only {len(files)} usable .py files; is this a Python standard library?")
    return files


def corpus_hash(files: list[CorpusFile]) -> str:
    """sha256 over (path, split, content hash) lines: equal hashes mean equal corpora."""
    h = hashlib.sha256()
    for f in files:
        digest = hashlib.sha256(f.text.encode("utf-8")).hexdigest()
        h.update(f"{f.path}\t{f.split}\t{digest}\n".encode())
    return h.hexdigest()


def write_corpus(files: list[CorpusFile], data_dir: Path, root: Path, settings: dict | None = None) -> dict:
    """Write corpus.jsonl.xz and its manifest; returns the manifest."""
    data_dir.mkdir(parents=True, exist_ok=True)
    # preset=9 | EXTREME is slow; 6 keeps the build to seconds and the file small enough
    with lzma.open(data_dir / CORPUS_NAME, "wt", encoding="utf-8", preset=6) as out:
        for f in files:
            out.write(json.dumps({"path": f.path, "split": f.split, "text": f.text}) + "\n")
    manifest = {
        "source": str(root),
        "python": sys.version.split()[0],
        "files": len(files),
        "train_files": sum(f.split == "train" for f in files),
        "heldout_files": sum(f.split == "heldout" for f in files),
        "chars": sum(len(f.text) for f in files),
        "sha256": corpus_hash(files),
        **(settings or {}),
        "file_list": [f"{f.split}\t{f.path}" for f in files],
    }
    (data_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_corpus(data_dir: Path) -> list[CorpusFile]:
    path = data_dir / CORPUS_NAME
    if not path.exists():
        raise KdtreeError(f"{path} not found: run `kdtree train-demo --stage corpus` first")
    files = []
    try:
        with lzma.open(path, "rt", encoding="utf-8") as src:
            for line in src:
                obj = json.loads(line)
                files.append(CorpusFile(obj["path"], obj["split"], obj["text"]))
    except (lzma.LZMAError, json.JSONDecodeError, KeyError) as exc:
        raise KdtreeError(f"{path} is damaged ({exc}); rebuild it with `--stage corpus`") from None
    return files
