"""TARSy's ``queue:`` block as the TARSY_* settings it stands for.

settings.py reads this before anything else of the configuration: the workers' limits
and intervals must be known when the process starts. A value in the environment wins
over the file's, as for every other setting; a key with no counterpart here is named
by ``manage.py check`` (config/references.py).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from config.loader import ConfigError, read_tarsy_file
from config.schema import QueueSchema
from config.types import QUEUE_SETTINGS


def queue_settings(path: str | Path) -> dict[str, float]:
    """The file's ``queue:`` values by setting name. A file that cannot be read gives
    none: start-up goes on, and the check reports the file (tarsy.E010)."""
    try:
        raw = read_tarsy_file(Path(path))
        block = raw.get("queue") if isinstance(raw, dict) else None
        queue = QueueSchema.model_validate(block or {}).build()
    except (ConfigError, ValidationError):
        return {}
    return {
        setting: value
        for key, setting in QUEUE_SETTINGS.items()
        if (value := getattr(queue, key)) is not None
    }
