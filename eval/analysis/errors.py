"""The one error type of the analysis layer: a message meant for the user, never a traceback."""

from __future__ import annotations

from arc_eval.errors import EvalError


class AnalysisError(EvalError):
    """Bad input to the analysis (missing or malformed run records, an unknown preset, a bad flag).

    The message names what is wrong and where (file, line, field); `arc-eval report` prints it
    as is and exits with status 2 (``USAGE``), as every bad input of ``arc-eval`` does.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
