"""A few `ai.onnx.ml` ops that are plain tensor computations: Binarizer, ArrayFeatureExtractor."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from onnxc.transforms.lowering.runtime_checks import require_indices
from onnxc.transforms.lowering.common import (
    Node,
    const_index,
    const_scalar,
    convert_element,
    dim_value,
    elementwise,
    empty,
    generic,
    identity_map,
    index_of,
    is_float,
    is_unsigned,
    lowers,
    rank_of,
    shape_of,
    to_index,
)

DOMAIN = "ai.onnx.ml"


@lowers("Binarizer", domain=DOMAIN)
def lower_binarizer(node: Node) -> list[ir.Value]:
    """Binarizer: 1 where x > threshold, else 0 (in x's type)."""
    elem = convert_element(node.in_elem(0))
    thr = float(node.attr("threshold", 0.0))
    fl = is_float(elem)
    one = 1.0 if fl else 1
    zero = 0.0 if fl else 0

    def body(x: ir.Value) -> ir.Value:
        if fl:
            above = arith.cmpf(arith.CmpFPredicate.OGT, x, const_scalar(thr, elem))
        else:
            above = arith.cmpi(arith.CmpIPredicate.sgt, x, const_scalar(int(thr), elem))
        return arith.select(above, const_scalar(one, elem), const_scalar(zero, elem))

    return [elementwise([node.input(0)], elem, body)]


@lowers("ArrayFeatureExtractor", domain=DOMAIN)
def lower_array_feature_extractor(node: Node) -> list[ir.Value]:
    """ArrayFeatureExtractor: x[..., indices] along the last axis (indices flattened)."""
    from onnxc.transforms.lowering.common import dim_mul, reshape

    x, ind = node.input(0), node.input(1)
    r = rank_of(x)
    n = 1
    for d in shape_of(ind):
        n = dim_mul(n, d)
    flat = reshape(ind, [n])
    out_shape = shape_of(x)[:-1] + [n]
    ielem = node.in_elem(1)
    # An index outside [-size, size) of the last axis read outside x (SIGSEGV): a run-time error
    # (runtime_checks.py); a negative one counts from the end, as numpy (the reference) does.
    size = dim_value(shape_of(x)[-1])
    require_indices(node.op, ind, is_unsigned(ielem), [size], r - 1, [dim_value(d) for d in shape_of(x)])

    def body(a: list[ir.Value]) -> list[ir.Value]:
        i = to_index(tensor.extract(flat, [index_of(r - 1)]), ielem)
        i = arith.select(arith.cmpi(arith.CmpIPredicate.slt, i, const_index(0)), arith.addi(i, size), i)
        return [tensor.extract(x, [index_of(d) for d in range(r - 1)] + [i])]

    out = generic([], [empty(out_shape, convert_element(node.in_elem(0)))], [identity_map(r)], ["parallel"] * r, body)[0]
    # A 1-D x gives a [1, n] result (onnx.reference and onnxruntime both; it came out [n]:
    # compile fuzzer seed 404 case 9095).
    return [reshape(out, [1, n]) if r == 1 else out]
