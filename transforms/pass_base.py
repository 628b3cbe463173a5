"""The base of every onnxc pass, in the style of xDSL: a small frozen dataclass with a `name`,
a docstring whose first line is the pass's summary, and its options as fields.

A pass's `run(module)` gets the `builtin.module` operation and changes it in place. Failures are
raised as `PassFailure` with the location of the op at fault; the pass manager glue in
`onnxc.transforms.pipeline` turns that into an `file:line:col: error:` diagnostic. Options are
parsed from the `pass{opt=value}` syntax by `parse_options`, using the fields' types.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from mlir import ir

from onnxc.errors import OnnxcError


class PassFailure(OnnxcError):
    """A pass found IR it must reject. `diagnostics` holds (location, message) pairs."""

    def __init__(self, pass_name: str, diagnostics: list[tuple[ir.Location | None, str]]) -> None:
        self.pass_name = pass_name
        self.diagnostics = diagnostics
        text = "\n".join(f"{loc}: {msg}" if loc is not None else msg for loc, msg in diagnostics)
        super().__init__(f"pass '{pass_name}' failed:\n{text}")


@dataclasses.dataclass(frozen=True)
class ModulePass:
    """Base class: subclasses are frozen dataclasses with `name` and option fields."""

    name: ClassVar[str] = ""

    def run(self, module: ir.Operation) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        """The first line of the pass's docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def options(cls) -> list[dataclasses.Field[Any]]:
        """The pass's options (its dataclass fields)."""
        return list(dataclasses.fields(cls))

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "ModulePass":
        """Build the pass from `pass{key=value ...}` options, converting by the fields' types."""
        fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}
        fields.update({f.name: f for f in dataclasses.fields(cls)})
        kwargs: dict[str, Any] = {}
        for key, raw in options.items():
            if key not in fields:
                known = ", ".join(sorted({f.name for f in dataclasses.fields(cls)})) or "none"
                raise OnnxcError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
            field = fields[key]
            kwargs[field.name] = _convert(cls.name, field, raw)
        return cls(**kwargs)


def _convert(pass_name: str, field: dataclasses.Field[Any], raw: str) -> Any:
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    return convert_option(pass_name, field.name, kind, raw)


def convert_option(pass_name: str, option: str, kind: str, raw: str) -> Any:
    """The value of option `option` of type `kind` (a field's annotation as text: `bool`, `int`,
    `float`, `str`, `tuple[int, ...]`, `tuple[str, ...]`, or any of them `| None`) from `raw`."""
    kind = kind.replace(" ", "")
    try:
        if kind.endswith("|None") or kind.startswith("None|"):
            if raw.lower() in ("", "none"):
                return None
            return convert_option(pass_name, option, kind.replace("|None", "").replace("None|", ""), raw)
        if kind == "bool":
            if raw.lower() in ("1", "true", "on", "yes", ""):
                return True
            if raw.lower() in ("0", "false", "off", "no"):
                return False
            raise ValueError(raw)
        if kind == "int":
            return int(raw, 0)
        if kind == "float":
            return float(raw)
        if kind.startswith("tuple[int"):
            return tuple(int(s, 0) for s in raw.split(",") if s)
        if kind.startswith("tuple[str"):
            return tuple(s for s in raw.split(",") if s)
        return raw
    except ValueError:
        raise OnnxcError(f"pass '{pass_name}' option '{option}' expects {kind}, got '{raw}'") from None


def option_text(value: Any) -> str:
    """`value` as it is written in a `pass{option=value}` element (the inverse of `convert_option`)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "{" + ",".join(str(v) for v in value) + "}"
    text = str(value)
    return text if text and not any(c in text for c in " ,{}'\"") else '"' + text + '"'


def element_text(name: str, options: dict[str, Any]) -> str:
    """`name{key=value ...}` for the given option values (no braces without options)."""
    if not options:
        return name
    return name + "{" + " ".join(f"{k.replace('_', '-')}={option_text(v)}" for k, v in options.items()) + "}"
