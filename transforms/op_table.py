"""One row per ONNX op version range: where its lowering, shape rule, upgrade adapters and tests are.

Why: an op's pieces are registered in three tables keyed three ways (lowering patterns by
`(domain, op_type)` with a `min_version`, shape and value rules by `op_type`, upgrade adapters by
`(op_type, since_version)`), so answering "what does onnxc do with Resize-13?" meant reading three
modules. `op_table()` joins them on the dialect's own unit, one `OpInfo` per
`(domain, op_type, version range)` (the since-versions one dialect op stands for), with exactly
the lookups the passes make, so the row says what the passes will do; `docs/ops.md` can be
generated from it (issue 7, item 6).

This is a read-only index: the registrations stay where they are (`@lowers` in the pattern
modules, `_SHAPE_RULES`/`_VALUE_RULES` in `onnx_shape_inference`, `_ADAPTERS` in
`onnx_upgrade_ops`). `find_test_files` finds the tests that name an op (lit files and pytest
modules) by scanning the test tree, for the documentation generator, never at compile time.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from onnxc.dialect.opinfo import OpInfo
from onnxc.dialect.table import all_ops


@dataclasses.dataclass(frozen=True)
class OpEntry:
    """What onnxc has for one dialect op (one ONNX op over a range of since-versions).

    `lowering` is the pattern function `convert-onnx-to-linalg` uses, `lowers_directly` whether
    it takes this version range as it is (False: `onnx-upgrade-ops` must first move the op to
    `lowering_min_version` or later); `shape_rule`/`value_rule` are onnxc's own inference rules
    (ops without one use onnx's inference); `adapters` maps a since-version of this range to the
    function `onnx-upgrade-ops` runs when it upgrades an older op to that version."""

    info: OpInfo
    lowering: Callable[..., Any] | None
    lowering_min_version: int | None
    shape_rule: Callable[..., Any] | None
    value_rule: Callable[..., Any] | None
    adapters: dict[int, Callable[..., Any]]

    @property
    def key(self) -> tuple[str, str, tuple[int, int]]:
        """(domain, op_type, (first since-version, last since-version))."""
        v = self.info.since_versions
        return (self.info.domain, self.info.op_type, (v[0], v[-1]))

    @property
    def lowers_directly(self) -> bool:
        """Whether the lowering's pre-check accepts this op as it is (the same test as
        `lowering.driver.check_op`: the op's oldest since-version against `min_version`)."""
        return self.lowering is not None and self.lowering_min_version is not None and self.info.since_version >= self.lowering_min_version


def op_table() -> dict[tuple[str, str, tuple[int, int]], OpEntry]:
    """Every dialect op's row, keyed by (domain, op_type, (first, last since-version))."""
    from onnxc.transforms import onnx_shape_inference as shapes
    from onnxc.transforms import onnx_upgrade_ops as upgrades
    from onnxc.transforms.lowering import load_patterns
    from onnxc.transforms.lowering.common import find_pattern

    load_patterns()
    out: dict[tuple[str, str, tuple[int, int]], OpEntry] = {}
    for info in all_ops():
        pattern = find_pattern(info)
        # The same lookups the passes make (onnx_shape_inference._Inferer.visit and
        # onnx_upgrade_ops.Step.run key by op type, without the domain).
        adapters = {v: fn for (t, v), fn in upgrades._ADAPTERS.items() if t == info.op_type and v in info.since_versions}
        entry = OpEntry(
            info=info,
            lowering=pattern.fn if pattern is not None else None,
            lowering_min_version=pattern.min_version if pattern is not None else None,
            shape_rule=shapes._SHAPE_RULES.get(info.op_type),
            value_rule=shapes._VALUE_RULES.get(info.op_type),
            adapters=dict(sorted(adapters.items())),
        )
        out[entry.key] = entry
    return out


def source_of(fn: Callable[..., Any] | None) -> str | None:
    """`path:line` of a function relative to the project root (for links in the docs)."""
    if fn is None:
        return None
    fn = inspect.unwrap(fn)
    try:
        path = Path(inspect.getsourcefile(fn) or "")
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):  # a builtin or a function without source (a lambda in a REPL)
        return None
    root = Path(__file__).resolve().parent.parent
    try:
        return f"{path.resolve().relative_to(root)}:{line}"
    except ValueError:  # installed outside the project tree
        return f"{path}:{line}"


def find_test_files(entries: Iterable[OpEntry], test_root: Path) -> dict[tuple[str, str, tuple[int, int]], list[str]]:
    """For each entry, the test files under `test_root` that name its op: lit files using the
    dialect op (`onnx.mat_mul`) and pytest modules building the node (`make_node("MatMul"`),
    as paths relative to `test_root`'s parent. Reads the test tree once."""
    texts = {p: p.read_text(errors="replace") for p in sorted(test_root.rglob("*")) if p.suffix in (".mlir", ".py") and p.is_file()}
    out: dict[tuple[str, str, tuple[int, int]], list[str]] = {}
    for e in entries:
        dialect_name = re.compile(rf"\b{re.escape(e.info.dialect)}\.{re.escape(e.info.name)}\b")
        node = f'make_node("{e.info.op_type}"'
        hits = []
        for p, text in texts.items():
            if (p.suffix == ".mlir" and dialect_name.search(text)) or (p.suffix == ".py" and node in text):
                hits.append(str(p.relative_to(test_root.parent)))
        out[e.key] = hits
    return out


__all__ = ["OpEntry", "op_table", "source_of", "find_test_files"]
