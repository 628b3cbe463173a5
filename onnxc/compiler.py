"""`onnxc.compile(model, target="cpu") -> CompiledModel`: import, lower, JIT, call with numpy.

The compiled model is called with numpy arrays, positionally or by ONNX input name, and returns
numpy arrays in graph output order (or a dict by name from `run`). Everything that could crash
native code is checked first, naming the ONNX input: rank, static dims, dims that share an ONNX
`dim_param` name, and dtype. Dynamic dims are bound at call time.

ONNX types that the lowered code holds in another numpy dtype (unsigned integers become signless
integers of the same width) are passed as views, so no data is copied.

A call takes a fast path when it is the common one (every input an exact ndarray of its dtype and
declared dims, C-contiguous): the same checks reduced to comparisons prepared once per function
(`_CallPlan`), ~2 us of a call instead of ~10 (`CompiledModel._fast_call` has the figures); any
other call, and every error, goes through the full binding as before.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import onnx
from mlir import ir

from onnxc.errors import DiagnosticsError, OnnxcError

if TYPE_CHECKING:  # imported lazily at run time: `import onnxc` stays cheap
    from onnxc.targets.base import Target
    from onnxc.transforms.pipeline import Instrumentation

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
    from onnxc.importers.external_data import load_model_proto

    return load_model_proto(model)  # the importer's loader: a memory-mapped parse, clear errors


def _model_dir(model: Any) -> pathlib.Path | None:
    """The folder a model given by path keeps its external data in (None: given in memory)."""
    return pathlib.Path(model).resolve().parent if isinstance(model, (str, os.PathLike)) else None


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
    # Inputs with an initializer that `function` was compiled with as constants
    # (`onnx-bind-default-inputs`): it takes the other inputs only. A call that gives one of
    # them runs the general function, compiled by `compile_general` on the first such call.
    bound: tuple[str, ...] = ()
    compile_general: Callable[[], Any] | None = field(default=None, repr=False)
    _general: Any = field(default=None, repr=False)
    # What `_fast_call` checks a call against, made on the first call (`_CallPlan`).
    _plan: Any = field(default=None, repr=False, compare=False)

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any], given: set[str] | None = None) -> list[np.ndarray]:
        """The arrays of every input in order (defaults filled in), checked against the specs;
        `given` collects the names the caller gave."""
        if len(args) > len(self.inputs):
            raise InputError(f"the model takes {len(self.inputs)} input(s) ({', '.join(self.input_names)}), got {len(args)}")
        bound: dict[str, Any] = {s.name: a for s, a in zip(self.inputs, args)}
        for name, value in kwargs.items():
            if name not in self.input_names:
                raise InputError(f"the model has no input '{name}' (inputs: {', '.join(self.input_names)})")
            if name in bound:
                raise InputError(f"input '{name}' given twice")
            bound[name] = value
        if given is not None:
            given.update(bound)
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
            if spec.dtype == np.dtype(object) and a.dtype.kind in "US":
                a = a.astype(object)  # numpy str/bytes arrays for a string input, as onnxruntime takes them
            if a.dtype != spec.dtype:
                raise InputError(f"input '{spec.name}' must have dtype {spec.dtype}, got {a.dtype}")
            # A one-element array for a declared scalar is refused by the rank check below, not
            # reshaped: the rank is part of the input's type, and onnxruntime, which accepts it,
            # then computes with the fed rank (Identity returns (1,)), so no answer is right for both.
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

    def _adapt(self, arrays: list[np.ndarray], function: Any = None) -> list[np.ndarray]:
        """Arrays as the compiled function (default: `function`) holds them: ONNX types the
        lowered code keeps in a signless integer of the same width (unsigned ints, float8/int4
        stored as bytes) are passed as views, and a one-element array for a rank-0 argument as a
        scalar (onnxruntime accepts both spellings of a scalar, and so do ONNX's own test data)."""
        signature = getattr(function if function is not None else self.function, "signature", None)
        if signature is None:
            return arrays
        from onnxc.targets.cpu.abi import as_argument

        return [as_argument(a, spec) for a, spec in zip(arrays, signature.inputs)]

    def __call__(self, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        """Run with arrays positionally or by ONNX input name; outputs in graph order."""
        results = self._fast_call(args, kwargs)
        if results is not None:
            return results
        given: set[str] = set()
        arrays = self._bind(args, kwargs, given)
        function = self.function
        if self.bound:
            if given.isdisjoint(self.bound):  # the defaults the function was compiled with
                arrays = [a for spec, a in zip(self.inputs, arrays) if spec.name not in self.bound]
            else:  # an initializer overridden: the general function, compiled once
                if self._general is None:
                    if self.compile_general is None:
                        raise InputError(f"input(s) {', '.join(sorted(given & set(self.bound)))} were compiled as constants and cannot be overridden")
                    self._general = self.compile_general()
                function = self._general
        results = function(*self._adapt(arrays, function))
        from onnxc.targets.cpu.abi import as_onnx_result

        # Unsigned and byte-stored (float8, int4...) outputs come back in the signless integer
        # dtype of the same width: viewed as their ONNX dtype.
        return [as_onnx_result(r, spec.dtype) for spec, r in zip(self.outputs, results)]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run with a dict of inputs by name; returns a dict of outputs by name."""
        if type(self).__call__ is CompiledModel.__call__:  # the feeds as they are, not re-packed
            results = self._fast_call((), feeds)
            if results is not None:
                return dict(zip(self._plan.output_names, results))
        return dict(zip(self.output_names, self(**feeds)))

    def _fast_call(self, args: Sequence[Any], feeds: Mapping[str, Any]) -> list[np.ndarray] | None:
        """The call for the common case, or None where `__call__`'s full path must run it.

        The common case: every input the function takes given (positionally or by name, no
        default filled in, no compiled-in initializer overridden) as an ndarray of exactly its
        ONNX dtype, of its rank and static dims, named dims agreeing, and C-contiguous: the
        checks `_bind` makes, reduced to comparisons prepared once (`_CallPlan`), and the
        array passed as is (what `np.ascontiguousarray` returned for it anyway). Anything else,
        errors included, returns None, so the full path gives its result and its messages.

        Why (issue 8): `_bind`, `_adapt` and the outputs' views cost ~8 us per call in Python,
        more than the whole of onnxruntime's `run` for a small model. Measured on a Relu on
        [1,16] f32 (`c = onnxc.compile(m, cache_dir=False)`, best of 7 batches of 20000/7 calls
        after 300 warm-up calls, old and new code alternated twice, 2-core dev machine):
        `c.run({"x": a})` 27.2-27.7 -> 8.0-8.3 us, `c(x=a)` 26.6-28.3 -> 7.9 us (this path
        ~2 us of it, the Invoker and the JIT's wrappers the rest: targets/cpu/abi.py), where
        onnxruntime's `InferenceSession.run` took 4.9-5.5 us in the same runs. With a 0.9 MB
        output ([1,225000]): `run` 88-108 -> 31 us, `c(x=a)` 79-104 -> 32 us.
        """
        plan = self._plan
        if plan is None or plan.function is not self.function:
            plan = self._plan = _CallPlan(self)
        if not plan.enabled:
            return None
        n = plan.count
        if feeds:
            if args or len(feeds) != n:
                return None
            index = plan.index
            arrays: list[Any] = [None] * n
            for name, value in feeds.items():
                i = index.get(name)
                if i is None:
                    return None
                arrays[i] = value
        elif len(args) == n and plan.positional:
            arrays = list(args)
        else:
            return None
        dims = None
        for i, (a, (dtype, shape, named, view)) in enumerate(zip(arrays, plan.checks)):
            if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                return None
            if shape is not None:  # every dim static
                if a.shape != shape:
                    return None
            elif a.ndim != len(named):
                return None
            else:
                got = a.shape
                for axis, want in enumerate(named):
                    if want is None:
                        continue
                    if want.__class__ is int:
                        if got[axis] != want:
                            return None
                    else:
                        if dims is None:
                            dims = dict(plan.fixed_dims)
                        if dims.setdefault(want, got[axis]) != got[axis]:
                            return None
            if view is not None:
                arrays[i] = a.view(view)
        results = self.function(*arrays)
        wants = plan.output_dtypes
        if len(results) == len(wants):
            for r, want in zip(results, wants):
                if r.dtype != want:
                    break
            else:
                return list(results)  # every output already of its ONNX dtype
        # Outputs in the signless integer dtype of their width viewed as their ONNX dtype.
        return [_as_onnx_result(r, want) for r, want in zip(results, wants)]


class _CallPlan:
    """What `CompiledModel._fast_call` checks and does, worked out once per function from the
    model's input specs, its compiled-in defaults and the function's signature. `enabled` is
    false where some input needs the full path on every call (a string input, one of unknown
    rank, a scalar given to a function without a signature, a compiled-in default that
    `_bind` refuses): then every call takes it."""

    def __init__(self, model: CompiledModel) -> None:
        self.function = function = model.function
        self.enabled = False
        names = [s.name for s in model.inputs if s.name not in model.bound]
        self.count = len(names)
        self.index = {name: i for i, name in enumerate(names)}
        # Positional arguments fill the inputs in order: they are the function's inputs only
        # when the compiled-in ones (if any) come last.
        self.positional = [s.name for s in model.inputs[: len(names)]] == names
        self.output_names = [s.name for s in model.outputs]
        self.output_dtypes = [s.dtype for s in model.outputs]
        self.checks: list[tuple[np.dtype, tuple[int, ...] | None, tuple[int | str | None, ...], np.dtype | None]] = []
        # Named dims bound by the compiled-in defaults (`_bind` checks the given inputs'
        # dims against them too).
        self.fixed_dims: dict[str, int] = {}
        signature = getattr(function, "signature", None)
        if signature is not None and len(signature.inputs) != len(names):
            return
        for s in model.inputs:
            if s.name in model.bound:  # checked once here as `_bind` checks it on every call
                if s.default is None:
                    return
                a = np.asarray(s.default)
                if a.dtype != s.dtype or (s.dims is not None and a.ndim != len(s.dims)):
                    return
                for want, got in zip(s.dims or (), a.shape):
                    if isinstance(want, int) and want != got:
                        return
                    if isinstance(want, str) and self.fixed_dims.setdefault(want, got) != got:
                        return
        specs = {s.name: s for s in model.inputs}
        for i, name in enumerate(names):
            spec = specs[name]
            dims = spec.dims
            if dims is None or spec.dtype == np.dtype(object):
                return  # unknown rank; strings (numpy str arrays are converted): the full path
            if signature is not None and signature.inputs[i].rank != len(dims):
                return  # the function's own check decides (and words the error)
            if not dims and signature is None:
                return  # `_bind` gives a scalar as shape (1,) to a function without signature
            # A scalar for a function with a signature: `_adapt` makes the (1,) array 0-d again.
            shape = tuple(dims) if all(isinstance(d, int) for d in dims) else None
            view = None
            if signature is not None:
                want = signature.inputs[i].dtype
                if spec.dtype != want and spec.dtype.itemsize == want.itemsize and want.kind in "iu":
                    view = want  # `as_argument`: the signless integer the code holds it in
            self.checks.append((spec.dtype, shape, dims, view))  # type: ignore[arg-type]
        self.enabled = True


def _as_onnx_result(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    from onnxc.targets.cpu.abi import as_onnx_result

    return as_onnx_result(array, dtype)


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


def _as_declared(value: Any, tp: onnx.TypeProto) -> Any:
    """A regrouped result (array, list of results, or None) with each array viewed as the ONNX
    element type `tp` declares for it (`abi.as_onnx_result`); undeclared element types stay as is."""
    from onnxc.dialect.types import BY_ONNX, numpy_dtype
    from onnxc.targets.cpu.abi import as_onnx_result

    kind = tp.WhichOneof("value")
    if value is None:
        return None
    if kind == "sequence_type":
        return [_as_declared(v, tp.sequence_type.elem_type) for v in value]
    if kind == "optional_type":
        return _as_declared(value, tp.optional_type.elem_type)
    if kind == "tensor_type" and tp.tensor_type.elem_type in BY_ONNX:
        return as_onnx_result(value, numpy_dtype(BY_ONNX[tp.tensor_type.elem_type]))
    return value


def _structure_key(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return tuple(_structure_key(v) for v in value)
    a = np.asarray(value)
    return (a.dtype.str, a.shape)


class StructuredModel(CompiledModel):
    """A model with sequence or optional inputs or outputs.

    The targets take and return only tensors, so the model is specialized to each call's
    structure (sequence lengths, which optionals are present, array dtypes and shapes) by
    `onnx_sequences.bind_boundary`, which turns the sequence/optional arguments and results into
    their tensors; each specialization is compiled once and cached. Sequences are given and
    returned as lists of arrays, absent optionals as None."""

    def __init__(
        self, proto: onnx.ModelProto, inputs: list[IOSpec], outputs: list[IOSpec], settings: "_Settings", source: Any = None, by_value: bool = False
    ) -> None:
        super().__init__(inputs, outputs, function=None, target=settings.target.name)
        self.proto = proto
        self.source = proto if source is None else source  # path or proto, for the importer
        self.settings = settings
        self.cpu_options = settings.options  # the target's options (kept under its old name)
        self._cache: dict[Any, tuple[Any, list[Any], list[bool]]] = {}
        # Whether specializations bind small integer/bool inputs' values (from the start for an
        # all-tensor model whose shapes depend on them: `onnxc.specialize`).
        self._by_value = by_value

    #: Value specializations (below) kept at most; past it a call is refused.
    MAX_VALUE_SPECIALIZATIONS = 16

    def _bindable(self, values: list[Any]) -> list[bool]:
        """Which inputs a value specialization binds: integer/bool tensors of at most 8 elements
        (trip counts, conditions, split sizes, positions: what decides a structure)."""
        out = []
        for v, i in zip(values, self.proto.graph.input):
            a = np.asarray(v) if v is not None and _is_tensor(i.type) and not isinstance(v, (list, tuple)) else None
            out.append(a is not None and a.dtype.kind in "biu" and a.size <= 8)
        return out

    def _specialize(self, values: list[Any]) -> tuple[Any, list[Any], list[bool]]:
        """The function for this call's structure (and, where the structure depends on the values
        of small integer/bool inputs, on those values: a model whose sequence length or optional
        presence is decided by a trip count, a condition or a split size is compiled per value,
        those inputs becoming constants), its result layouts, and which inputs it binds."""
        from onnxc.importers import import_model
        from onnxc.transforms.onnx_sequences import BoundaryError, ValueLayout, bind_boundary

        bind = self._bindable(values) if self._by_value else [False] * len(values)
        key = tuple(_structure_key(v) for v in values) + tuple(np.asarray(v).tobytes() if b else None for v, b in zip(values, bind))
        if key not in self._cache:
            if any(bind) and len(self._cache) >= self.MAX_VALUE_SPECIALIZATIONS:
                raise OnnxcError(
                    f"the structure of this model's values (sequence lengths, optionals, shapes) depends on input values; "
                    f"{self.MAX_VALUE_SPECIALIZATIONS} specializations were compiled already and this call needs another"
                )
            module = import_model(self.source)
            try:
                with module.context, ir.Location.unknown():
                    layouts = [
                        ValueLayout(np.asarray(v)) if b else None if _is_tensor(i.type) else _value_layout(v, i.type, i.name)
                        for v, i, b in zip(values, self.proto.graph.input, bind)
                    ]
                    out_layouts = bind_boundary(module.operation, layouts)
                if any(bind):  # the bound values' shape arithmetic refolded (If inlined, ranks known)
                    from onnxc.specialize import settle

                    settle(module.operation)
            except BoundaryError:
                if self._by_value or not any(self._bindable(values)):
                    raise
                self._by_value = True  # the structure depends on values: specialize on them from now on
                return self._specialize(values)
            self._cache[key] = (_compile_module(module, self.settings, {}), out_layouts, bind)
        return self._cache[key]

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        bound: dict[str, Any] = dict(zip(self.input_names, args))
        bound.update(kwargs)
        for spec in self.inputs:
            if spec.name not in bound and spec.default is not None:
                bound[spec.name] = spec.default
        values = [bound.get(i.name) for i in self.proto.graph.input]
        if all(_is_tensor(i.type) for i in self.proto.graph.input):
            # Tensors only (a model specialized on its values: `onnxc.specialize`): checked as
            # `CompiledModel` checks them, since a bound value of another dtype or shape would
            # otherwise become a constant of the declared type without a word. (The checked
            # arrays are not used: `_bind` gives a rank-0 array as shape (1,).)
            self._bind(args, kwargs)
        function, out_layouts, bound_values = self._specialize(values)
        self.function = function
        flat = [a for v, i, b in zip(values, self.proto.graph.input, bound_values) if not b for a in _leaves(v, i.type)]
        results = list(function(*self._adapt(flat)))
        # Unsigned and byte-stored results come back in the signless integer dtype of their width,
        # viewed as the declared types as `CompiledModel.__call__` does (a uint8 QLinearConv output,
        # value-specialized on its weights, came back as int8: the compile fuzzer, seed 401 case 7300).
        return [_as_declared(_regroup(layout, results), o.type) for layout, o in zip(out_layouts, self.proto.graph.output)]


# ------------------------------------------------------------------------------------------------
# The driver: every stage is pipeline text run by `onnxc.transforms.pipeline`, as in onnx-opt.


@dataclass(frozen=True)
class _Settings:
    """What one `compile`/`lower` call runs with: the target, its checked options, the
    instrumentation of the pass managers, and the model's name for reproducer commands."""

    target: Target
    options: Any  # the target's options_type
    instrumentation: Instrumentation
    model_name: str


def _settings(
    model: Any,
    target: str,
    options: Any,
    *,
    print_ir_after_all: bool = False,
    print_ir_after: Sequence[str] | str = (),
    timing: bool = False,
    overrides: Mapping[str, Any] | None = None,
) -> _Settings:
    """Look the target up, check its options and the pass names of `print_ir_after`.

    `overrides` are option fields given as keywords of `compile`/`lower` (`threads`,
    `target_cpu`); None values are left out. A field the target's options lack is an error
    naming the target, and the options' own validation checks the values."""
    import dataclasses

    from onnxc.targets import get_target
    from onnxc.transforms.pipeline import Instrumentation, expand, step_pass_names

    t = get_target(target)
    opts = t.options(options)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if given:
        fields = {f.name for f in dataclasses.fields(opts)} if dataclasses.is_dataclass(opts) else set()
        unknown = [k for k in given if k not in fields]
        if unknown:
            raise OnnxcError(f"target '{t.name}' has no option {', '.join(repr(k) for k in unknown)}")
        opts = dataclasses.replace(opts, **given)
    after = (print_ir_after,) if isinstance(print_ir_after, str) else tuple(print_ir_after)
    if after:
        known = step_pass_names(expand(_ONNX_STAGE)) + step_pass_names(expand(t.pipeline(opts)))
        missing = [n for n in after if n not in known]
        if missing:
            raise OnnxcError(
                f"print_ir_after: no pass {', '.join(repr(m) for m in missing)} in the pipeline of target '{t.name}' "
                f"(its passes: {', '.join(dict.fromkeys(known))})"
            )
    inst = Instrumentation(print_ir_after_all=print_ir_after_all, print_ir_after=after, timing=timing)
    name = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "model.onnx"
    return _Settings(t, opts, inst, name)


#: The target-independent stage every target starts from (a named pipeline of the registry).
_ONNX_STAGE = "onnx-to-linalg"


def _for(inst: Instrumentation, text: str) -> Instrumentation:
    """`inst` with `print_ir_after` narrowed to the passes that `text` runs (each pipeline checks
    that the names it is given are its own)."""
    from dataclasses import replace

    from onnxc.transforms.pipeline import expand, step_pass_names

    if not inst.print_ir_after:
        return inst
    names = set(step_pass_names(expand(text)))
    return replace(inst, print_ir_after=tuple(n for n in inst.print_ir_after if n in names))


def _explain(error: BaseException, settings: _Settings, pipeline_text: str) -> None:
    """Add the failing pass and the `onnx-opt` command that reproduces the failure to `error`
    as notes (shown under a traceback and by the `onnxc` driver; `str(error)` is unchanged)."""
    from onnxc.transforms.pipeline import reproduce_command

    if not hasattr(error, "failed_pass"):
        return  # not raised by a pass (an unknown entry, the execution engine...)
    failed = error.failed_pass
    if failed:
        error.add_note(f"in pass '{failed}'")
    input_name = settings.model_name
    error.add_note("reproduce with: " + reproduce_command(input_name, pipeline_text))


def _lower_to_linalg(module: ir.Module, settings: _Settings) -> None:
    """Run the target-independent stage on an imported module (in place)."""
    from onnxc.transforms.pipeline import run_pipeline

    try:
        run_pipeline(module, _ONNX_STAGE, instrumentation=_for(settings.instrumentation, _ONNX_STAGE), reraise=True)
    except OnnxcError as e:
        _explain(e, settings, _ONNX_STAGE)
        raise


def _compile_module(module: ir.Module, settings: _Settings, kept: dict[str, str]) -> Any:
    """Import-level module -> linalg -> the target's runnable artifact."""
    _lower_to_linalg(module, settings)
    if "onnx" in kept:
        kept["linalg"] = str(module)
    from onnxc.transforms.deadline import check_time_limit

    check_time_limit(f"the {settings.target.name} target's code generation")
    target_text = settings.target.pipeline(settings.options)
    try:
        return settings.target.compile(module, settings.options, instrumentation=_for(settings.instrumentation, target_text))
    except OnnxcError as e:
        _explain(e, settings, f"{_ONNX_STAGE},{target_text}")
        raise


def lower(
    model: onnx.ModelProto | str | os.PathLike[str] | bytes,
    stage: str = "llvm",
    *,
    context: ir.Context | None = None,
    target: str = "cpu",
    options: Any = None,
    threads: int | None = None,
    target_cpu: str | None = None,
    print_ir_after_all: bool = False,
    print_ir_after: Sequence[str] | str = (),
    timing: bool = False,
) -> ir.Module:
    """Import `model` and lower it to `stage`: 'onnx', 'linalg', or one of the target's stages
    ('vector', 'bufferize', 'llvm' for the CPU), through the same pipelines `compile` runs."""
    from onnxc.importers import import_model
    from onnxc.transforms.pipeline import run_pipeline

    settings = _settings(
        model,
        target,
        options,
        print_ir_after_all=print_ir_after_all,
        print_ir_after=print_ir_after,
        timing=timing,
        overrides={"threads": threads, "target_cpu": target_cpu},
    )
    if stage not in ("onnx", "linalg"):
        settings.target.check_stage(stage)
    text = "onnx-passes" if stage == "onnx" else _ONNX_STAGE
    if stage not in ("onnx", "linalg"):
        text += "," + settings.target.pipeline(settings.options, stop_after=stage)
    module = import_model(_load(model), context=context, base_dir=_model_dir(model))
    try:
        run_pipeline(module, text, instrumentation=_for(settings.instrumentation, text), reraise=True)
    except OnnxcError as e:
        _explain(e, settings, text)
        raise
    return module


def compile(  # noqa: A001 - the public name the design asks for
    model: onnx.ModelProto | str | os.PathLike[str] | bytes,
    target: str | Sequence[str] = "cpu",
    *,
    options: Any = None,
    cpu_options: Any = None,
    threads: int | None = None,
    target_cpu: str | None = None,
    keep_ir: bool = False,
    print_ir_after_all: bool = False,
    print_ir_after: Sequence[str] | str = (),
    timing: bool = False,
    cache_dir: str | os.PathLike[str] | bool | None = None,
    time_limit_s: float | None = None,
) -> CompiledModel:
    """Compile an ONNX model for `target` and return a callable `CompiledModel`.

    `target="auto"` or a list of targets in preference order splits the model over backends
    (`onnxc.session.compile_heterogeneous`); a single name compiles it whole for that target.

    `options` are the target's options (`onnxc.targets.get_target(target).options_type`, e.g.
    `CpuPipelineOptions`); `cpu_options` is the older name of the same argument. `threads` (worker
    threads of the generated code; the CPU default is every core) and `target_cpu` (the CPU to
    generate code for: 'host' or a name of `onnxc.targets.cpu.isa.KNOWN_CPUS`) override those
    fields of the options. `keep_ir` keeps the
    IR text of the 'onnx' and 'linalg' stages in `CompiledModel.modules`. `print_ir_after_all`
    prints the IR after every pass and `print_ir_after` after the named passes (to stderr),
    `timing` prints MLIR's pass timing report: the same as `onnx-opt`'s flags, because the
    stages are the same pipelines run by the same pass-manager driver. A failing pass's error
    carries notes naming the pass and the `onnx-opt` command that reproduces it. `cache_dir`
    is the on-disk cache of compiled models (`onnxc.targets.cpu.cache`; None: $ONNXC_CACHE_DIR,
    False: off); it is not used with `keep_ir`, IR printing or timing. `time_limit_s` bounds the
    compile: past it, `CompileTimeLimitError` (checked between passes and stages:
    `onnxc.transforms.deadline`).
    """
    from onnxc.transforms.deadline import check_time_limit, time_limit

    if not isinstance(target, str) or target == "auto":  # over several backends: onnxc.session
        from onnxc.session import compile_heterogeneous

        with time_limit(time_limit_s):
            return compile_heterogeneous(
                model, target, options=options, cpu_options=cpu_options, threads=threads, target_cpu=target_cpu, keep_ir=keep_ir,
                print_ir_after_all=print_ir_after_all, print_ir_after=print_ir_after, timing=timing, cache_dir=cache_dir,
            )
    if options is not None and cpu_options is not None:
        raise OnnxcError("give the target's options once: options= or cpu_options=, not both")
    settings = _settings(
        model,
        target,
        options if options is not None else cpu_options,
        print_ir_after_all=print_ir_after_all,
        print_ir_after=print_ir_after,
        timing=timing,
        overrides={"threads": threads, "target_cpu": target_cpu},
    )
    from onnxc.importers import import_model

    proto = _load(model)
    if settings.target.name == "cpu":  # an IR 11 multi-device model started by mpirun: one rank here
        from onnxc.distributed import compile_if_distributed

        distributed = compile_if_distributed(proto, settings.options, source=model)
        if distributed is not None:
            return distributed
    # Inputs with an initializer stay arguments (the importer keeps them so callers may
    # override them); the initializer is the value used when the caller gives none.
    inputs = io_specs(list(proto.graph.input), {t.name: t for t in proto.graph.initializer})
    outputs = io_specs(list(proto.graph.output))
    if not all(_is_tensor(v.type) for v in list(proto.graph.input) + list(proto.graph.output)):
        return StructuredModel(proto, inputs, outputs, settings, _import_source(model, proto))
    from onnxc.targets.cpu.cache import cached_compile, model_cache_key, resolve_dir

    kept: dict[str, str] = {}
    # Inputs with an initializer are compiled as constants (`onnx-bind-default-inputs`: weights
    # packed at compile time; every IR-3 model lists its weights as inputs); a call overriding
    # one compiles the general function then. CPU only for now: the GPU targets keep arguments.
    bound = tuple(s.name for s in inputs if s.default is not None) if settings.target.name == "cpu" else ()

    def build(bind: bool) -> Any:
        module = import_model(proto, base_dir=_model_dir(model))  # parsed once, by _load
        if bind:
            from onnxc.transforms.onnx_bind_defaults import OnnxBindDefaultInputsPass

            with module.context:
                OnnxBindDefaultInputsPass().run(module.operation)
        if keep_ir:
            kept["onnx"] = str(module)
        check_time_limit("lowering")
        return _compile_module(module, settings, kept)

    plain = settings.target.name == "cpu" and not (keep_ir or print_ir_after_all or print_ir_after or timing)
    folder = resolve_dir(cache_dir) if plain else None
    suffix = "+bound-defaults" if bound else ""
    with time_limit(time_limit_s):
        try:
            function = cached_compile(
                folder, lambda: model_cache_key(model, proto, settings.options, settings.target.name) + suffix, lambda: build(bool(bound)), settings.options
            )
        except DiagnosticsError as e:  # shapes that depend on input values: compiled per value
            from onnxc.specialize import value_specialized_model

            by_value = value_specialized_model(e, proto, inputs, outputs, settings, _import_source(model, proto))
            if by_value is None:
                raise
            return by_value

    def compile_general() -> Any:
        with time_limit(time_limit_s):
            return cached_compile(folder, lambda: model_cache_key(model, proto, settings.options, settings.target.name), lambda: build(False), settings.options)

    return CompiledModel(inputs, outputs, function, settings.target.name, kept, bound=bound, compile_general=compile_general if bound else None)


__all__ = ["CompiledModel", "IOSpec", "InputError", "StructuredModel", "compile", "io_specs", "lower"]
