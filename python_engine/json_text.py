"""JSON that a user wrote (a config.json, a line of a prompts file), read the one way: a value,
or a KdtreeError that names where the text came from."""

from __future__ import annotations

import json

from python_engine.errors import KdtreeError


def parse_json(text: str, where: str):
    """json.loads(text); a KdtreeError starting with `where` when the text is not JSON, or is
    JSON Python cannot hold (an integer of more than 4300 digits, nesting too deep)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KdtreeError(f"{where} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise KdtreeError(f"{where} cannot be read as JSON ({str(exc)[:80]})") from None
