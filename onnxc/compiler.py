"""`onnxc.compile(model, target="cpu") -> CompiledModel`: import, lower, JIT, call with numpy.

The compiled model is called with numpy arrays, positionally or by ONNX input name, and returns
numpy arrays in graph output order (or a dict by name from `run`). Everything that could crash
native code is checked first, naming the ONNX input: rank, static dims, dims that share an ONNX
`dim_param` name, and dtype. Dynamic dims are bound at call time.

ONNX types that the lowered code holds in another numpy dtype (unsigned integers become signless
integers of the same width) are passed as views, so no data is copied.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from mlir import ir

from onnxc.errors import OnnxcError

TARGETS = ("cpu",)


class InputError(OnnxcError):
    """Arrays given to a compiled model do not match its ONNX inputs."""


@dataclass(frozen=True)
class IOSpec:
    """One ONNX input or output of a compiled model: name, numpy dtype, and dims (int for
    static, str for a named `dim_param`, None for unknown)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str | None, ...] | None
    default: np.ndarray | None = None  # an input's initializer: used when the caller omits it

    def describe(self) -> str:
        dims = "?" if self.dims is None else "x".join("?" if d is None else str(d) for d in self.dims)
        return f"{self.name}: {self.dtype} [{dims}]"


def io_specs(graph_values: Sequence[onnx.ValueInfoProto], defaults: Mapping[str, onnx.TensorProto] | None = None) -> list[IOSpec]:
    from onnx import numpy_helper

    from onnxc.dialect.types import BY_ONNX, numpy_dtype

    defaults = defaults or {}
    specs = []
    for v in graph_values:
        tt = v.type.tensor_type
        if v.type.WhichOneof("value") != "tensor_type" or tt.elem_type not in BY_ONNX:
            specs.append(IOSpec(v.name, np.dtype(object), None))
            continue
        dims: tuple[int | str | None, ...] | None = None
        if tt.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        default = numpy_helper.to_array(defaults[v.name]) if v.name in defaults else None
        specs.append(IOSpec(v.name, numpy_dtype(BY_ONNX[tt.elem_type]), dims, default))
    return specs


def _load(model: onnx.ModelProto | str | os.PathLike[str] | bytes) -> onnx.ModelProto:
    """The ModelProto (external data stays on disk: the importer maps it from the model's folder)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(str(model), load_external_data=False)


def _import_source(model: Any, proto: onnx.ModelProto) -> Any:
    """What to give the importer: the path when there is one, so external data resolves (safely)
    inside the model's folder; else the already loaded proto."""
    return model if isinstance(model, (str, os.PathLike)) else proto


@dataclass
class CompiledModel:
    """A model compiled for a target; call it like a function."""

    inputs: list[IOSpec]
    outputs: list[IOSpec]
    function: Any  # the target's compiled entry, called with arrays in input order
    target: str = "cpu"
    modules: dict[str, str] = field(default_factory=dict)  # IR text per stage, when kept

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        if len(args) > len(self.inputs):
            raise InputError(f"the model takes {len(self.inputs)} input(s) ({', '.join(self.input_names)}), got {len(args)}")
        bound: dict[str, Any] = {s.name: a for s, a in zip(self.inputs, args)}
        for name, value in kwargs.items():
            if name not in self.input_names:
                raise InputError(f"the model has no input '{name}' (inputs: {', '.join(self.input_names)})")
            if name in bound:
                raise InputError(f"input '{name}' given twice")
            bound[name] = value
        for spec in self.inputs:
            if spec.name not in bound and spec.default is not None:
                bound[spec.name] = spec.default
        missing = [n for n in self.input_names if n not in bound]
        if missing:
            raise InputError(f"missing input(s): {', '.join(missing)}")
        arrays: list[np.ndarray] = []
        dim_values: dict[str, tuple[int, str]] = {}
        for spec in self.inputs:
            a = np.asarray(bound[spec.name])
            if a.dtype != spec.dtype:
                raise InputError(f"input '{spec.name}' must have dtype {spec.dtype}, got {a.dtype}")
            if spec.dims == () and a.ndim > 0 and a.size == 1:
                a = a.reshape(())  # a one-element array for a scalar, as onnxruntime accepts
            if spec.dims is not None:
                if a.ndim != len(spec.dims):
                    raise InputError(f"input '{spec.name}' must have rank {len(spec.dims)} ({spec.describe()}), got shape {a.shape}")
                for axis, (want, got) in enumerate(zip(spec.dims, a.shape)):
                    if isinstance(want, int) and want != got:
                        raise InputError(f"input '{spec.name}' dim {axis} must be {want} ({spec.describe()}), got shape {a.shape}")
                    if isinstance(want, str):
                        seen = dim_values.setdefault(want, (got, spec.name))
                        if seen[0] != got:
                            raise InputError(
                                f"input '{spec.name}' dim {axis} is '{want}' = {got}, but input '{seen[1]}' bound '{want}' = {seen[0]}"
                            )
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def _adapt(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Arrays as the compiled function holds them: ONNX types the lowered code keeps in a
        signless integer of the same width (unsigned ints, float8/int4 stored as bytes) are
        passed as views, and a one-element array for a rank-0 argument as a scalar (onnxruntime
        accepts both spellings of a scalar, and so do ONNX's own test data)."""
        signature = getattr(self.function, "signature", None)
        if signature is None:
            return arrays
        out = []
        for a, spec in zip(arrays, signature.inputs):
            want = spec.dtype
            if a.dtype != want and a.dtype.itemsize == want.itemsize and want.kind in "iu" and a.dtype.kind != "O":
                a = a.view(want)
            if spec.rank == 0 and a.ndim > 0 and a.size == 1:
                a = a.reshape(())
            out.append(a)
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        """Run with arrays positionally or by ONNX input name; outputs in graph order."""
        arrays = self._adapt(self._bind(args, kwargs))
        results = self.function(*arrays)
        out = []
        for spec, r in zip(self.outputs, results):
            # Unsigned and byte-stored (float8, int4...) outputs come back in the signless
            # integer dtype of the same width: view them as their ONNX dtype.
            out.append(r.view(spec.dtype) if spec.dtype != np.dtype(object) and r.dtype != spec.dtype and r.dtype.itemsize == spec.dtype.itemsize else r)
        return out

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run with a dict of inputs by name; returns a dict of outputs by name."""
        return dict(zip(self.output_names, self(**feeds)))


def _is_tensor(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") == "tensor_type"


def _value_layout(value: Any, tp: onnx.TypeProto, name: str) -> Any:
    """The layout (`onnx_sequences.SeqLayout`/`OptLayout`/tensor type) of a sequence (a list of
    arrays) or optional (None or a value) given for an input of type `tp`."""
    from onnxc.transforms import onnx_sequences as seq
    from onnxc.transforms.onnx_utils import mlir_element_type, ranked_type

    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        if not isinstance(value, (list, tuple)):
            raise InputError(f"input '{name}' is a sequence: give a list of arrays, got {type(value).__name__}")
        return seq.SeqLayout(tuple(_value_layout(v, tp.sequence_type.elem_type, name) for v in value))
    if kind == "optional_type":
        return seq.OptLayout(None if value is None else _value_layout(value, tp.optional_type.elem_type, name))
    a = np.asarray(value)
    elem = mlir_element_type(a.dtype)
    if elem is None:
        raise InputError(f"input '{name}' has dtype {a.dtype}, which is no ONNX element type")
    return ranked_type(list(a.shape), elem)


def _leaves(value: Any, tp: onnx.TypeProto) -> list[np.ndarray]:
    """The arrays of a (possibly nested) sequence/optional value, depth first, as the function
    specialized by `bind_boundary` takes them."""
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        return [a for v in value for a in _leaves(v, tp.sequence_type.elem_type)]
    if kind == "optional_type":
        return [] if value is None else _leaves(value, tp.optional_type.elem_type)
    return [np.ascontiguousarray(value)]


def _regroup(layout: Any, arrays: list[np.ndarray]) -> Any:
    """Results back into lists (sequences) and None (absent optionals), consuming `arrays`."""
    from onnxc.transforms import onnx_sequences as seq

    if isinstance(layout, seq.SeqLayout):
        return [_regroup(e, arrays) for e in layout.elements]
    if isinstance(layout, seq.OptLayout):
        return None if layout.value is None else _regroup(layout.value, arrays)
    return arrays.pop(0)


def _structure_key(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return tuple(_structure_key(v) for v in value)
    a = np.asarray(value)
    return (a.dtype.str, a.shape)


class StructuredModel(CompiledModel):
    """A model with sequence or optional inputs or outputs.

    The CPU target takes and returns only tensors, so the model is specialized to each call's
    structure (sequence lengths, which optionals are present, array dtypes and shapes) by
    `onnx_sequences.bind_boundary`, which turns the sequence/optional arguments and results into
    their tensors; each specialization is compiled once and cached. Sequences are given and
    returned as lists of arrays, absent optionals as None."""

    def __init__(self, proto: onnx.ModelProto, inputs: list[IOSpec], outputs: list[IOSpec], cpu_options: Any, source: Any = None) -> None:
        super().__init__(inputs, outputs, function=None)
        self.proto = proto
        self.source = proto if source is None else source  # path or proto, for the importer
        self.cpu_options = cpu_options
        self._cache: dict[Any, tuple[Any, list[Any]]] = {}

    def _specialize(self, values: list[Any]) -> tuple[Any, list[Any]]:
        from onnxc.importers import import_model
        from onnxc.targets.cpu import compile_module
        from onnxc.transforms.named_pipelines import lower_onnx_module
        from onnxc.transforms.onnx_sequences import bind_boundary

        key = tuple(_structure_key(v) for v in values)
        if key not in self._cache:
            module = import_model(self.source)
            with module.context, ir.Location.unknown():
                layouts = [
                    None if _is_tensor(i.type) else _value_layout(v, i.type, i.name) for v, i in zip(values, self.proto.graph.input)
                ]
                out_layouts = bind_boundary(module.operation, layouts)
            lower_onnx_module(module, "linalg")
            self._cache[key] = (compile_module(module, None, self.cpu_options), out_layouts)
        return self._cache[key]

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        bound: dict[str, Any] = dict(zip(self.input_names, args))
        bound.update(kwargs)
        for spec in self.inputs:
            if spec.name not in bound and spec.default is not None:
                bound[spec.name] = spec.default
        values = [bound.get(i.name) for i in self.proto.graph.input]
        function, out_layouts = self._specialize(values)
        self.function = function
        flat = [a for v, i in zip(values, self.proto.graph.input) for a in _leaves(v, i.type)]
        results = list(function(*self._adapt(flat)))
        return [_regroup(layout, results) for layout in out_layouts]


def lower(model: onnx.ModelProto | str | os.PathLike[str] | bytes, stage: str = "llvm", *, context: ir.Context | None = None) -> ir.Module:
    """Import `model` and lower it to `stage` ('onnx', 'linalg', 'vector', 'bufferize', 'llvm')."""
    from onnxc.importers import import_model
    from onnxc.transforms.named_pipelines import lower_onnx_module

    module = import_model(_import_source(model, _load(model)), context=context)
    lower_onnx_module(module, stage)
    return module


def compile(  # noqa: A001 - the public name the design asks for
    model: onnx.ModelProto | str | os.PathLike[str] | bytes,
    target: str = "cpu",
    *,
    cpu_options: Any = None,
    keep_ir: bool = False,
) -> CompiledModel:
    """Compile an ONNX model for `target` and return a callable `CompiledModel`."""
    if target not in TARGETS:
        raise OnnxcError(f"unknown target '{target}' (targets: {', '.join(TARGETS)})")
    from onnxc.importers import import_model
    from onnxc.targets.cpu import compile_module
    from onnxc.transforms.named_pipelines import lower_onnx_module

    proto = _load(model)
    # Inputs with an initializer stay arguments (the importer keeps them so callers may
    # override them); the initializer is the value used when the caller gives none.
    inputs = io_specs(list(proto.graph.input), {t.name: t for t in proto.graph.initializer})
    outputs = io_specs(list(proto.graph.output))
    if not all(_is_tensor(v.type) for v in list(proto.graph.input) + list(proto.graph.output)):
        return StructuredModel(proto, inputs, outputs, cpu_options, _import_source(model, proto))
    module = import_model(_import_source(model, proto))
    kept: dict[str, str] = {}
    if keep_ir:
        kept["onnx"] = str(module)
    lower_onnx_module(module, "linalg")
    if keep_ir:
        kept["linalg"] = str(module)
    function = compile_module(module, None, cpu_options)
    return CompiledModel(inputs, outputs, function, target, kept)


__all__ = ["CompiledModel", "IOSpec", "InputError", "StructuredModel", "compile", "io_specs", "lower"]
