"""Where the real material lives: ``../shared/data`` beside the repository (never copied in).

``ARC_SHARED_DATA`` overrides the location (for a checkout whose parent has no ``shared/``, e.g. a git
worktree). Checks that need the material skip with a message naming the path when it is absent.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA_ENV = "ARC_SHARED_DATA"
QWEN3_NAME = "qwen3-tokenizer"
# How the trace vectors name the Qwen3 directory: relative to the repository root, where replay runs.
QWEN3_VECTOR_PATH = f"../shared/data/{QWEN3_NAME}"


def shared_data_dir() -> Path:
    override = os.environ.get(SHARED_DATA_ENV)
    return Path(override).resolve() if override else (REPO.parent / "shared" / "data").resolve()


def qwen3_dir() -> Path | None:
    """The Qwen3 tokenizer directory (tokenizer.json, tokenizer_config.json, chat_template.jinja), if present."""
    path = shared_data_dir() / QWEN3_NAME
    return path if (path / "tokenizer.json").is_file() else None


QWEN3_ABSENT = (
    f"the Qwen3 tokenizer directory is absent: {shared_data_dir() / QWEN3_NAME} (real material lives in"
    f" ../shared/data beside the repository; set {SHARED_DATA_ENV} to point elsewhere)"
)


@functools.lru_cache(maxsize=2)
def transformers_tokenizer(directory: str) -> Any:
    """transformers' own tokenizer of a model directory (the independent oracle of the template tests)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(directory)
