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


def imported(tree: ast.AST, name: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every import of a minilsm module by the module `name`, at any depth (function-level
    imports too), relative ones (``from .. import db``) resolved, a name imported from a package
    (``from minilsm.sstable import reader``) taken as its submodule where `modules` has one."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to the importing module's package
                package = name.split(".")[: -node.level]
                base = ".".join([*package, *([base] if base else [])])
            if base == "minilsm" or base.startswith("minilsm."):
                for a in node.names:
                    out.append((node.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name == "minilsm" or a.name.startswith("minilsm.")]
    return out


def package_layers(layers: dict[str, int]) -> dict[str, int]:
    """A package (``minilsm.sstable``) imported whole stands for its modules: the highest of their layers."""
    out: dict[str, int] = {}
    for module, layer in layers.items():
        package = module.rpartition(".")[0]
        if package != "minilsm":
            out[package] = max(out.get(package, 0), layer)
    return out


def test_relative_and_package_imports_are_resolved() -> None:
    """The checker itself: an upward import written relative, or through a package, must not slip past it."""
    modules = {"minilsm.db", "minilsm.bloom", "minilsm.sstable.reader", "minilsm.sstable.format"}
    code = "from .. import db\nfrom . import format\nfrom ..bloom import x\nfrom minilsm.sstable import reader\n"
    assert [t for _, t in imported(ast.parse(code), "minilsm.sstable.reader", modules)] == [
        "minilsm.db",
        "minilsm.sstable.format",
        "minilsm.bloom",
        "minilsm.sstable.reader",
    ]
    assert [t for _, t in imported(ast.parse("import minilsm.sstable"), "minilsm.db", modules)] == ["minilsm.sstable"]
    assert package_layers({"minilsm.sstable.format": 1, "minilsm.sstable.reader": 3, "minilsm.db": 5}) == {
        "minilsm.sstable": 3
    }


def test_the_table_names_every_module_and_no_module_imports_a_higher_layer() -> None:
    layers = layer_table()
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert sorted(modules) == sorted(layers), "docs/ARCHITECTURE.md's layer table and minilsm/ name other modules"
    upward = []
    known = {**package_layers(layers), **layers}
    for name, path in modules.items():
        for line, target in imported(ast.parse(path.read_text(), str(path)), name, set(modules)):
            # `minilsm.__version__` and the like are the package's facade, not a module of the table.
            if target in known and known[target] > layers[name]:
                upward.append(
                    f"{path.relative_to(ROOT)}:{line} (layer {layers[name]}) imports {target} (layer {known[target]})"
                )
    assert not upward, upward
