"""The `onnx-bind-default-inputs` pass: graph inputs that have an initializer become constants.

What: in every function of the module, each argument carrying an `onnx.default` attribute (a
graph input that also has an initializer: the importer keeps it an argument so a caller may
override it) is replaced by an `onnx.Constant` of that default, at the initializer's location, and
removed from the function's signature.

Why: the ONNX IR spec lets a runtime *allow* overriding such an input ("a runtime MAY allow a
caller to specify a value for this (input) name overriding the value specified in the
initializer"). Kept as arguments, the weights of every IR-3 model (where each initializer had to
be listed as an input) reached the code generator as run-time values: no weight packing or filter
layout change at compile time, and both redone on every call. `onnxc.compile` therefore compiles
the model with its defaults bound (this pass) and compiles the general function, arguments
kept, only when a caller does override one (`onnxc.compiler.CompiledModel`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from onnxc.dialect.builder import onnx_op
from onnxc.transforms.pass_base import ModulePass

__all__ = ["OnnxBindDefaultInputsPass", "bind_default_inputs"]

DEFAULT_ATTR = "onnx.default"


def _arg_attrs(fn: ir.Operation) -> list[ir.DictAttr] | None:
    if "arg_attrs" not in fn.attributes:
        return None
    return [ir.DictAttr(a) for a in ir.ArrayAttr(fn.attributes["arg_attrs"])]


def _name_of(attrs: ir.DictAttr, index: int) -> str:
    return ir.StringAttr(attrs["onnx.name"]).value if "onnx.name" in attrs else f"argument {index}"


def bind_default_inputs(fn: ir.Operation) -> list[str]:
    """Bind the defaulted arguments of the `func.func` `fn` to constants; returns their names
    (in argument order). A function without a body or without such arguments is left alone."""
    attrs = _arg_attrs(fn)
    if attrs is None or len(fn.regions) != 1 or not fn.regions[0].blocks:
        return []
    bound = [i for i, a in enumerate(attrs) if DEFAULT_ATTR in a]
    if not bound:
        return []
    block = fn.regions[0].blocks[0]
    first = block.operations[0] if len(block.operations) else None
    names: list[str] = []
    for i in bound:
        name = _name_of(attrs[i], i)
        value = attrs[i][DEFAULT_ATTR]
        loc = ir.Location.name(name, childLoc=ir.Location.name("initializer"), context=fn.context)
        ip = ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(block)
        const = onnx_op("Constant", [], [value.type], {"value": value}, loc=loc, ip=ip)
        block.arguments[i].replace_all_uses_with(const.results[0])
        names.append(name)
    for i in reversed(bound):  # erasing from the back keeps the earlier indices valid
        block.erase_argument(i)
    keep = [i for i in range(len(attrs)) if i not in set(bound)]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    new_inputs = [ftype.inputs[i] for i in keep]
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(new_inputs, list(ftype.results), context=fn.context))
    fn.attributes["arg_attrs"] = ir.ArrayAttr.get([attrs[i] for i in keep], context=fn.context)
    return names


@dataclass(frozen=True)
class OnnxBindDefaultInputsPass(ModulePass):
    """Replace graph inputs that have an initializer by constants of their initializer."""

    name = "onnx-bind-default-inputs"

    def run(self, module: ir.Operation) -> None:
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name == "func.func":
                bind_default_inputs(op.operation)
