"""ONNX `ModelProto` -> a module of the ONNX dialect, losing nothing that export needs.

What the IR looks like (the contract with `exporter.py` and with later passes):

- **Module** attributes hold the model fields: `onnx.ir_version`, `onnx.opset_import` (dictionary
  domain -> version; "" is ai.onnx), `onnx.producer_name`, `onnx.producer_version`, `onnx.domain`,
  `onnx.model_version` (plus `onnx.model_semver = "1.2.345"` when the high bytes say semver, per the
  versioning spec), `onnx.doc_string`, `onnx.metadata_props` (dictionary), `onnx.configuration`
  (IR 11 multi-device configurations, an array of dictionaries), `onnx.training_info` (a dictionary
  whose `note` says it is kept for export and never run, and whose `protos` are the serialized
  TrainingInfoProtos, base64), `onnx.main` (the symbol of the main graph's function) and
  `onnx.unused_functions` (serialized model-local functions no node calls: they have no types to
  specialize on, so they are carried, not imported).
- **Main graph**: one public `func.func` named after the graph (sanitized to a symbol; the original
  name in `onnx.name` when it differs). Arguments are the graph inputs in order, results the graph
  outputs in order. Argument/result attributes: `onnx.name` (the ONNX value name, for binding by
  name), `onnx.dim_params` (array of strings, one per dim, "" where the dim has no dim_param; only
  when some dim has one: a name denotes the same size everywhere, so later passes may use the
  equalities), `onnx.default` (on an input that also has an initializer: its default value).
  Initializers that are not inputs become `onnx.constant` ops (`value` or `sparse_value`) located
  at `loc("name"("initializer"))` so export writes them back as initializers.
- **Nodes** become ONNX-dialect ops through `onnxc.dialect.onnx_op`, bound per the versioning spec
  (the schema with the greatest since_version <= the model's opset for the node's domain), located
  at `loc("node name"("OpType"))` (the first output's name where the node has none). Node fields
  ONNX attributes cannot hold (doc_string, metadata_props, IR 11 device_configurations) are kept in
  the discardable `onnx.node_extras` (a serialized NodeProto remainder, base64) only when present.
- **Custom ops** (domains without schemas) become `onnx.custom` with `domain`/`op_type` and their
  attributes; graph attributes of custom ops, which `onnx.custom` has no regions for, are kept as
  `{onnx_graph = "<base64 GraphProto>"}` dictionaries. All are listed in one warning.
- **Subgraphs** (GRAPH attributes) are regions with one block: arguments are the subgraph inputs
  (located at their names), `onnx.yield_values` ends them; values from outer scopes are used
  directly, as MLIR regions see the SSA values of enclosing regions (the spec's lexical scoping).
- **Model-local functions** become private `func.func`s called by `func.call`. MLIR functions have
  concrete types and ONNX attributes are compile-time values, so a function is *specialized*: one
  `func.func` per distinct (input types, attribute binding) seen at call sites, with every
  `ref_attr_name` replaced by the bound value (or the attribute_proto default; an unbound attribute
  without default is absent, per the spec). The function's attributes: `onnx.function` (name),
  `onnx.domain`, `onnx.overload` (IR 10), `onnx.opset_import` (its own), `onnx.attributes` (the
  binding, written back as the attribute defaults on export). A function specialized more than once
  is renamed per specialization (`Name__s0`, `Name__s1`, ...; symbol likewise) so each exports as a
  function of its own. The `inline-functions` pass inlines the calls.

Types come from the model's value_info plus onnx shape inference (with data propagation) where it
works; where neither gives a type the schema's type constraints give an unranked one. Everything is
validated before MLIR's C++ sees it: bad input raises `ModelImportError`, never crashes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import pathlib
import re
import warnings
from typing import Any, Iterable, Iterator, Mapping, Sequence

import onnx
from mlir import ir
from mlir.dialects import func

from onnxc.dialect import attributes as attr_mod
from onnxc.dialect import types as T
from onnxc.dialect.builder import OnnxBuildError, custom_op, none_value, onnx_op, yield_values
from onnxc.dialect.context import onnx_context
from onnxc.dialect.opinfo import OpInfo
from onnxc.dialect.table import known_domain, lookup, schema_versions
from onnxc.dialect.optable import OPS
from onnxc.errors import OnnxcError
from onnxc.importers.config import ImportConfig
from onnxc.importers.errors import ModelImportError
from onnxc.importers.validate import topological_order, validate_model
from onnxc.importers.proto import (
    INITIALIZER_KIND,
    SPARSE_INITIALIZER_KIND,
    attr_kind,
    b64,
    node_label,
    node_location,
    opsets,
    substitute,
    type_proto,
)

AP = onnx.AttributeProto

TRAINING_NOTE = "kept for export only: onnxc never runs training_info"

ModelLike = "onnx.ModelProto | str | pathlib.Path | bytes"


# --------------------------------------------------------------------------------------------- API


def import_context() -> ir.Context:
    """A context ready for imported modules: upstream dialects plus the ONNX dialects."""
    return onnx_context()


def import_model(
    model: onnx.ModelProto | str | pathlib.Path | bytes,
    config: ImportConfig | None = None,
    *,
    context: ir.Context | None = None,
    base_dir: str | pathlib.Path | None = None,
) -> ir.Module:
    """Import an ONNX model (a ModelProto, a file path or serialized bytes) into a new module.

    `context` defaults to a new `import_context()`. Raises `ModelImportError` listing every problem of
    an invalid model; a model with external data is read relative to its file's folder.
    `base_dir`: that folder for a ModelProto or bytes already loaded from a file (a caller that
    has parsed the file once need not parse it again; BERT-base's 440 MB took 0.7 s to load).
    """
    config = config or ImportConfig()
    proto, folder = load_model(model)
    if base_dir is not None:
        folder = pathlib.Path(base_dir).resolve()
    ctx = context or import_context()
    importer = ModelImporter(proto, folder, config, ctx)
    module = importer.run()
    if config.verify:
        _verify_imported(module, config.strict_verify)
    return module


def _verify_imported(module: ir.Module, strict: bool) -> None:
    """IRDL's checks (C++) and the Python schema verifier over the imported module; every finding
    is reported together, located at its ONNX node. IRDL's findings are errors; the schema
    verifier's are errors with `strict`, else one warning listing them all."""
    from onnxc.dialect import verify_onnx

    with module.context:
        try:
            verified = module.operation.verify()
        except ir.MLIRError as exc:
            raise ModelImportError("the imported module does not verify", [f"{d.location}: {d.message}" for d in exc.error_diagnostics]) from None
        if not verified:
            raise ModelImportError("the imported module does not verify", ["MLIR's verifier rejected it without a diagnostic"])
        errors = verify_onnx(module)
    if errors and strict:
        raise ModelImportError("the imported module breaks the ONNX dialect's rules", [str(e) for e in errors])
    if errors:
        warnings.warn("the imported module breaks the ONNX dialect's rules:\n  " + "\n  ".join(str(e) for e in errors), stacklevel=3)


def load_model(model: onnx.ModelProto | str | pathlib.Path | bytes) -> tuple[onnx.ModelProto, pathlib.Path | None]:
    """The ModelProto and the folder its external data is relative to (None for in-memory models).

    External data is not loaded here: `tensors` maps it lazily from inside that folder.
    """
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(model))
        except Exception as exc:  # protobuf raises DecodeError (and RuntimeWarning-ish errors)
            raise ModelImportError("cannot parse the model", [f"the bytes are not a valid ONNX ModelProto ({exc})"]) from None
        return proto, None
    if isinstance(model, (str, pathlib.Path)):
        from onnxc.importers.external_data import load_model_proto

        path = pathlib.Path(model)
        return load_model_proto(path), path.resolve().parent
    raise ModelImportError("cannot import", [f"expected a ModelProto, a path or bytes, got {type(model).__name__}"])


# ------------------------------------------------------------------------------------------ helpers


def sanitize_symbol(name: str, fallback: str = "main_graph") -> str:
    """A valid MLIR bare symbol name for `name` (letters, digits, `_`, `$`, `.`, not starting with a digit)."""
    s = re.sub(r"[^A-Za-z0-9_$.]", "_", name or "")
    if not s:
        s = fallback
    if s[0].isdigit() or s[0] in "$.":
        s = "_" + s
    return s


def describe_node(node: onnx.NodeProto, opset: int | None) -> str:
    """`node 'n' (Add, opset 17)` for diagnostics."""
    dom = f"{node.domain}::" if node.domain not in ("", "ai.onnx") else ""
    at = f", opset {opset}" if opset is not None else ""
    return f"node '{node_label(node)}' ({dom}{node.op_type}{at})"


def decode_model_version(version: int) -> str | None:
    """`"MAJOR.MINOR.PATCH"` for a semver-packed model_version (high four bytes non-zero), else None."""
    if version < 0:
        version &= (1 << 64) - 1
    if version >> 32 == 0:
        return None
    return f"{version >> 48}.{(version >> 32) & 0xFFFF}.{version & 0xFFFFFFFF}"


def _max_opset(domain: str) -> int | None:
    versions = [v for op in OPS if op.domain == domain for v in op.since_versions]
    return max(versions) if versions else None


_MAX_OPSET_CACHE: dict[str, int | None] = {}


def max_opset(domain: str) -> int | None:
    """The newest opset version the installed schemas define for a known domain."""
    domain = "" if domain == "ai.onnx" else domain
    if domain not in _MAX_OPSET_CACHE:
        newest = None
        try:
            newest = onnx.defs.onnx_opset_version() if domain == "" else None
            mapping = onnx.defs.get_all_schemas_with_history()
            vs = [s.since_version for s in mapping if s.domain == domain]
            if vs:
                newest = max([newest or 0, *vs])
        except AttributeError:  # pragma: no cover - onnx always has the API
            newest = _max_opset(domain)
        _MAX_OPSET_CACHE[domain] = newest
    return _MAX_OPSET_CACHE[domain]


# --------------------------------------------------------------------------------- type fallback


def parse_type_string(text: str) -> ir.Type | None:
    """The MLIR type a schema type string denotes (`tensor(float)`, `seq(tensor(int64))`,
    `map(int64, float)`), tensors unranked; None if it is not one."""
    text = text.strip()
    if "(" not in text:
        elem = T.BY_TYPE_STR.get(text)
        return ir.UnrankedTensorType.get(ir.Type.parse(elem.mlir)) if elem else None
    head, inner = text[: text.index("(")], text[text.index("(") + 1 : -1]
    if head == "tensor":
        elem = T.BY_TYPE_STR.get(inner)
        return ir.UnrankedTensorType.get(ir.Type.parse(elem.mlir)) if elem else None
    if head == "sparse_tensor":
        t = parse_type_string(f"tensor({inner})")
        return T.sparse_type(t) if t else None
    if head == "seq":
        t = parse_type_string(inner)
        return T.seq_type(t) if t else None
    if head == "optional":
        t = parse_type_string(inner)
        return T.opt_type(t) if t else None
    if head == "map":
        parts = T.split_params(inner)
        key = T.BY_TYPE_STR.get(parts[0]) if len(parts) == 2 else None
        val = parse_type_string(parts[1]) if len(parts) == 2 else None
        return T.map_type(ir.Type.parse(key.mlir), val) if key and val else None
    return None


def _element_of(t: ir.Type) -> ir.Type | None:
    if isinstance(t, ir.RankedTensorType) or isinstance(t, ir.UnrankedTensorType):
        return ir.ShapedType(t).element_type
    return None


def fallback_result_type(info: OpInfo, index: int, operand_types: Sequence[ir.Type | None], attrs: Mapping[str, ir.Attribute]) -> ir.Type | None:
    """A result type from the schema alone (no shape): a fixed type, a constraint with one allowed
    type, or the type bound to the same constraint by an operand. None when the schema cannot tell."""
    if not info.outputs:
        return None
    param = info.outputs[min(index, len(info.outputs) - 1)]
    fixed = parse_type_string(param.type_str)
    if fixed is not None:
        return fixed
    allowed = dict(info.type_constraints).get(param.type_str, ())
    if "to" in attrs and info.op_type in ("Cast",):
        try:
            dt = ir.IntegerAttr(attrs["to"]).value
            return ir.UnrankedTensorType.get(T.element_type(dt))
        except (ValueError, KeyError, TypeError):  # not an int attribute, or no such ONNX dtype
            return None
    for i, formal in enumerate(info.inputs):
        if formal.type_str != param.type_str:
            continue
        # the variadic last input covers every remaining operand
        candidates = operand_types[i:] if i == len(info.inputs) - 1 else operand_types[i : i + 1]
        for t in candidates:
            if t is None or isinstance(t, ir.NoneType):
                continue
            elem = _element_of(t)
            return ir.UnrankedTensorType.get(elem) if elem is not None else t
    if len(allowed) == 1:
        return parse_type_string(allowed[0])
    return None


# ------------------------------------------------------------------------------------ the importer



#: Initializers with more elements than this are given to onnx's shape inference without their
#: data (`_without_weight_data`); shape-like tensors (Reshape targets, axes) are far smaller.
_INFERENCE_STUB_ELEMENTS = 4096


def _copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Copy every set field of the protobuf message `src` into `dst` but `skip`."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


#: The external-data location of a stub initializer (names no file).
_STUB_LOCATION = "onnxc-shape-inference-stub"


def _is_stub(t: onnx.TensorProto) -> bool:
    """Whether `t` is a stub made by `_without_weight_data`."""
    return t.data_location == onnx.TensorProto.EXTERNAL and len(t.external_data) == 1 and t.external_data[0].value == _STUB_LOCATION


def _without_weight_data(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` whose large main-graph initializers carry their name, type and dims but
    no data, and how many were stubbed (0: `model` itself is returned).

    Why: onnx's shape inference serializes the whole model to C++ and parses its result back, and
    the importer measured its size first: 5.3 s of BERT-base's 5.9 s import went to moving 437 MB
    of weights that inference never reads (it needs their types and dims; data propagation reads
    only small integer tensors). A stub is marked external data (with a location that names no
    file): inference takes dims from it and does not load it."""
    g = model.graph
    big = [
        i for i, t in enumerate(g.initializer)
        if t.HasField("raw_data") and t.data_location != onnx.TensorProto.EXTERNAL
        and math.prod(t.dims) > _INFERENCE_STUB_ELEMENTS
    ]
    if not big:
        return model, 0
    skeleton = onnx.ModelProto()
    _copy_fields(model, skeleton, skip="graph")
    _copy_fields(g, skeleton.graph, skip="initializer")
    stubbed = set(big)
    for i, t in enumerate(g.initializer):
        if i not in stubbed:
            skeleton.graph.initializer.append(t)
            continue
        stub = skeleton.graph.initializer.add()
        stub.name = t.name
        stub.data_type = t.data_type
        stub.dims.extend(t.dims)
        stub.data_location = onnx.TensorProto.EXTERNAL
        entry = stub.external_data.add()
        entry.key, entry.value = "location", _STUB_LOCATION
    return skeleton, len(big)

@dataclasses.dataclass
class _Specialization:
    func_op: func.FuncOp
    group: tuple[str, str, str]  # (domain, name, overload)
    calls: list[ir.Operation] = dataclasses.field(default_factory=list)


class Scope:
    """ONNX names visible in one graph: its own values, then the enclosing graphs' (lexical scoping)."""

    def __init__(self, parent: "Scope | None" = None) -> None:
        self.parent = parent
        self.values: dict[str, ir.Value] = {}

    def lookup(self, name: str) -> ir.Value | None:
        scope: Scope | None = self
        while scope is not None:
            v = scope.values.get(name)
            if v is not None:
                return v
            scope = scope.parent
        return None

    def names(self) -> set[str]:
        out: set[str] = set()
        scope: Scope | None = self
        while scope is not None:
            out.update(scope.values)
            scope = scope.parent
        return out


class ModelImporter:
    """Imports one ModelProto. Construct, then `run()` returns the module."""

    def __init__(self, model: onnx.ModelProto, base_dir: pathlib.Path | None, config: ImportConfig, context: ir.Context) -> None:
        self.original = model
        self.model = model
        self.base_dir = base_dir
        self.config = config
        self.ctx = context
        self.problems: list[str] = []
        self.custom_ops: dict[tuple[str, str], int] = {}
        self.functions: dict[tuple[str, str, str], onnx.FunctionProto] = {}
        self.specializations: dict[Any, _Specialization] = {}
        self.called: set[tuple[str, str, str]] = set()
        self.symbols: set[str] = set()
        self.module: ir.Module | None = None
        self._tensors: Any = None
        # Main-graph initializers by name, for the stubs shape inference was given (`_infer_shapes`).
        self._stubbed: dict[str, onnx.TensorProto] = {}

    # ---------------------------------------------------------------- entry
    def run(self) -> ir.Module:
        self._check_versions()
        self._validate()
        self.model = self._infer_shapes(self.model)
        for f in self.model.functions:
            self.functions[(f.domain, f.name, f.overload)] = f
        try:
            with self.ctx, ir.Location.unknown():
                return self._build()
        except ModelImportError:
            raise
        except (OnnxcError, T.UnsupportedTypeError, attr_mod.AttributeKindError) as exc:
            raise ModelImportError(f"cannot import model{self._model_label()}", [str(exc)]) from None

    def _model_label(self) -> str:
        name = self.original.graph.name
        return f" '{name}'" if name else ""

    @property
    def tensors(self) -> Any:
        if self._tensors is None:
            from onnxc.importers import tensors

            self._tensors = tensors
        return self._tensors

    # ------------------------------------------------------------ checks
    def _check_versions(self) -> None:
        m = self.model
        problems: list[str] = []
        newer: list[str] = []
        if not m.HasField("graph"):
            problems.append("the model has no graph")
        if m.ir_version > onnx.IR_VERSION:
            newer.append(f"IR version {m.ir_version} is newer than the newest this onnx supports ({onnx.IR_VERSION})")
        seen: set[str] = set()
        for e in m.opset_import:
            d = "" if e.domain == "ai.onnx" else e.domain
            if d in seen:
                problems.append(f"opset_import lists domain '{e.domain or 'ai.onnx'}' twice")
            seen.add(d)
            if known_domain(d):
                newest = max_opset(d)
                if newest is not None and e.version > newest:
                    newer.append(
                        f"opset {e.version} of domain '{e.domain or 'ai.onnx'}' is newer than the installed schemas "
                        f"(newest: {newest}); nodes cannot be bound per the versioning rules"
                    )
                if e.version < 1:
                    problems.append(f"opset version {e.version} of domain '{e.domain or 'ai.onnx'}' is not valid")
        if newer and not self.config.allow_newer_opset:
            problems += [p + " (ImportConfig(allow_newer_opset=True) binds to the newest known schemas with a warning)" for p in newer]
        elif newer:
            warnings.warn("; ".join(newer) + ": binding to the newest known schemas", stacklevel=3)
        if problems:
            raise ModelImportError(f"cannot import model{self._model_label()}", problems)

    def _validate(self) -> None:
        if not self.config.validate:
            return
        problems = validate_model(self.model, self.config, self.base_dir)
        if problems:
            raise ModelImportError(f"model{self._model_label()} is invalid ({len(problems)} problem(s))", problems)

    def _infer_shapes(self, model: onnx.ModelProto) -> onnx.ModelProto:
        if not self.config.run_shape_inference:
            return model
        # Outside the `try`: a failure here is onnxc's bug, not inference declining a model.
        skeleton, weights = _without_weight_data(model)
        if skeleton.ByteSize() > self.config.shape_inference_size_limit:  # what inference is given
            return model
        try:
            # Declared static dims that follow a dynamic input dim give way to it (issue 11).
            from onnxc.importers.validate import drop_known_inference_errors, loosen_declared_dims

            skeleton = loosen_declared_dims(skeleton)
            inferred = onnx.shape_inference.infer_shapes(skeleton, check_type=False, strict_mode=False, data_prop=True)
            if weights:
                # The stubs stay; `_tensor_attr` reads each one's data from the caller's model.
                # Copying the initializers back into the inferred model moved every weight once
                # more (0.44 s and 437 MB of BERT-base's import).
                self._stubbed = {t.name: t for t in model.graph.initializer}
            return drop_known_inference_errors(inferred)
        except Exception:  # noqa: BLE001 - onnx's shape inference raises InferenceError, ValidationError,
            # RuntimeError...: inference is a help, never a requirement
            return model

    # ------------------------------------------------------------- build
    def _build(self) -> ir.Module:
        m = self.model
        module = ir.Module.create()
        self.module = module
        self.opsets = opsets(m.opset_import)
        if self.config.allow_newer_opset:
            for d, v in list(self.opsets.items()):
                newest = max_opset(d) if known_domain(d) else None
                if newest is not None and v > newest:
                    self.opsets[d] = newest
        self._set_module_attributes(module)
        main_name = sanitize_symbol(m.graph.name)
        self.symbols.add(main_name)
        with ir.InsertionPoint(module.body):
            self._import_main(m.graph, main_name)
        module.operation.attributes["onnx.main"] = ir.FlatSymbolRefAttr.get(main_name)
        self._finish_functions(module)
        if self.custom_ops and self.config.warn_custom_ops:
            listed = ", ".join(f"{d}::{t} ({n}x)" for (d, t), n in sorted(self.custom_ops.items()))
            warnings.warn(f"imported {sum(self.custom_ops.values())} node(s) of domains without schemas as onnx.custom: {listed}", stacklevel=3)
        if self.config.inline_functions:
            from onnxc.importers.functions import inline_functions

            inline_functions(module.operation)
        return module

    def _set_module_attributes(self, module: ir.Module) -> None:
        m = self.model
        a = module.operation.attributes
        i64 = ir.IntegerType.get_signless(64)
        a["onnx.ir_version"] = ir.IntegerAttr.get(i64, int(m.ir_version))
        a["onnx.opset_import"] = opset_attr(m.opset_import)
        for field in ("producer_name", "producer_version", "domain", "doc_string"):
            if getattr(m, field):
                a[f"onnx.{field}"] = ir.StringAttr.get(getattr(m, field))
        if m.model_version:
            a["onnx.model_version"] = ir.IntegerAttr.get(i64, int(m.model_version))
            semver = decode_model_version(int(m.model_version))
            if semver:
                a["onnx.model_semver"] = ir.StringAttr.get(semver)
        if len(m.metadata_props):
            a["onnx.metadata_props"] = _props_attr(m.metadata_props)
        if len(m.training_info) and self.config.keep_training_info:
            a["onnx.training_info"] = ir.DictAttr.get(
                {
                    "note": ir.StringAttr.get(TRAINING_NOTE),
                    "protos": ir.ArrayAttr.get([ir.StringAttr.get(b64(t.SerializeToString())) for t in m.training_info]),
                }
            )
        if len(m.configuration):
            a["onnx.configuration"] = ir.ArrayAttr.get(
                [
                    ir.DictAttr.get(
                        {
                            "name": ir.StringAttr.get(c.name),
                            "num_devices": ir.IntegerAttr.get(i64, int(c.num_devices)),
                            "device": ir.ArrayAttr.get([ir.StringAttr.get(d) for d in c.device]),
                        }
                    )
                    for c in m.configuration
                ]
            )

    # ------------------------------------------------------------- graphs
    def _graph_types(self, graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
        """Declared and inferred types of the graph's values (not of nested subgraphs)."""
        types: dict[str, onnx.TypeProto] = {}
        for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
            if vi.HasField("type") and vi.type.WhichOneof("value") is not None:
                types[vi.name] = vi.type
        return types

    def _value_type(self, vi: onnx.ValueInfoProto, where: str) -> ir.Type:
        if not vi.HasField("type") or vi.type.WhichOneof("value") is None:
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"{where} '{vi.name}' has no type"])
        return self._type(vi.type, f"{where} '{vi.name}'")

    def _type(self, tp: onnx.TypeProto, what: str) -> ir.Type:
        try:
            return T.type_from_proto(tp)
        except (T.UnsupportedTypeError, ValueError) as exc:
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"{what}: {exc}"]) from None

    def _import_main(self, graph: onnx.GraphProto, name: str) -> func.FuncOp:
        arg_types = [self._value_type(vi, "graph input") for vi in graph.input]
        # Result types are those of the returned values, known once the body is built.
        f = func.FuncOp(name, ir.FunctionType.get(arg_types, []))
        if graph.name != name:
            f.attributes["onnx.name"] = ir.StringAttr.get(graph.name)
        if graph.doc_string:
            f.attributes["onnx.doc_string"] = ir.StringAttr.get(graph.doc_string)
        extras = onnx.GraphProto()
        extras.quantization_annotation.extend(graph.quantization_annotation)
        extras.metadata_props.extend(graph.metadata_props)
        if extras.ByteSize():
            f.attributes["onnx.graph_extras"] = ir.StringAttr.get(b64(extras.SerializeToString()))
        block = f.add_entry_block([ir.Location.name(vi.name) for vi in graph.input])
        inits = {t.name: t for t in graph.initializer}
        f.arg_attrs = ir.ArrayAttr.get([self._value_attrs(vi, inits.get(vi.name)) for vi in graph.input])
        f.res_attrs = ir.ArrayAttr.get([self._value_attrs(vi, None) for vi in graph.output])
        scope = Scope()
        for vi, arg in zip(graph.input, block.arguments):
            scope.values[vi.name] = arg
        input_names = {vi.name for vi in graph.input}
        with ir.InsertionPoint(block):
            results = self._import_body(graph, scope, self.opsets, skip_initializers=input_names)
            func.ReturnOp(results)
        f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(arg_types, [r.type for r in results]))
        return f

    def _value_attrs(self, vi: onnx.ValueInfoProto, default: onnx.TensorProto | None) -> ir.DictAttr:
        d: dict[str, ir.Attribute] = {"onnx.name": ir.StringAttr.get(vi.name)}
        tt = None
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
        elif vi.type.HasField("sparse_tensor_type"):
            tt = vi.type.sparse_tensor_type
        if tt is not None and tt.HasField("shape") and any(dim.HasField("dim_param") for dim in tt.shape.dim):
            d["onnx.dim_params"] = ir.ArrayAttr.get([ir.StringAttr.get(dim.dim_param if dim.HasField("dim_param") else "") for dim in tt.shape.dim])
        if any(dim.denotation for dim in (tt.shape.dim if tt is not None and tt.HasField("shape") else [])):
            d["onnx.denotations"] = ir.ArrayAttr.get([ir.StringAttr.get(dim.denotation) for dim in tt.shape.dim])
        if vi.type.denotation:
            d["onnx.type_denotation"] = ir.StringAttr.get(vi.type.denotation)
        if vi.doc_string:
            d["onnx.doc_string"] = ir.StringAttr.get(vi.doc_string)
        if default is not None:
            d["onnx.default"] = self._tensor_attr(default)
        return ir.DictAttr.get(d)

    def _tensor_attr(self, t: onnx.TensorProto) -> ir.Attribute:
        if _is_stub(t):  # a shape-inference stub (`_without_weight_data`): the model's tensor
            t = self._stubbed[t.name]
        try:
            return self.tensors.tensor_to_attribute(t, self.base_dir, resource_threshold=self.config.resource_threshold)
        except ModelImportError:
            raise
        except (OnnxcError, ValueError, TypeError) as exc:
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"tensor '{t.name}': {exc}"]) from None

    def _sparse_attr(self, sp: onnx.SparseTensorProto) -> ir.Attribute:
        try:
            return self.tensors.sparse_tensor_to_attribute(sp, self.base_dir)
        except ModelImportError:
            raise
        except (OnnxcError, ValueError, TypeError) as exc:
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"sparse tensor '{sp.values.name}': {exc}"]) from None

    def _import_body(
        self,
        graph: onnx.GraphProto,
        scope: Scope,
        opsets: Mapping[str, int],
        *,
        skip_initializers: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> list[ir.Value]:
        """Import initializers and nodes of `graph` at the current insertion point; returns the
        values of the graph's outputs (in order)."""
        types = self._graph_types(graph)
        for t in graph.initializer:
            if t.name in skip_initializers:
                continue
            value = self._tensor_attr(t)
            rtype = _attr_type(value)
            op = onnx_op("Constant", [], [rtype], {"value": value}, loc=node_location(t.name, INITIALIZER_KIND))
            scope.values[t.name] = op.results[0]
        for sp in graph.sparse_initializer:
            value = self._sparse_attr(sp)
            rtype = _attr_type(value)
            op = onnx_op("Constant", [], [rtype], {"sparse_value": value}, loc=node_location(sp.values.name, SPARSE_INITIALIZER_KIND))
            scope.values[sp.values.name] = op.results[0]
        order = self._order(graph, scope)
        for index in order:
            self._import_node(graph.node[index], scope, opsets, types)
        results: list[ir.Value] = []
        missing: list[str] = []
        for vi in graph.output:
            v = scope.lookup(vi.name)
            if v is None:
                missing.append(f"graph '{graph.name}' output '{vi.name}' is produced by no node, input or initializer")
                continue
            results.append(v)
        if missing:
            raise ModelImportError(f"cannot import model{self._model_label()}", missing)
        return results

    def _order(self, graph: onnx.GraphProto, scope: Scope) -> list[int]:
        return topological_order(graph, scope.names())

    # -------------------------------------------------------------- nodes
    def _import_node(self, node: onnx.NodeProto, scope: Scope, opsets: Mapping[str, int], types: Mapping[str, onnx.TypeProto]) -> None:
        domain = "" if node.domain == "ai.onnx" else node.domain
        opset = opsets.get(domain)
        label = node_label(node)
        who = describe_node(node, opset)
        loc = node_location(label, node.op_type)
        operands: list[ir.Value | None] = []
        for name in node.input:
            if not name:
                operands.append(None)
                continue
            v = scope.lookup(name)
            if v is None:
                raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: input '{name}' is not defined before use"])
            operands.append(v)
        info = None
        if known_domain(domain):
            if opset is None:
                raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: the model imports no opset for domain '{node.domain}'"])
            info = lookup(node.op_type, domain, opset)
        fkey = (node.domain, node.op_type, node.overload)
        with loc:
            if info is not None:
                op = self._schema_op(node, info, operands, scope, opsets, types, who, opset)
            elif fkey in self.functions:
                op = self._call(node, self.functions[fkey], operands, who, opsets)
            elif known_domain(domain):
                versions = schema_versions(node.op_type, domain)
                why = f"defined only from opset {versions[0]}" if versions else "not an operator of this domain"
                raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: no schema ({why})"])
            else:
                if self.config.strict_custom_ops:
                    raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: domain '{node.domain}' has no schemas (strict_custom_ops)"])
                op = self._custom(node, operands, types, who)
        self._set_node_extras(op, node)
        outs = [o for o in node.output]
        for name, res in zip(outs, op.results):
            if name:
                scope.values[name] = res

    def _set_node_extras(self, op: ir.Operation, node: onnx.NodeProto) -> None:
        extras = onnx.NodeProto()
        if node.doc_string:
            extras.doc_string = node.doc_string
        extras.metadata_props.extend(node.metadata_props)
        extras.device_configurations.extend(node.device_configurations)
        if extras.ByteSize():
            op.attributes["onnx.node_extras"] = ir.StringAttr.get(b64(extras.SerializeToString()))

    def _result_types(self, node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto], who: str,
                      fallback: Any) -> list[ir.Type | None]:  # fmt: skip
        out: list[ir.Type | None] = []
        for i, name in enumerate(node.output):
            if not name:
                out.append(None)
                continue
            tp = types.get(name)
            t = self._type(tp, f"{who} output '{name}'") if tp is not None else None
            if t is None:
                t = fallback(i)
            if t is None:
                raise ModelImportError(
                    f"cannot import model{self._model_label()}",
                    [f"{who}: the type of output '{name}' is unknown (no value_info, shape inference gave none, and the schema does not fix it)"],
                )
            out.append(t)
        return out

    def _convert_attribute(self, a: onnx.AttributeProto, who: str) -> ir.Attribute:
        kind = attr_kind(a)
        try:
            if kind == AP.INT:
                return attr_mod.to_mlir("INT", a.i)
            if kind == AP.FLOAT:
                return attr_mod.to_mlir("FLOAT", a.f)
            if kind == AP.STRING:
                return attr_mod.to_mlir("STRING", a.s)
            if kind == AP.INTS:
                return attr_mod.to_mlir("INTS", list(a.ints))
            if kind == AP.FLOATS:
                return attr_mod.to_mlir("FLOATS", list(a.floats))
            if kind == AP.STRINGS:
                return attr_mod.to_mlir("STRINGS", list(a.strings))
            if kind == AP.TENSOR:
                return self._tensor_attr(a.t)
            if kind == AP.TENSORS:
                return ir.ArrayAttr.get([self._tensor_attr(t) for t in a.tensors])
            if kind == AP.SPARSE_TENSOR:
                return self._sparse_attr(a.sparse_tensor)
            if kind == AP.SPARSE_TENSORS:
                return ir.ArrayAttr.get([self._sparse_attr(s) for s in a.sparse_tensors])
            if kind == AP.TYPE_PROTO:
                return ir.TypeAttr.get(self._type(a.tp, f"{who} attribute '{a.name}'"))
            if kind == AP.TYPE_PROTOS:
                return ir.ArrayAttr.get([ir.TypeAttr.get(self._type(tp, f"{who} attribute '{a.name}'")) for tp in a.type_protos])
        except attr_mod.AttributeKindError as exc:
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: attribute '{a.name}': {exc}"]) from None
        raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: attribute '{a.name}' has no value (type {kind})"])

    def _schema_op(self, node: onnx.NodeProto, info: OpInfo, operands: list[ir.Value | None], scope: Scope,
                   opsets: Mapping[str, int], types: Mapping[str, onnx.TypeProto], who: str, opset: int | None) -> ir.Operation:  # fmt: skip
        attrs: dict[str, ir.Attribute] = {}
        graphs: dict[str, onnx.GraphProto] = {}
        problems: list[str] = []
        for a in node.attribute:
            if a.ref_attr_name:
                problems.append(f"{who}: attribute '{a.name}' refers to '{a.ref_attr_name}' outside a function body")
                continue
            spec = info.attr(a.name)
            kind = attr_kind(a)
            if spec is None:
                problems.append(f"{who}: unknown attribute '{a.name}' (the schema has: {', '.join(x.name for x in info.attributes) or 'none'})")
                continue
            kind_name = AP.AttributeType.Name(kind)
            if spec.kind != kind_name and not (spec.kind == "SPARSE_TENSOR" and kind_name == "TENSOR"):
                problems.append(f"{who}: attribute '{a.name}' must be {spec.kind}, got {kind_name}")
                continue
            if kind == AP.GRAPH:
                graphs[a.name] = a.g
                continue
            attrs[a.name] = self._convert_attribute(a, who)
        missing = [x.name for x in info.attributes if x.required and x.name not in attrs and x.name not in graphs]
        if missing:
            problems.append(f"{who}: missing required attribute(s) {', '.join(missing)}")
        if problems:
            raise ModelImportError(f"cannot import model{self._model_label()}", problems)
        operand_types = [v.type if v is not None else None for v in operands]
        rtypes = self._result_types(node, types, who, lambda i: fallback_result_type(info, i, operand_types, attrs))
        none = None
        if any(v is None for v in operands) or len(operands) < len(info.inputs):
            none = none_value()
        try:
            op = onnx_op(info.full_name, operands, rtypes, attrs, none=none)
        except OnnxBuildError as exc:
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: {exc}"]) from None
        if none is not None and not list(none.uses):
            none.owner.erase()
        for region_index, gname in enumerate(info.regions):
            g = graphs.get(gname)
            if g is None:
                continue
            self._import_region(op.regions[region_index], g, scope, opsets, who, node, info, operands)
        return op

    def _import_region(self, region: ir.Region, g: onnx.GraphProto, scope: Scope, opsets: Mapping[str, int], who: str,
                       node: onnx.NodeProto, info: OpInfo, operands: Sequence[ir.Value | None]) -> None:  # fmt: skip
        arg_types: list[ir.Type] = []
        implied = _implied_subgraph_input_types(node, operands, len(g.input))
        for i, vi in enumerate(g.input):
            if vi.HasField("type") and vi.type.WhichOneof("value") is not None:
                arg_types.append(self._type(vi.type, f"{who} subgraph '{g.name}' input '{vi.name}'"))
            elif implied[i] is not None:
                arg_types.append(implied[i])
            else:
                raise ModelImportError(
                    f"cannot import model{self._model_label()}",
                    [f"{who}: subgraph '{g.name}' input '{vi.name}' has no type and none can be implied"],
                )
        block = region.blocks.append(*arg_types, arg_locs=[ir.Location.name(vi.name) for vi in g.input])
        inner = Scope(scope)
        for vi, arg in zip(g.input, block.arguments):
            inner.values[vi.name] = arg
        with ir.InsertionPoint(block):
            results = self._import_body(g, inner, opsets)
            yield_values(results)

    def _custom(self, node: onnx.NodeProto, operands: list[ir.Value | None], types: Mapping[str, onnx.TypeProto], who: str) -> ir.Operation:
        self.custom_ops[(node.domain, node.op_type)] = self.custom_ops.get((node.domain, node.op_type), 0) + 1
        attrs: dict[str, ir.Attribute] = {}
        for a in node.attribute:
            if a.ref_attr_name:
                raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: attribute '{a.name}' refers to '{a.ref_attr_name}' outside a function body"])
            if not a.name or a.name in attrs or a.name in ("domain", "op_type") or "." in a.name:
                raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: attribute name '{a.name}' is repeated or reserved"])
            kind = attr_kind(a)
            if kind in (AP.GRAPH, AP.GRAPHS):
                gs = [a.g] if kind == AP.GRAPH else list(a.graphs)
                attrs[a.name] = ir.DictAttr.get(
                    {"onnx_graph" if kind == AP.GRAPH else "onnx_graphs": ir.ArrayAttr.get([ir.StringAttr.get(b64(g.SerializeToString())) for g in gs])}
                )
                continue
            attrs[a.name] = self._convert_attribute(a, who)
        rtypes = self._result_types(node, types, who, lambda i: None)
        none = None
        values: list[ir.Value] = []
        for v in operands:
            if v is None:
                none = none or none_value()
                v = none
            values.append(v)
        return custom_op(node.domain, node.op_type, values, [t if t is not None else ir.NoneType.get() for t in rtypes], attrs)

    # ---------------------------------------------------------- functions
    def _call(self, node: onnx.NodeProto, fn: onnx.FunctionProto, operands: list[ir.Value | None], who: str,
              opsets: Mapping[str, int]) -> ir.Operation:  # fmt: skip
        if any(v is None for v in operands):
            # A function input may be omitted with "": the body sees it as absent.
            pass
        if len(operands) > len(fn.input):
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: function takes {len(fn.input)} input(s), got {len(operands)}"])
        if len(node.output) > len(fn.output):
            raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: function has {len(fn.output)} output(s), the node names {len(node.output)}"])
        declared = {n for n in fn.attribute if n} | {a.name for a in fn.attribute_proto if a.name}
        binding: dict[str, onnx.AttributeProto] = {a.name: a for a in fn.attribute_proto if a.name}
        for a in node.attribute:
            if not a.name or a.name not in declared:
                raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: function '{fn.name}' has no attribute '{a.name}'"])
            if a.ref_attr_name:
                raise ModelImportError(f"cannot import model{self._model_label()}", [f"{who}: attribute '{a.name}' refers to '{a.ref_attr_name}' outside a function body"])
            binding[a.name] = a
        arg_types = [v.type if v is not None else ir.NoneType.get() for v in operands]
        key = (fn.domain, fn.name, fn.overload, tuple(arg_types),  # MLIR types hash and compare by value
               tuple(sorted((k, v.SerializeToString(deterministic=True)) for k, v in binding.items())))  # fmt: skip
        spec = self.specializations.get(key)
        if spec is None:
            spec = self._specialize(fn, arg_types, binding, operands, who)
            self.specializations[key] = spec
        self.called.add((fn.domain, fn.name, fn.overload))
        f = spec.func_op
        values = [v if v is not None else none_value() for v in operands]
        call = func.CallOp(list(f.type.results), ir.FlatSymbolRefAttr.get(f.sym_name.value), values)
        spec.calls.append(call.operation)
        # Outputs the node does not name are still results of the call (the callee returns them all).
        return call.operation

    def _specialize(self, fn: onnx.FunctionProto, arg_types: list[ir.Type], binding: Mapping[str, onnx.AttributeProto],
                    operands: Sequence[ir.Value | None], who: str) -> _Specialization:  # fmt: skip
        graph = onnx.GraphProto(name=fn.name)
        present_inputs = list(fn.input)
        for i, name in enumerate(present_inputs):
            vi = graph.input.add()
            vi.name = name
            if i < len(arg_types) and not isinstance(arg_types[i], ir.NoneType):
                vi.type.CopyFrom(_type_proto(arg_types[i]))
        for name in fn.output:
            graph.output.add().name = name
        graph.value_info.extend(fn.value_info)
        omitted = {fn.input[i] for i in range(len(fn.input)) if i >= len(operands) or operands[i] is None}
        for n in fn.node:
            graph.node.append(substitute(n, binding, omitted))
        # The function's own opset_import decides its nodes' versions; the model's fills in gaps.
        fopsets = dict(self.opsets)
        fopsets.update(opsets(fn.opset_import))
        typed = self._infer_function(graph, fopsets)
        types = self._graph_types(typed)
        for vi in typed.output:
            pass
        sym = self._unique_symbol(sanitize_symbol(fn.name, "function"))
        with ir.InsertionPoint(self.module.body), ir.Location.name(fn.name, childLoc=ir.Location.name("function")):
            # the result types are known only after the body: build the body in a scratch op first
            f = func.FuncOp(sym, ir.FunctionType.get([t for t in arg_types], []), visibility="private")
        block = f.add_entry_block([ir.Location.name(n) for n in fn.input[: len(arg_types)]])
        scope = Scope()
        for name, arg in zip(fn.input, block.arguments):
            if name not in omitted:
                scope.values[name] = arg
        with ir.InsertionPoint(block):
            # An omitted function input ("" at the call site) is absent inside the body too.
            results = self._import_body(_with_types(typed, types), scope, fopsets)
            func.ReturnOp(results)
        f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(arg_types, [r.type for r in results]))
        f.arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get({"onnx.name": ir.StringAttr.get(n)}) for n in fn.input[: len(arg_types)]])
        f.res_attrs = ir.ArrayAttr.get([ir.DictAttr.get({"onnx.name": ir.StringAttr.get(n)}) for n in fn.output])
        fa = f.attributes
        fa["onnx.function"] = ir.StringAttr.get(fn.name)
        fa["onnx.domain"] = ir.StringAttr.get(fn.domain)
        if fn.overload:
            fa["onnx.overload"] = ir.StringAttr.get(fn.overload)
        i64 = ir.IntegerType.get_signless(64)
        fa["onnx.opset_import"] = opset_attr(fn.opset_import)
        if binding:
            fa["onnx.attributes"] = ir.DictAttr.get({k: self._binding_attr(v, who) for k, v in sorted(binding.items())})
        if fn.doc_string:
            fa["onnx.doc_string"] = ir.StringAttr.get(fn.doc_string)
        extras = onnx.FunctionProto()
        extras.metadata_props.extend(fn.metadata_props)
        if extras.ByteSize():
            fa["onnx.function_extras"] = ir.StringAttr.get(b64(extras.SerializeToString()))
        return _Specialization(f, (fn.domain, fn.name, fn.overload))

    def _binding_attr(self, a: onnx.AttributeProto, who: str) -> ir.Attribute:
        kind = attr_kind(a)
        if kind in (AP.GRAPH, AP.GRAPHS):
            gs = [a.g] if kind == AP.GRAPH else list(a.graphs)
            return ir.DictAttr.get({"onnx_graph" if kind == AP.GRAPH else "onnx_graphs": ir.ArrayAttr.get([ir.StringAttr.get(b64(g.SerializeToString())) for g in gs])})
        return self._convert_attribute(a, who)

    def _infer_function(self, graph: onnx.GraphProto, opsets: Mapping[str, int]) -> onnx.GraphProto:
        if not self.config.run_shape_inference:
            return graph
        try:
            m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()],
                                       ir_version=max(self.model.ir_version, 10))  # fmt: skip
            m.functions.extend(self.model.functions)
            return onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False, data_prop=True).graph
        except Exception:  # noqa: BLE001 - as in _infer_shapes: a subgraph's inference is only a help
            return graph

    def _unique_symbol(self, base: str) -> str:
        name, i = base, 0
        while name in self.symbols:
            i += 1
            name = f"{base}_{i}"
        self.symbols.add(name)
        return name

    def _finish_functions(self, module: ir.Module) -> None:
        groups: dict[tuple[str, str, str], list[_Specialization]] = {}
        for spec in self.specializations.values():
            groups.setdefault(spec.group, []).append(spec)
        taken = {f.name for f in self.functions.values()}
        for (domain, name, overload), specs in groups.items():
            if len(specs) <= 1:
                continue
            # One function, several specializations: each is exported as its own function, under a
            # name of its own (`Name__s0`, ...) rather than an IR 10 overload, so that models of any
            # IR version and consumers keyed on (domain, name) (onnx.reference) can run the export.
            # The symbol follows the name, so a re-import of the export gives the same module.
            for i, spec in enumerate(specs):
                new = f"{name}__s{i}"
                while new in taken:
                    new += "_"
                taken.add(new)
                self.symbols.discard(spec.func_op.sym_name.value)
                sym = self._unique_symbol(sanitize_symbol(new, "function"))
                spec.func_op.attributes["sym_name"] = ir.StringAttr.get(sym)
                spec.func_op.attributes["onnx.function"] = ir.StringAttr.get(new)
                for call in spec.calls:
                    call.attributes["callee"] = ir.FlatSymbolRefAttr.get(sym)
        unused = [f for key, f in self.functions.items() if key not in self.called]
        if unused:
            module.operation.attributes["onnx.unused_functions"] = ir.ArrayAttr.get([ir.StringAttr.get(b64(f.SerializeToString())) for f in unused])


# -------------------------------------------------------------------------------- small helpers


def _type_proto(t: ir.Type) -> onnx.TypeProto:

    return type_proto(t)


def _props_attr(props: Iterable[onnx.StringStringEntryProto]) -> ir.Attribute:
    """metadata_props as a dictionary; as an array of [key, value] pairs where keys repeat or are
    empty (a dictionary cannot hold those: MLIR asserts on an empty attribute name)."""
    pairs = [(p.key, p.value) for p in props]
    keys = [k for k, _ in pairs]
    if all(keys) and len(set(keys)) == len(keys):
        return ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in pairs})
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.StringAttr.get(k), ir.StringAttr.get(v)]) for k, v in pairs])


def opset_attr(entries: Iterable[onnx.OperatorSetIdProto]) -> ir.Attribute:
    """opset_import as an ordered array of [domain, version] pairs. (A dictionary cannot hold the
    default domain "": MLIR asserts on an empty attribute name.)"""
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.StringAttr.get(e.domain), ir.IntegerAttr.get(i64, int(e.version))]) for e in entries])


def _attr_type(value: ir.Attribute) -> ir.Type:
    """The tensor type of an elements attribute (dense, dense_resource or sparse)."""
    try:
        return value.type
    except (AttributeError, ValueError, TypeError):  # an attribute kind the bindings give no type
        raise ModelImportError("cannot import model", [f"attribute {value} has no type"]) from None


def _with_types(graph: onnx.GraphProto, types: Mapping[str, onnx.TypeProto]) -> onnx.GraphProto:
    return graph


def _implied_subgraph_input_types(node: onnx.NodeProto, operands: Sequence[ir.Value | None], count: int) -> list[ir.Type | None]:
    """Types of subgraph inputs implied by the op when the subgraph does not declare them:
    Loop's body gets (iteration number: i64 scalar, condition: i1 scalar, the carried values)."""
    out: list[ir.Type | None] = [None] * count
    if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
        i64 = ir.IntegerType.get_signless(64)
        if count > 0:
            out[0] = ir.RankedTensorType.get([], i64)
        if count > 1:
            out[1] = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
        for i in range(2, count):
            j = i  # body input i is Loop input i (after M and cond)
            if j < len(operands) and operands[j] is not None:
                out[i] = operands[j].type
    return out


__all__ = ["ImportConfig", "ModelImportError", "ModelImporter", "import_context", "import_model", "load_model", "sanitize_symbol"]
