"""The project's error base: every error a user can act on derives from KdtreeError.

The CLI turns these into one clear message and exit status 1; anything else is a bug and
keeps its traceback.
"""


class KdtreeError(Exception):
    """An error with a message a person can act on."""
