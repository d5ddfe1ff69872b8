"""One demo run: encode the prompt, pick the engine, warm it up, generate with DDTree (with
metrics events) and with plain AR on the same engine, and compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from python_engine.demo.engines import Generated, select_engine
from python_engine.errors import KdtreeError
from python_engine.events import EventWriter

WARMUP_TOKENS = 4  # first calls pay for allocator and kernel set-up: keep that out of tokens/s


@dataclass
class DemoSettings:
    target_dir: Path
    drafter_dir: Path
    prompt: str
    max_tokens: int = 128
    budget: int = 32
    temperature: float = 0.0
    seed: int = 0
    engine: str = "auto"
    device: str = "auto"
    dtype: str | None = None
    ignore_eos: bool = False
    warmup: bool = True


@dataclass
class DemoResult:
    engine: str
    device: str
    dtype: str
    prompt: str
    prompt_ids: list[int]
    text: str  # DDTree's continuation
    ar_text: str
    ddtree: Generated
    ar: Generated
    budget: int
    temperature: float
    notes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.ddtree.tokens == self.ar.tokens

    @property
    def first_difference(self) -> int | None:
        """Index of the first token where DDTree and AR differ (None when identical)."""
        a, b = self.ddtree.tokens, self.ar.tokens
        if a == b:
            return None
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    @property
    def speedup(self) -> float:
        return self.ddtree.tokens_per_s / self.ar.tokens_per_s if self.ar.tokens_per_s > 0 else 0.0

    @property
    def round_cost(self) -> float:
        """A DDTree round's time (drafter, tree, one verify forward) in AR decode steps: the
        speedup is about tau / round_cost."""
        if not (self.ddtree.rounds and self.ar.rounds and self.ar.decode_s > 0):
            return 0.0
        return (self.ddtree.decode_s / self.ddtree.rounds) / (self.ar.decode_s / self.ar.rounds)

    def to_dict(self) -> dict:
        def gen(g: Generated) -> dict:
            return {"tokens": len(g.tokens), "tau": round(g.tau, 4), "tokens_per_s": round(g.tokens_per_s, 2),
                    "decode_s": round(g.decode_s, 4), "prefill_s": round(g.prefill_s, 4), "rounds": g.rounds}

        return {"engine": self.engine, "device": self.device, "dtype": self.dtype, "budget": self.budget,
                "temperature": self.temperature, "prompt": self.prompt, "text": self.text,
                "prompt_ids": self.prompt_ids,
                "ddtree": gen(self.ddtree), "ar": gen(self.ar), "speedup": round(self.speedup, 3),
                "round_cost_ar_steps": round(self.round_cost, 3),
                "identical_to_ar": self.identical, "notes": self.notes}


def check_pair(target_dir: Path, drafter_dir: Path) -> None:
    for what, d in (("target", target_dir), ("drafter", drafter_dir)):
        if not (Path(d) / "config.json").exists():
            raise KdtreeError(f"demo {what} not found at {d}: train it with `kdtree train-demo` "
                              f"or pass --{'model' if what == 'target' else 'drafter'} DIR")


def run_demo(s: DemoSettings, events: EventWriter | None = None, on_status=lambda text: None) -> DemoResult:
    from python_engine.decode.prompts import TextCodec

    check_pair(s.target_dir, s.drafter_dir)
    if s.max_tokens < 1:
        raise KdtreeError(f"--max-tokens must be >= 1, got {s.max_tokens}")
    codec = TextCodec(s.target_dir)
    prompt_ids = codec.encode(s.prompt)  # the rule `kdtree run --prompt` follows too
    on_status("loading the demo pair")
    engine, notes = select_engine(s.engine, s.target_dir, s.drafter_dir, s.device, s.dtype)
    stop = () if s.ignore_eos else engine.eos_ids
    common = dict(budget=s.budget, temperature=s.temperature, seed=s.seed, stop_ids=stop)
    if s.warmup:
        on_status("warming up")
        engine.generate(prompt_ids, WARMUP_TOKENS, ar=False, events=None, **common)
        engine.generate(prompt_ids, WARMUP_TOKENS, ar=True, events=None, **common)
    on_status(f"DDTree, budget {s.budget}")
    ddtree = engine.generate(prompt_ids, s.max_tokens, ar=False, events=events, **common)
    on_status("AR baseline")
    ar = engine.generate(prompt_ids, s.max_tokens, ar=True, events=None, **common)
    return DemoResult(engine=engine.name, device=engine.device, dtype=engine.dtype, prompt=s.prompt,
                      prompt_ids=prompt_ids, text=codec.decode(ddtree.tokens), ar_text=codec.decode(ar.tokens),
                      ddtree=ddtree, ar=ar, budget=s.budget, temperature=s.temperature, notes=notes)
