"""onnxc as an ONNX backend: `onnx.backend.base.Backend` over `onnxc.compile` (CPU only).

What: `OnnxcBackend` (`prepare`, `run_model`, `run_node`, `supports_device`, `is_compatible`) and
`OnnxcBackendRep` (the compiled model; `rep.run(inputs)` returns the outputs in graph order), plus
the module-level functions `prepare`, `run_model`, `run_node`, `supports_device` that onnx's
backends expose, so `onnx.backend.test.BackendTest(onnxc.backend, __name__)` drives onnxc over the
whole ONNX backend test suite.

Why a thin layer: everything that can go wrong is onnxc's own business and raises `OnnxcError`
(import problems, ops the lowering lacks, inputs of the wrong shape/dtype) with a message naming
the model element; this module adds nothing but the backend protocol. Unsupported devices are an
`OnnxcError` too.

`run_node`: onnx's base class only *checks* the node (it builds no model in onnx 1.23), so the
model is built here: one graph input per given array (its dtype and shape), outputs typed from
`outputs_info` when given, else by onnx's shape inference; the opset is `opset_version` from the
keyword arguments or the newest the installed onnx knows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from onnxc.errors import OnnxcError

__all__ = [
    "OnnxcBackend",
    "OnnxcBackendRep",
    "is_compatible",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]

#: Keyword arguments of `prepare` that BackendTest may pass per test (tolerances are the test
#: runner's business, not the compiler's); they are accepted and ignored.
_RUNNER_KWARGS = frozenset({"rtol", "atol"})
#: The `onnxc.compile` keyword arguments the backend passes on.
_COMPILE_KWARGS = frozenset({"options", "cpu_options", "keep_ir", "print_ir_after_all", "print_ir_after", "timing", "cache_dir"})


def _device_type(device: str) -> Any:
    try:
        return Device(device).type
    except (AttributeError, ValueError):
        return None


class OnnxcBackendRep(BackendRep):
    """A model compiled by onnxc, ready to run repeatedly.

    `run(inputs)` takes a list/tuple of arrays (bound as `_positional` says), a dict by input
    name, or a single array, and returns a
    tuple of outputs in graph output order that can also be indexed by output name.
    """

    def __init__(self, compiled: Any, model: onnx.ModelProto | None = None) -> None:
        self.compiled = compiled  # onnxc.compiler.CompiledModel
        self.model = model

    @property
    def input_names(self) -> list[str]:
        return list(self.compiled.input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self.compiled.output_names)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:  # noqa: ARG002 - protocol
        """Run the compiled model; see the class docstring for the accepted inputs."""
        if isinstance(inputs, Mapping):
            outputs = self.compiled(**dict(inputs))
        elif isinstance(inputs, np.ndarray):
            outputs = self.compiled(**self._positional([inputs]))
        elif isinstance(inputs, Sequence):
            outputs = self.compiled(**self._positional(list(inputs)))
        else:
            raise OnnxcError(f"inputs must be a list of arrays, a dict by input name or an array, got {type(inputs).__name__}")
        names = self.output_names
        return namedtupledict("Outputs", names)(*outputs)

    def _positional(self, arrays: list[Any]) -> dict[str, Any]:
        """Bind a list of arrays to input names as onnxruntime does: to the inputs without an
        initializer, in order (old models list every weight as a graph input, often first), or
        to every input when the list has one array per graph input."""
        specs = self.compiled.inputs
        if len(arrays) == len(specs):
            names = [s.name for s in specs]
        else:
            names = [s.name for s in specs if s.default is None]
            if len(arrays) > len(names):
                raise OnnxcError(
                    f"{len(arrays)} inputs given; the model takes {len(names)} ({', '.join(names)})"
                    + (f" plus {len(specs) - len(names)} with initializers" if len(specs) > len(names) else "")
                )
        return dict(zip(names, arrays))

    def __repr__(self) -> str:
        ins = ", ".join(s.describe() for s in self.compiled.inputs)
        outs = ", ".join(s.describe() for s in self.compiled.outputs)
        return f"<OnnxcBackendRep ({ins}) -> ({outs})>"


class OnnxcBackend(Backend):
    """The onnxc ONNX backend: compiles with `onnxc.compile(model, target="cpu")`."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Only the host CPU ("CPU", "CPU:0")."""
        return _device_type(device) == DeviceType.CPU

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:  # noqa: ARG003
        """Whether the device is supported. Models are not pre-screened: an unsupported model
        fails in `prepare` with the full list of its problems, which is more useful than a skip."""
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | os.PathLike[str] | bytes, device: str = "CPU", **kwargs: Any) -> OnnxcBackendRep:
        """Compile `model` for `device` and return the runnable representation.

        Keyword arguments other than the test runner's `rtol`/`atol` go to `onnxc.compile`
        (`options`/`cpu_options`, `keep_ir`, `print_ir_after_all`, `print_ir_after`, `timing`,
        `cache_dir`). Raises `OnnxcError` for an unsupported device or model.
        """
        if not cls.supports_device(device):
            raise OnnxcError(f"onnxc backend: device '{device}' is not supported (supported: CPU)")
        from onnxc.compiler import compile as onnxc_compile

        options = {k: v for k, v in kwargs.items() if k not in _RUNNER_KWARGS}
        unknown = sorted(set(options) - _COMPILE_KWARGS)
        if unknown:
            raise OnnxcError(f"onnxc backend: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(_COMPILE_KWARGS))})")
        if isinstance(model, (str, os.PathLike)):
            model = onnx.load(os.fspath(model))
        elif isinstance(model, (bytes, bytearray)):
            model = onnx.load_from_string(bytes(model))
        compiled = onnxc_compile(model, "cpu", **options)
        return OnnxcBackendRep(compiled, model)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        """Compile and run once; returns the outputs as `OnnxcBackendRep.run` does."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run one node on `inputs` (a list in the node's input order, or a dict by input name).

        Builds a one-node model (see the module docstring) and runs it through `run_model`.
        `opset_version` in `kwargs` picks the default-domain opset.
        """
        opset = kwargs.pop("opset_version", None)
        model = make_node_model(node, inputs, outputs_info, opset)
        feeds = _node_feeds(node, inputs)
        return cls.run_model(model, feeds, device, **kwargs)


def _node_feeds(node: onnx.NodeProto, inputs: Any) -> dict[str, np.ndarray]:
    if isinstance(inputs, Mapping):
        return {k: np.asarray(v) for k, v in inputs.items()}
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    present = [n for n in node.input if n]
    if len(inputs) > len(present):
        raise OnnxcError(f"node {node.op_type} '{node.name}': {len(inputs)} inputs given, the node names {len(present)}")
    return {name: np.asarray(v) for name, v in zip(present, inputs)}


def make_node_model(
    node: onnx.NodeProto,
    inputs: Any,
    outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
    opset_version: int | None = None,
) -> onnx.ModelProto:
    """A model with `node` as its only node, inputs typed from the arrays given for it."""
    feeds = _node_feeds(node, inputs)
    graph_inputs = []
    for name, value in feeds.items():
        try:
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        except (KeyError, ValueError, TypeError):
            raise OnnxcError(f"node {node.op_type} '{node.name}': input '{name}' has dtype {value.dtype}, which ONNX has no tensor type for") from None
        graph_inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
    outputs = [n for n in node.output if n]
    if outputs_info is not None:
        if len(outputs_info) != len(outputs):
            raise OnnxcError(f"node {node.op_type} '{node.name}': outputs_info has {len(outputs_info)} entries for {len(outputs)} outputs")
        graph_outputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape) for n, (dt, shape) in zip(outputs, outputs_info)
        ]
    else:
        graph_outputs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    domain = node.domain if node.domain not in ("", "ai.onnx") else ""
    opsets = [helper.make_opsetid("", opset_version or onnx.defs.onnx_opset_version())]
    if domain:
        opsets.append(helper.make_opsetid(domain, onnx.defs.onnx_opset_version() if domain != "ai.onnx.ml" else 5))
    graph = helper.make_graph([node], f"{node.op_type or 'node'}_graph", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=opsets, producer_name="onnxc.backend.run_node")
    if outputs_info is None:
        # Give the outputs types: the importer needs typed graph outputs.
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:  # noqa: BLE001 - onnx raises several types here
            raise OnnxcError(f"node {node.op_type} '{node.name}': cannot infer its output types ({str(exc).splitlines()[0]}); pass outputs_info") from None
        known = {v.name: v for v in inferred.graph.value_info}
        known.update({v.name: v for v in inferred.graph.output})
        del model.graph.output[:]
        for n in outputs:
            if n not in known or not known[n].type.HasField("tensor_type") or not known[n].type.tensor_type.elem_type:
                raise OnnxcError(f"node {node.op_type} '{node.name}': shape inference gives no type for output '{n}'; pass outputs_info")
            model.graph.output.append(known[n])
    return model


# The module-level protocol onnx's backends expose (onnxruntime.backend, caffe2.python.onnx.backend).
is_compatible = OnnxcBackend.is_compatible
prepare = OnnxcBackend.prepare
run_model = OnnxcBackend.run_model
run_node = OnnxcBackend.run_node
supports_device = OnnxcBackend.supports_device
