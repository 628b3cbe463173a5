"""Heterogeneous execution: `onnxc.compile(model, target="auto" | [targets])` and `InferenceSession`.

What: a model compiled over several backends (`onnxc.targets.backends`): the partitioner cuts it
into connected subgraphs, each is compiled for the backend it was assigned and the rest for the
CPU, and a run executes them in order, moving each value between the backends that make and
read it (`targets.backends.partition.PartitionedModel`). A backend that refuses a subgraph when
it is initialized or compiled hands it to the next choice with a warning naming the nodes; the
compile never fails because of a refusal (only when the CPU itself refuses, which is the
compiler refusing the model).

How the backends are chosen:

- `target="auto"` (or `providers=None`): every backend found on this machine; the roofline of
  `onnx-partition` decides, so a subgraph leaves the CPU only when the device's declared or
  measured figures say it pays, transfers included (the ONNXIFI proposal's framework side).
- `target=[...]` / `providers=[...]`: backends in preference order, as onnxruntime reads its
  providers: each node goes to the first listed backend that supports it, whatever the
  roofline says (a user who lists a device wants it used), and a refusal falls back along the
  list. The CPU is always the last resort (added when missing, as onnxruntime does). Names are
  backend names (`cpu`, `vulkan`, `cuda`, a plug-in's) or onnxruntime's provider names
  (`CPUExecutionProvider`, `CUDAExecutionProvider`, ...: `<Name>ExecutionProvider` is backend
  `<name>`); a provider whose device is absent is skipped with a warning, as onnxruntime does.

Why the onnxruntime form: deployment code already calls `InferenceSession(path, providers=...)`,
`get_inputs()`, `run(None, feeds)`; replacing `onnxruntime` by `onnxc` there is a one-line
change (`NodeArg` carries the same name/shape/type, shapes with symbolic dims as strings, types
spelled `tensor(float)`).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxc.compiler import CompiledModel, InputError, _load, io_specs
from onnxc.errors import OnnxcError

__all__ = [
    "HeterogeneousModel",
    "InferenceSession",
    "NodeArg",
    "SessionOptions",
    "compile_heterogeneous",
    "get_available_providers",
    "provider_backend_name",
]

_SUFFIX = "ExecutionProvider"


class SessionError(OnnxcError):
    """A session was asked for something the model does not have (an output name) or given
    providers it cannot use at all."""


def provider_backend_name(provider: str | tuple[str, Mapping[str, Any]]) -> str:
    """The backend a provider names: `CPUExecutionProvider` -> `cpu`, `vulkan` -> `vulkan`
    (a `(name, options)` pair, onnxruntime's form with provider options, names its first item)."""
    name = provider[0] if isinstance(provider, tuple) else provider
    if not isinstance(name, str) or not name:
        raise SessionError(f"a provider is a backend name or (name, options), got {provider!r}")
    if name.endswith(_SUFFIX) and len(name) > len(_SUFFIX):
        name = name[: -len(_SUFFIX)]
    return name.lower()


def get_available_providers() -> list[str]:
    """The backends on this machine, in discovery order (the CPU first), by backend name."""
    from onnxc.targets.backends import backends

    return [b.name for b in backends()]


@dataclasses.dataclass
class SessionOptions:
    """Options of an `InferenceSession` that onnxc understands (an onnxruntime `SessionOptions`
    may be passed instead; its fields concern onnxruntime's own executor and are ignored).

    deny_nodes: ONNX node names or op types that stay on the CPU. allow_nodes: when given, the
    only nodes (names or op types) that may leave the CPU."""

    deny_nodes: Sequence[str] = ()
    allow_nodes: Sequence[str] | None = None


@dataclasses.dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it: `shape` lists ints for static dims,
    strings for symbolic ones (`dim_param`), None for unknown dims (None: unknown rank);
    `type` is `tensor(float)`, `seq(tensor(int64))`, ..."""

    name: str
    shape: list[int | str | None] | None
    type: str


def _type_string(tp: onnx.TypeProto) -> str:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({onnx.TensorProto.DataType.Name(tp.tensor_type.elem_type).lower()})"
    if kind == "sequence_type":
        return f"seq({_type_string(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_string(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{_type_string(tp.map_type.value_type)})"
    return str(kind)


def _node_arg(v: onnx.ValueInfoProto) -> NodeArg:
    shape: list[int | str | None] | None = None
    if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in v.type.tensor_type.shape.dim]
    return NodeArg(v.name, shape, _type_string(v.type))


def _chosen_backends(target: str | Sequence[Any]) -> tuple[list[Any], list[str] | None]:
    """(the backends to partition over, the preference order or None for the roofline)."""
    from onnxc.targets.backends import backends

    present = backends()
    if isinstance(target, str):
        if target != "auto":
            raise SessionError(f"target '{target}' is one target: compile it with onnxc.compile(model, target='{target}')")
        return present, None
    if not isinstance(target, Sequence) or not target:
        raise SessionError(f"providers/targets must be a non-empty list of backend names, got {target!r}")
    by_name = {b.name: b for b in present}
    order: list[str] = []
    for p in target:
        name = provider_backend_name(p)
        if isinstance(p, tuple) and len(p) > 1 and p[1]:
            warnings.warn(f"provider '{p[0]}': options {dict(p[1])} are not used by onnxc", stacklevel=3)
        if name not in by_name:
            warnings.warn(f"provider '{name}' is not available on this machine (backends: {', '.join(by_name)}); skipped", stacklevel=3)
            continue
        if name not in order:
            order.append(name)
    if "cpu" not in order:  # the CPU backend, always discovered first, is always the last resort
        order.append("cpu")
    return [by_name[n] for n in order], order


def _io_source(model: onnx.ModelProto | str | os.PathLike[str] | bytes) -> onnx.ModelProto:
    """The ModelProto with external data loaded: each subgraph becomes a model of its own, which
    cannot resolve data files relative to the original model's folder."""
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(str(model))
    return _load(model)


class HeterogeneousModel(CompiledModel):
    """A `CompiledModel` whose function runs a `PartitionedModel`: called like any compiled
    model (inputs checked by name, dtype and shape first), `partitioned` holds the subgraphs and
    their backends (`partitioned.steps`, `partitioned.partition.decisions`)."""

    def __init__(self, proto: onnx.ModelProto, partitioned: Any, target: str, backend_names: Sequence[str]) -> None:
        inputs = io_specs(list(proto.graph.input), {t.name: t for t in proto.graph.initializer})
        outputs = io_specs(list(proto.graph.output))
        names = [s.name for s in inputs]
        out_names = [s.name for s in outputs]

        def run(*arrays: np.ndarray) -> list[np.ndarray]:
            got = partitioned.run(dict(zip(names, arrays)))
            return [got[n] for n in out_names]

        super().__init__(inputs, outputs, run, target)
        self.partitioned = partitioned
        self.backend_names = list(backend_names)  # the backends partitioned over, in order
        # The graphs hold backend references: give them back when the model goes away.
        self._finalizer = weakref.finalize(self, partitioned.release)

    @property
    def placement(self) -> dict[str, str]:
        """Each node (as the decision table names it) -> the backend that runs it."""
        return {n: s.backend for s in self.partitioned.steps for n in s.nodes}

    def release(self) -> None:
        """Free the compiled subgraphs now (also done when the object is collected)."""
        self._finalizer()


_DEFAULTS: dict[str, Any] = {
    "options": None, "cpu_options": None, "threads": None, "target_cpu": None, "keep_ir": False,
    "print_ir_after_all": False, "print_ir_after": (), "timing": False, "cache_dir": None,
}


def compile_heterogeneous(
    model: onnx.ModelProto | str | os.PathLike[str] | bytes,
    target: str | Sequence[Any] = "auto",
    *,
    deny_nodes: Sequence[str] = (),
    allow_nodes: Sequence[str] | None = None,
    **kwargs: Any,
) -> CompiledModel:
    """`onnxc.compile(model, target="auto" | [targets...])`: see the module doc. The single-target
    keywords of `onnxc.compile` (options, threads, IR printing...) do not apply to a model split
    over backends and are refused rather than silently ignored."""
    unknown = [k for k in kwargs if k not in _DEFAULTS]
    if unknown:
        raise TypeError(f"compile() got unexpected keyword argument(s) {', '.join(unknown)}")
    # cache_dir is accepted and unused: each subgraph is compiled anew (caching them is not done yet).
    given = [k for k, v in kwargs.items() if k != "cache_dir" and v != _DEFAULTS[k] and not (k == "print_ir_after" and not v)]
    if given:
        raise OnnxcError(f"{', '.join(given)}: not supported with target={target!r} (a model split over backends); compile for one target to use them")
    from onnxc.targets.backends.partition import PartitionedModel

    proto = _io_source(model)
    chosen, prefer = _chosen_backends(target)
    label = "auto" if prefer is None else ",".join(prefer)
    values = list(proto.graph.input) + list(proto.graph.output)
    if not all(v.type.WhichOneof("value") == "tensor_type" for v in values):
        # Sequence/optional graph I/O: the subgraphs exchange tensors only, so the model runs whole.
        warnings.warn("the model has sequence or optional inputs/outputs: it runs whole on the CPU", stacklevel=2)
        from onnxc.compiler import compile as compile_one

        return compile_one(proto, "cpu")
    partitioned = PartitionedModel(proto, chosen, prefer=prefer, pin_host=tuple(deny_nodes), allow=allow_nodes)
    return HeterogeneousModel(proto, partitioned, label, [b.name for b in chosen])


class InferenceSession:
    """onnxruntime's `InferenceSession`, compiled by onnxc over the backends `providers` names
    (see the module doc; None: every backend present, placed by the roofline)."""

    def __init__(
        self,
        path_or_bytes: onnx.ModelProto | str | os.PathLike[str] | bytes,
        sess_options: SessionOptions | Any = None,
        providers: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"InferenceSession() got unexpected keyword argument(s) {', '.join(kwargs)}")
        proto = _io_source(path_or_bytes)
        self._proto = proto
        if provider_options and providers is not None:
            providers = [(p if isinstance(p, str) else p[0], o) for p, o in zip(providers, provider_options)]
        deny = tuple(getattr(sess_options, "deny_nodes", ()) or ())
        allow = getattr(sess_options, "allow_nodes", None)
        self._model = compile_heterogeneous(proto, "auto" if providers is None else list(providers), deny_nodes=deny, allow_nodes=allow)
        initialized = {t.name for t in proto.graph.initializer}
        self._inputs = [_node_arg(v) for v in proto.graph.input if v.name not in initialized]
        self._outputs = [_node_arg(v) for v in proto.graph.output]

    @property
    def model(self) -> CompiledModel:
        """The compiled model (a `HeterogeneousModel` unless the model runs whole on the CPU)."""
        return self._model

    def get_inputs(self) -> list[NodeArg]:
        """The inputs to feed (inputs with an initializer are optional and not listed, as in onnxruntime)."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The graph outputs."""
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Graph inputs that have an initializer: may be fed to override it."""
        initialized = {t.name for t in self._proto.graph.initializer}
        return [_node_arg(v) for v in self._proto.graph.input if v.name in initialized]

    def get_providers(self) -> list[str]:
        """The backends that run at least one subgraph, in preference/discovery order."""
        m = self._model
        if isinstance(m, HeterogeneousModel):
            used = {s.backend for s in m.partitioned.steps}
            return [b for b in m.backend_names if b in used]
        return ["cpu"]

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None) -> list[Any]:
        """The requested outputs (all when `output_names` is None or empty), in that order."""
        names = [o.name for o in self._outputs]
        wanted = list(output_names) if output_names else names
        missing = [n for n in wanted if n not in names]
        if missing:
            raise SessionError(f"no output {', '.join(repr(m) for m in missing)} in the model (outputs: {', '.join(names)})")
        if not isinstance(input_feed, Mapping):
            raise InputError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        got = self._model.run(dict(input_feed))
        return [got[n] for n in wanted]
