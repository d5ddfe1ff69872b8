"""The corpus is chosen deterministically and its hash tells two corpora apart; the tokenizer
keeps its special ids and round-trips code; the token streams put EOS before each file."""

from __future__ import annotations

import numpy as np
import pytest

from python_engine.errors import KdtreeError
from python_engine.train.corpus import corpus_hash, read_corpus, select_files, write_corpus
from python_engine.train.tokenizer import EOS_ID, MASK_ID, MASK_TOKEN, tokenize_corpus, train_tokenizer


def _fake_stdlib(root, rng, n=25):
    (root / "pkg").mkdir(parents=True)
    (root / "site-packages").mkdir()
    (root / "site-packages" / "third_party.py").write_text("x = 1\n")  # not the stdlib's own
    (root / "_sysconfigdata__linux.py").write_text("build_time_vars = {}\n")  # machine-specific
    (root / "blob.py").write_text("DATA = '" + "A" * 1000 + "'\n")  # a data blob, not code
    (root / "latin1.py").write_bytes(b"# caf\xe9\n")  # not UTF-8
    for i in range(n):
        name = f"pkg/mod_{i:02d}.py" if i % 3 else f"mod_{i:02d}.py"
        body = "".join(f"def f_{i}_{k}(x):\n    return x * {int(rng.integers(0, 100))} + {k}\n\n" for k in range(5))
        (root / name).write_text(body)


def test_selection_is_sorted_filtered_and_splits_every_tenth(tmp_path, rng):
    _fake_stdlib(tmp_path / "lib", rng)
    files = select_files(tmp_path / "lib", heldout_every=10)
    paths = [f.path for f in files]
    assert paths == sorted(paths) and len(paths) == 25
    assert not any(p.startswith(("site-packages", "_sysconfigdata", "blob", "latin1")) for p in paths)
    assert [i for i, f in enumerate(files) if f.split == "heldout"] == [9, 19]
    assert select_files(tmp_path / "lib", max_files=12) == files[:12]

    h = corpus_hash(files)
    assert corpus_hash(select_files(tmp_path / "lib")) == h
    (tmp_path / "lib" / "pkg" / "mod_01.py").write_text("def changed():\n    pass\n")
    assert corpus_hash(select_files(tmp_path / "lib")) != h

    write_corpus(files, tmp_path / "data", tmp_path / "lib")
    assert read_corpus(tmp_path / "data") == files
    with pytest.raises(KdtreeError, match="does not exist"):
        select_files(tmp_path / "nowhere")


def test_tokenizer_specials_round_trip_and_streams(tmp_path, rng):
    _fake_stdlib(tmp_path / "lib", rng)
    files = select_files(tmp_path / "lib", heldout_every=5)
    tok = train_tokenizer(files, 300)
    assert tok.token_to_id("<|endoftext|>") == EOS_ID and tok.token_to_id(MASK_TOKEN) == MASK_ID
    code = "    def forward(self, x):\n        return x + 1  # é\n"
    assert tok.decode(tok.encode(code).ids) == code  # byte-level: any text survives
    corpus = tokenize_corpus(tok, files)
    heldout_files = [f for f in files if f.split == "heldout"]
    assert len(corpus.heldout_starts) == len(heldout_files)
    assert (corpus.heldout[corpus.heldout_starts - 1] == EOS_ID).all()
    assert (corpus.train == EOS_ID).sum() == len(files) - len(heldout_files)
    first = tok.decode(corpus.heldout[corpus.heldout_starts[0]:corpus.heldout_starts[1] - 1].tolist())
    assert first == heldout_files[0].text
    assert corpus.train.dtype == np.uint16 and MASK_ID not in corpus.train
