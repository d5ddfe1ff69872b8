"""Where the shipped demo pair lives and what the demo asks it by default."""

from __future__ import annotations

from python_engine.project import PROJECT_ROOT

MODELS_DIR = PROJECT_ROOT / "refs" / "models"
DEFAULT_TARGET = MODELS_DIR / "demo-target"
DEFAULT_DRAFTER = MODELS_DIR / "demo-drafter"
INT4_TARGET = MODELS_DIR / "demo-target-int4"  # `kdtree quantize` of DEFAULT_TARGET, same drafter

# The pair was trained on Python standard-library source: a prompt in that style.
DEFAULT_PROMPT = '''import os


def list_python_files(folder):
    """Return the Python files under folder, sorted."""
'''
DEFAULT_MAX_TOKENS = 128
DEFAULT_BUDGET = 32
