"""The distribution's package list covers every package folder, and the evaluation layer imports as arc_eval."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> tuple[list[str], dict[str, str]]:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return list(setuptools["packages"]), dict(setuptools["package-dir"])


def _folder_of(package: str, package_dir: dict[str, str]) -> Path:
    top, _, rest = package.partition(".")
    base = ROOT / package_dir.get(top, top)
    return base.joinpath(*rest.split(".")) if rest else base


def test_every_package_folder_is_listed() -> None:
    packages, package_dir = _declared()
    listed = {_folder_of(name, package_dir) for name in packages}
    tops = {package_dir.get(name, name) for name in packages if "." not in name}
    found = {init.parent for top in tops for init in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), f"package folders missing from pyproject's packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed packages without an __init__.py: {sorted(listed - found)}"


def test_the_evaluation_layer_imports_as_arc_eval_from_the_eval_folder() -> None:
    module = importlib.import_module("arc_eval.cli")
    assert Path(module.__file__ or "").resolve().parent == ROOT / "eval"
