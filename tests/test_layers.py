"""docs/ARCHITECTURE.md's layer table, checked against the imports: the table names every module, and no module
imports one of a higher layer (a learner reads the code top-down from db.py on the strength of that rule)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "minilsm"


def layer_table() -> dict[str, int]:
    """Module name -> layer, from the rows ``| 6 | `cli.py`, `demo.py` | ... |`` of the table."""
    layers: dict[str, int] = {}
    for m in re.finditer(r"^\| (\d+) \| ([^|]+) \|", (ROOT / "docs" / "ARCHITECTURE.md").read_text(), flags=re.M):
        for name in re.findall(r"`([\w/]+)\.py`", m.group(2)):
            layers["minilsm." + name.replace("/", ".")] = int(m.group(1))
    return layers


def module_name(path: Path) -> str:
    return ".".join(("minilsm", *path.relative_to(PACKAGE).with_suffix("").parts))


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of a minilsm module, at any depth (function-level imports too)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.module.startswith("minilsm"):
            if node.module == "minilsm":  # `from minilsm import compaction`: the submodules
                out += [(node.lineno, f"minilsm.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("minilsm")]
    return out


def test_the_table_names_every_module_and_no_module_imports_a_higher_layer() -> None:
    layers = layer_table()
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert sorted(modules) == sorted(layers), "docs/ARCHITECTURE.md's layer table and minilsm/ name other modules"
    upward = []
    for name, path in modules.items():
        for line, target in imported(ast.parse(path.read_text(), str(path))):
            # `minilsm.__version__` and the like are the package's facade, not a module of the table.
            if target in layers and layers[target] > layers[name]:
                upward.append(
                    f"{path.relative_to(ROOT)}:{line} (layer {layers[name]}) imports {target} (layer {layers[target]})"
                )
    assert not upward, upward
