"""The demo tokenizer: byte-level BPE trained with `tokenizers` on the corpus's train split,
and the tokenized corpus (uint16 token streams, one EOS before every file).

Special tokens come first so their ids are fixed whatever the merges: 0 is <|endoftext|>
(EOS, also the BOS the prompts start with), 1 is <|mask|> (the DFlash drafter's mask token,
never seen by the target in training).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from python_engine.errors import KdtreeError
from python_engine.train.corpus import CorpusFile

EOS_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"
EOS_ID, MASK_ID = 0, 1
TOKENIZER_NAME = "tokenizer.json"
TOKENS_NAME = "tokens.npz"


def train_tokenizer(files: list[CorpusFile], vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2 style pre-tokenization) over the train files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 300:
        raise KdtreeError(f"vocab_size must be >= 300 (256 bytes + specials + merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, MASK_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((f.text for f in files if f.split == "train"), trainer=trainer)
    if tok.token_to_id(EOS_TOKEN) != EOS_ID or tok.token_to_id(MASK_TOKEN) != MASK_ID:
        raise KdtreeError("tokenizer: special tokens did not get ids 0 and 1")
    return tok


def load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    if not path.exists():
        raise KdtreeError(f"{path} not found: run `kdtree train-demo --stage tokenizer` first")
    return Tokenizer.from_file(str(path))


def tokenizer_config() -> dict:
    """tokenizer_config.json so that transformers' AutoTokenizer reads the same tokenizer."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "mask_token": MASK_TOKEN,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
    }


def save_tokenizer(tok, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TOKENIZER_NAME
    tok.save(str(path))
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    return path


@dataclass
class TokenizedCorpus:
    train: np.ndarray  # uint16 [n]: EOS, file tokens, EOS, file tokens, ...
    heldout: np.ndarray  # uint16 [m]
    heldout_starts: np.ndarray  # int64: index in `heldout` of each file's first token


def tokenize_corpus(tok, files: list[CorpusFile]) -> TokenizedCorpus:
    if tok.get_vocab_size() > np.iinfo(np.uint16).max:
        raise KdtreeError("tokenizer: vocab too large for uint16 token streams")
    streams: dict[str, list[np.ndarray]] = {"train": [], "heldout": []}
    encodings = tok.encode_batch([f.text for f in files], add_special_tokens=False)
    starts, offset = [], 0
    for f, enc in zip(files, encodings):
        ids = np.asarray([EOS_ID] + enc.ids, dtype=np.uint16)
        if f.split == "heldout":
            starts.append(offset + 1)
            offset += len(ids)
        streams[f.split].append(ids)
    return TokenizedCorpus(
        train=np.concatenate(streams["train"]),
        heldout=np.concatenate(streams["heldout"]),
        heldout_starts=np.asarray(starts, dtype=np.int64),
    )


def save_tokens(corpus: TokenizedCorpus, data_dir: Path) -> Path:
    path = data_dir / TOKENS_NAME
    np.savez_compressed(path, train=corpus.train, heldout=corpus.heldout, heldout_starts=corpus.heldout_starts)
    return path


def load_tokens(data_dir: Path) -> TokenizedCorpus:
    path = data_dir / TOKENS_NAME
    if not path.exists():
        raise KdtreeError(f"{path} not found: run `kdtree train-demo --stage tokenizer` first")
    with np.load(path) as z:
        return TokenizedCorpus(train=z["train"], heldout=z["heldout"], heldout_starts=z["heldout_starts"])


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
