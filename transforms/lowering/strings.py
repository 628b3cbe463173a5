"""String tensors: Equal, StringConcat, RegexFullMatch, StringSplit, StringNormalizer,
LabelEncoder (every key/value kind), CategoryMapper and OneHotEncoder, TfIdfVectorizer on string tokens (the
tokens become pool ids, then tfidf.py's integer lowering counts), Cast/CastLike from strings to
numbers, Constant of strings; and which other ops may move strings.

The representation: the dialect keeps `!onnx.string`; the lowering (`common.convert_element`)
maps it to **i64 handles**, each the address of a NUL-terminated UTF-8 string. The kernels are
C functions of onnxc's string runtime (`targets/cpu/runtime/onnxc_strings.c`, built and loaded by
`targets/cpu/strings.py`), declared here as private `func.func`s (`onnxc_str_*`, the contract
with the runtime) and called with `func.call` inside `linalg.generic` bodies and `scf` loops, so
the lowered IR stays pure upstream MLIR. Constant strings (attributes: separators, patterns,
keys, stopwords, Constant values) are `memref.global` byte arrays whose address
(`memref.extract_aligned_pointer_as_index`) is the handle; a list of strings is one *table*
global (the decimal count, NUL, then each string NUL-terminated) read by `onnxc_str_table_find`
/ `onnxc_str_table_get`. The function boundary marks string arguments and results with the
`onnxc.string` argument/result attribute (`mark_boundary`), which the CPU ABI reads to convert
numpy object arrays to handles and back.

Why handles: every data-movement lowering (Reshape, Transpose, Gather, Concat, Slice, Where,
...) then moves strings unchanged, and only ops that look at characters need the runtime.
Ops that would read the handles as numbers (arithmetic, Cast, Unique, sorting) are refused for
strings by the driver's pre-check (`STRING_OPS` lists what may see them).

Data-dependent output shapes reuse `data_dependent.py`'s mechanism: StringSplit counts the
pieces of every element first (`onnxc_str_split_count`), takes the maximum as the size of the
new last dim, then fills it (`onnxc_str_split_part`); StringNormalizer counts the elements that
are not stopwords (`count_where`) and writes them in order (`compact`).

Semantics, where the reference and the spec leave room:
- RegexFullMatch: RE2 syntax is translated at compile time to POSIX extended syntax
  (`translate_re2`), anchored, and matched by regcomp/regexec under a UTF-8 locale. Supported:
  literals, `.`, bracket classes (with `\\d \\w \\s` inside), `\\d \\D \\w \\W \\s \\S`, escapes
  of metacharacters, `\\t \\n \\r \\f \\v \\xHH \\x{H..}`, groups (capturing, `(?:`, named),
  alternation, `* + ? {n} {n,} {n,m}` and their non-greedy forms (the same for a full match),
  `^ $ \\A \\z`, word boundaries `\\b \\B` (glibc's extension), and a leading `(?i)`. Refused
  at compile time with the construct named: Unicode classes (`\\p`), `\\Q..\\E`, other flags,
  and anything Python's `re` cannot parse. `.` does not match a newline (RE2's default). `\\w \\d \\s` and `(?i)` follow the
  UTF-8 locale's classes (letters beyond ASCII are word characters, as in Python's `re`, which the
  reference evaluator uses; RE2's are ASCII).
- StringNormalizer: stopwords are removed element-wise (an element equal to a stopword, up to
  case when `is_case_sensitive` is 0), then the case changes code point by code point in
  `locale` (glibc `<locale>.UTF-8`, else C.UTF-8: simple one-to-one mappings). The reference
  evaluator additionally splits elements on spaces, strips accents and drops empty strings;
  onnxruntime and the spec do not, and neither does onnxc. Input [C] or [1, C] (a dynamic first
  dim is checked to be 1 at run time); when every element is removed the output is [""] ([1] or
  [1, 1]).
- StringSplit: Python's `str.split` (no delimiter: runs of ASCII whitespace and \\x1c-\\x1f).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from mlir import ir
from mlir.dialects import arith, func, memref, tensor

from onnxc.dialect.types import element_type as onnx_element
from onnxc.importers.tensors import attribute_to_array
from onnxc.transforms.lowering import elementwise as _elementwise  # noqa: F401 - registers Equal first
from onnxc.transforms.lowering import shape_ops as _shape_ops  # noqa: F401 - registers Constant first
from onnxc.transforms.lowering import indexing as _indexing  # noqa: F401 - registers ScatterND/Elements first
from onnxc.transforms.lowering import tfidf as _tfidf  # noqa: F401 - registers TfIdfVectorizer first
from onnxc.transforms.lowering.common import (
    PATTERNS,
    LoweringError,
    Node,
    Pattern,
    collapse_unit_dims,
    const_index,
    const_scalar,
    const_tensor,
    convert_element,
    convert_scalar,
    elem_of,
    element_supported,
    elementwise,
    empty,
    expand_unit_dims,
    filled,
    generic,
    identity_map,
    affine_map,
    index_of,
    cast_to_type,
    max_value,
    min_value,
    tensor_type,
    is_bool,
    is_float,
    is_unsigned,
    lowers,
    rank_of,
    reduce_dims,
    reshape,
    shape_of,
    static_shape,
)
from onnxc.transforms.lowering.data_dependent import compact, count_where
from onnxc.transforms.lowering.minifloat import is_exotic
from onnxc.transforms.lowering.runtime_checks import require

ML = "ai.onnx.ml"

# Ops that may see string tensors: those lowered here, and data movement and control flow (If,
# Loop) whose lowerings copy or carry elements without looking at them (a handle moves like any
# i64).
STRING_OPS = frozenset(
    {"Equal", "StringConcat", "RegexFullMatch", "StringSplit", "StringNormalizer", "LabelEncoder", "Constant",
     "CategoryMapper", "OneHotEncoder", "TfIdfVectorizer", "Cast", "CastLike", "If", "Loop", "Pad", "ReverseSequence", "ScatterND", "ScatterElements",
     "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Slice", "Gather",
     "GatherElements", "GatherND", "Split", "Expand", "Tile", "Shape", "Size", "Where", "Compress"}
)  # fmt: skip


def _i1() -> ir.Type:
    return ir.IntegerType.get_signless(1)


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def string_type() -> ir.Type:
    """`!onnx.string` (the dialect's type; the context must have the ONNX dialects loaded)."""
    return onnx_element(onnx.TensorProto.STRING)


def is_string(t: ir.Type | None) -> bool:
    """Whether `t` is `!onnx.string` or a tensor of it."""
    if t is None:
        return False
    if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
        t = elem_of(t)
    if isinstance(t, (ir.IntegerType, ir.FloatType, ir.IndexType, ir.ComplexType, ir.NoneType)):
        return False  # builtin: no need to build the dialect type (convert_element asks often)
    return t == string_type()


def uses_strings(op: ir.Operation) -> bool:
    """Whether an op has a string tensor operand or result."""
    return any(is_string(v.type) for v in op.operands) or any(is_string(r.type) for r in op.results)


def _node_strings(node: Node) -> bool:
    return any(is_string(t) for t in node.onnx_types) or any(is_string(t) for t in node.onnx_result_types)


def mark_boundary(new_func: ir.Operation, onnx_ftype: ir.FunctionType) -> None:
    """Add the `onnxc.string` marker to the argument/result attributes of a lowered function
    wherever the ONNX-level type was a string tensor (the CPU ABI converts those)."""
    for key, types in (("arg_attrs", list(onnx_ftype.inputs)), ("res_attrs", list(onnx_ftype.results))):
        if not any(is_string(t) for t in types):
            continue
        old = list(ir.ArrayAttr(new_func.attributes[key])) if key in new_func.attributes else []
        dicts = []
        for i, t in enumerate(types):
            entries = {}
            if i < len(old):
                d = ir.DictAttr(old[i])
                entries = {d[j].name: d[j].attr for j in range(len(d))}
            if is_string(t):
                entries["onnxc.string"] = ir.UnitAttr.get()
            dicts.append(ir.DictAttr.get(entries))
        new_func.attributes[key] = ir.ArrayAttr.get(dicts)


# --- the runtime's functions and constant strings ---------------------------------------------------

_RUNTIME: dict[str, tuple[tuple[str, ...], str]] = {
    # name: (argument kinds, result kind); "h" handle (i64), "i" i32, "l" i64, "d" f64
    "onnxc_str_eq": (("h", "h"), "i"),
    "onnxc_str_concat": (("h", "h"), "h"),
    "onnxc_str_regex_full_match": (("h", "h", "i"), "i"),
    "onnxc_str_change_case": (("h", "i", "h"), "h"),
    "onnxc_str_table_find": (("h", "h", "i", "h"), "l"),
    "onnxc_str_table_get": (("h", "l"), "h"),
    "onnxc_str_split_count": (("h", "h", "l"), "l"),
    "onnxc_str_split_part": (("h", "h", "l", "l"), "h"),
    "onnxc_str_to_f64": (("h",), "d"),
    "onnxc_str_to_i64": (("h", "i"), "l"),
}


def _kind(k: str) -> ir.Type:
    return _i32() if k == "i" else ir.F64Type.get() if k == "d" else _i64()


def _module_of(node: Node) -> ir.Operation:
    lowering = node.lowering
    if lowering is None:
        raise node.fail("string kernels need the lowering's module")
    return lowering.module


def _symbols(module: ir.Operation) -> set[str]:
    out = set()
    for op in module.regions[0].blocks[0].operations:
        if "sym_name" in op.operation.attributes:
            out.add(ir.StringAttr(op.operation.attributes["sym_name"]).value)
    return out


def call(node: Node, name: str, args: Sequence[ir.Value]) -> ir.Value:
    """`func.call @name(args)` of a runtime function, declaring it once per module."""
    kinds, res = _RUNTIME[name]
    module = _module_of(node)
    if name not in _symbols(module):
        with ir.InsertionPoint.at_block_begin(module.regions[0].blocks[0]), ir.Location.unknown():
            func.FuncOp(name, ir.FunctionType.get([_kind(k) for k in kinds], [_kind(res)]), visibility="private")
    return func.CallOp([_kind(res)], ir.FlatSymbolRefAttr.get(name), list(args)).result


def _truthy(v: ir.Value) -> ir.Value:
    return arith.cmpi(arith.CmpIPredicate.ne, v, const_scalar(0, _i32()))


def _bytes_global(node: Node, data: bytes, prefix: str) -> ir.Value:
    """The handle (i64 address) of a constant byte string (a private `memref.global`, one per
    distinct content in the module)."""
    module = _module_of(node)
    name = f"{prefix}_{hashlib.sha256(data).hexdigest()[:20]}"
    mtype = ir.MemRefType.get([len(data)], ir.IntegerType.get_signless(8))
    if name not in _symbols(module):
        value = ir.DenseElementsAttr.get(np.frombuffer(data, dtype=np.int8).copy(), type=ir.IntegerType.get_signless(8))
        with ir.InsertionPoint.at_block_begin(module.regions[0].blocks[0]), ir.Location.unknown():
            memref.GlobalOp(name, ir.TypeAttr.get(mtype), sym_visibility="private", initial_value=value, constant=True, alignment=8)
    g = memref.get_global(mtype, name)
    ptr = memref.extract_aligned_pointer_as_index(g)
    return arith.index_cast(_i64(), ptr)


def _utf8(s: str | bytes) -> bytes:
    return s if isinstance(s, bytes) else s.encode("utf-8", errors="surrogateescape")


def string_constant(node: Node, s: str | bytes) -> ir.Value:
    """The handle of one constant string."""
    data = _utf8(s)
    if b"\0" in data:
        raise node.fail("a string constant with a NUL character is not lowered")
    return _bytes_global(node, data + b"\0", "onnxc_strconst")


def string_table(node: Node, items: Sequence[str | bytes]) -> ir.Value:
    """The handle of a table of constant strings (see the module docstring)."""
    parts = [_utf8(s) for s in items]
    if any(b"\0" in p for p in parts):
        raise node.fail("a string constant with a NUL character is not lowered")
    return _bytes_global(node, b"".join([str(len(parts)).encode() + b"\0"] + [p + b"\0" for p in parts]), "onnxc_strtable")


# --- composing with the numeric lowerings of the same op types ---------------------------------------


def _with_strings(op_type: str, fn: Callable[[Node], Sequence[ir.Value | None]], check: Callable[[Node], str | None] | None = None, domain: str = "") -> None:
    """Register `fn`/`check` for `op_type` nodes that see strings, keeping the existing pattern
    (if any) for the others: one pattern per op type, dispatching on the node's types."""
    base = PATTERNS.get((domain, op_type))

    def both_fn(node: Node) -> Sequence[ir.Value | None]:
        if _node_strings(node):
            return fn(node)
        if base is None:
            raise node.fail("only string tensors are lowered")
        return base.fn(node)

    def both_check(node: Node) -> str | None:
        if _node_strings(node):
            return check(node) if check is not None else None
        if base is None:
            return f"{node.op_type} is lowered only for string tensors"
        return base.check(node) if base.check is not None else None

    PATTERNS[(domain, op_type)] = Pattern((op_type,), both_fn, both_check, base.min_version if base else 1, domain)


# --- Equal, StringConcat -------------------------------------------------------------------------------


def lower_equal_strings(node: Node) -> list[ir.Value]:
    """Equal on strings: byte-wise equality of the UTF-8 encodings (broadcasting)."""
    return [elementwise([node.input(0), node.input(1)], _i1(), lambda a, b: _truthy(call(node, "onnxc_str_eq", [a, b])))]


@lowers("StringConcat")
def lower_string_concat(node: Node) -> list[ir.Value]:
    """StringConcat: a + b elementwise with numpy broadcasting (new strings in the run's arena)."""
    return [elementwise([node.input(0), node.input(1)], _i64(), lambda a, b: call(node, "onnxc_str_concat", [a, b]))]


# --- RegexFullMatch -----------------------------------------------------------------------------------

_CLASS = {"d": "[:digit:]", "w": "[:alnum:]_", "s": "[:space:]"}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_ERE_META = set(".[]()*+?{}|^$\\")


def _literal(ch: str) -> str:
    """One literal character in ERE (metacharacters in a bracket, which needs no escapes)."""
    if ch in _ERE_META:
        return "\\" + ch if ch not in "^]\\" else {"^": "\\^", "]": "[]]", "\\": "[\\]"}[ch]
    return ch


def translate_re2(pattern: str) -> tuple[str, bool]:
    """(POSIX extended pattern anchored as ^(...)$, case-insensitive) for an RE2 pattern, or
    LoweringError naming the construct that is not supported (see the module docstring)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise LoweringError(f"invalid regular expression {pattern!r}: {exc}") from None
    icase = False
    i, n = 0, len(pattern)
    if pattern.startswith("(?i)"):
        icase, i = True, 4
    out: list[str] = []
    depth = 0

    def escape_char(c: str) -> str:
        if c in _ESCAPES:
            return _literal(_ESCAPES[c])
        if c.isalnum():
            raise LoweringError(f"regular expression {pattern!r}: the escape \\{c} is not supported")
        return _literal(c)

    def hex_escape(j: int) -> tuple[str, int]:
        if j < n and pattern[j] == "{":
            end = pattern.index("}", j)
            return chr(int(pattern[j + 1 : end], 16)), end + 1
        return chr(int(pattern[j : j + 2], 16)), j + 2

    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise LoweringError(f"regular expression {pattern!r} ends with a backslash")
            e = pattern[i + 1]
            i += 2
            if e in "dws":
                out.append("[" + _CLASS[e] + "]")
            elif e in "DWS":
                out.append("[^" + _CLASS[e.lower()] + "]")
            elif e in "bB":  # word boundaries: GNU extensions glibc's regcomp accepts
                out.append("\\" + e)
            elif e == "A":
                out.append("^")
            elif e == "z":
                out.append("$")
            elif e == "x":
                ch, i = hex_escape(i)
                out.append(_literal(ch))
            else:
                out.append(escape_char(e))
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] == "^"
            j += negate
            raw: list[str] = []  # ranges, plain characters, [:classes:], in order
            lits: set[str] = set()  # characters POSIX brackets need in a special place
            first = True
            while j < n and (pattern[j] != "]" or first):
                ch = pattern[j]
                if ch == "]":  # a ']' first in the class is literal
                    lits.add("]")
                    j += 1
                elif ch == "\\" and j + 1 < n:
                    e = pattern[j + 1]
                    j += 2
                    if e in "dws":
                        raw.append(_CLASS[e])
                    elif e in "DWS":
                        raise LoweringError(f"regular expression {pattern!r}: \\{e} inside a bracket class is not supported")
                    elif e == "x":
                        ch2, j = hex_escape(j)
                        (lits.add(ch2) if ch2 in "]-^" else raw.append(ch2))
                    elif e in _ESCAPES:
                        raw.append(_ESCAPES[e])
                    elif e.isalnum():
                        raise LoweringError(f"regular expression {pattern!r}: the escape \\{e} is not supported")
                    elif e in "]-^":
                        lits.add(e)
                    else:
                        raw.append(e)  # '\\' and other punctuation are literal in a POSIX bracket
                elif ch == "[" and pattern.startswith("[:", j):
                    end = pattern.index(":]", j)
                    raw.append(pattern[j : end + 2])
                    j = end + 2
                else:
                    raw.append(ch)
                    j += 1
                first = False
            if j >= n:
                raise LoweringError(f"regular expression {pattern!r}: unterminated bracket class")
            # POSIX: a literal ']' comes first, '-' last, '^' anywhere but first.
            body = ("]" if "]" in lits else "") + "".join(raw)
            if "^" in lits:
                body = body + "^" if body else "^"  # a lone '^' class is rewritten below
            if "-" in lits:
                body += "-"
            if body == "^":
                out.append("\\^" if not negate else "[^^]")
            else:
                out.append("[" + ("^" if negate else "") + body + "]")
            i = j + 1
        elif c == "(":
            if pattern.startswith("(?:", i):
                i += 3
            elif pattern.startswith("(?P<", i) or (pattern.startswith("(?<", i) and not pattern.startswith("(?<=", i) and not pattern.startswith("(?<!", i)):
                i = pattern.index(">", i) + 1
            elif pattern.startswith("(?", i):
                raise LoweringError(f"regular expression {pattern!r}: the group flag {pattern[i:i + 3]}... is not supported")
            else:
                i += 1
            depth += 1
            out.append("(")
        elif c == ")":
            depth -= 1
            out.append(")")
            i += 1
        elif c in "*+?":
            out.append(c)
            i += 1
            if i < n and pattern[i] == "?":  # non-greedy: the same answer for a full match
                i += 1
        elif c == "{":
            m = re.match(r"\{(\d+)(,(\d*))?\}", pattern[i:])
            if m is None:
                out.append("\\{")
                i += 1
                continue
            out.append(m.group(0))
            i += len(m.group(0))
            if i < n and pattern[i] == "?":
                i += 1
        elif c == ".":
            out.append("[^\n]")
            i += 1
        elif c in "|^$":
            out.append(c)
            i += 1
        else:
            out.append(_literal(c))
            i += 1
    if "\0" in "".join(out):
        raise LoweringError(f"regular expression {pattern!r}: a NUL character is not supported")
    return "^(" + "".join(out) + ")$", icase


def _check_regex(node: Node) -> str | None:
    try:
        translate_re2(str(node.attr("pattern", "")))
    except LoweringError as exc:
        return str(exc)
    return None


@lowers("RegexFullMatch", check=_check_regex)
def lower_regex_full_match(node: Node) -> list[ir.Value]:
    """RegexFullMatch: whether each whole string matches `pattern` (see the module docstring)."""
    ere, icase = translate_re2(str(node.attr("pattern", "")))
    pat = string_constant(node, ere)
    flag = const_scalar(int(icase), _i32())
    return [elementwise([node.input(0)], _i1(), lambda s: _truthy(call(node, "onnxc_str_regex_full_match", [s, pat, flag])))]


# --- StringSplit ---------------------------------------------------------------------------------------


@lowers("StringSplit")
def lower_string_split(node: Node) -> list[ir.Value]:
    """StringSplit: Y = x's shape + [the most pieces of any element] (padded with ""), Z = the
    number of pieces per element. Count first, then fill (data_dependent.py's scheme)."""
    x = node.input(0)
    delim = string_constant(node, str(node.attr("delimiter", "") or ""))
    maxsplit = const_scalar(int(node.attr("maxsplit", -1)) if node.has_attr("maxsplit") else -1, _i64())
    counts = elementwise([x], _i64(), lambda s: call(node, "onnxc_str_split_count", [s, delim, maxsplit]))
    r = rank_of(x)
    total = reduce_dims([counts], list(range(r)), [0], [_i64()], lambda a: [arith.maxsi(a[0], a[1])])[0]
    width = arith.index_cast(ir.IndexType.get(), tensor.extract(total, []))
    shape = [*shape_of(x), width]
    out = empty(shape, _i64())

    def body(args: list[ir.Value]) -> list[ir.Value]:
        j = arith.index_cast(_i64(), index_of(r))
        return [call(node, "onnxc_str_split_part", [args[0], delim, maxsplit, j])]

    y = generic([x], [out], [affine_map(r + 1, list(range(r))), identity_map(r + 1)], ["parallel"] * (r + 1), body)[0]
    return [y, counts]


# --- StringNormalizer -----------------------------------------------------------------------------------

_CASE = {"NONE": 0, "LOWER": 1, "UPPER": 2}


def _check_normalizer(node: Node) -> str | None:
    t = node.onnx_types[0]
    if not isinstance(t, ir.RankedTensorType):
        return None
    shape = static_shape(t)
    if len(shape) not in (1, 2):
        return f"the input must be [C] or [1, C], got rank {len(shape)}"
    if len(shape) == 2 and shape[0] not in (1, None):
        return f"the input must be [C] or [1, C]; its first dim is {shape[0]}"
    action = str(node.attr("case_change_action", "NONE"))
    if action not in _CASE:
        return f"case_change_action must be NONE, LOWER or UPPER, got {action!r}"
    return None


@lowers("StringNormalizer", check=_check_normalizer)
def lower_string_normalizer(node: Node) -> list[ir.Value]:
    """StringNormalizer: drop stopwords (count, then write the kept ones in order), change case;
    [""] when nothing is left (see the module docstring)."""
    x = node.input(0)
    two_d = rank_of(x) == 2
    if two_d:  # a dynamic first dim must be 1: the cast checks it at run time (runtime_checks.py)
        x = cast_to_type(x, tensor_type([1, static_shape(x.type)[1]], _i64()))
    flat = collapse_unit_dims(x, [0]) if two_d else x
    mode = _CASE[str(node.attr("case_change_action", "NONE"))]
    stop = [s for s in (node.attr("stopwords", []) or [])]
    fold = const_scalar(0 if int(node.attr("is_case_sensitive", 0)) else 1, _i32())
    locale = string_constant(node, str(node.attr("locale", "") or ""))
    mode_v = const_scalar(mode, _i32())
    empty_s = string_constant(node, "")

    def changed(s: ir.Value) -> ir.Value:
        return call(node, "onnxc_str_change_case", [s, mode_v, locale]) if mode else s

    if stop:
        table = string_table(node, stop)
        minus1 = const_scalar(-1, _i64())

        def kept(s: ir.Value) -> ir.Value:
            return arith.cmpi(arith.CmpIPredicate.eq, call(node, "onnxc_str_table_find", [table, s, fold, locale]), minus1)

        count = count_where(flat, kept)
    else:
        kept = None
        count = shape_of(flat)[0]
        count = const_index(count) if isinstance(count, int) else count
    size = arith.maxui(count, const_index(1))
    out = filled([size], _i64(), empty_s)

    def write(outs: list[ir.Value], ivs: list[ir.Value], pos: ir.Value) -> list[ir.Value]:
        return [tensor.insert(changed(tensor.extract(flat, ivs)), outs[0], [pos])]

    keep = (lambda ivs: kept(tensor.extract(flat, ivs))) if kept else (lambda ivs: const_scalar(1, _i1()))
    y = compact(shape_of(flat), keep, [out], write)[0]
    return [expand_unit_dims(y, [0]) if two_d else y]


# --- LabelEncoder -----------------------------------------------------------------------------------------


def _tensor_attr(node: Node, name: str) -> np.ndarray | None:
    if not node.has_attr(name):
        return None
    array, _ = attribute_to_array(node.op.attributes[name])
    return np.asarray(array)


def _keys_values(node: Node) -> tuple[np.ndarray, np.ndarray, object]:
    """(keys, values, default) of a LabelEncoder as numpy arrays (strings as bytes/str objects)."""
    keys = None
    for name, dtype in (("keys_strings", object), ("keys_int64s", np.int64), ("keys_floats", np.float32)):
        if node.has_attr(name):
            keys = np.array(node.attr(name), dtype=dtype)
    if keys is None:
        keys = _tensor_attr(node, "keys_tensor")
    values = None
    default: object = None
    for name, dtype, dname in (("values_strings", object, "default_string"), ("values_int64s", np.int64, "default_int64"), ("values_floats", np.float32, "default_float")):
        if node.has_attr(name):
            values = np.array(node.attr(name), dtype=dtype)
            default = node.attr(dname)
    if values is None:
        values = _tensor_attr(node, "values_tensor")
    if node.has_attr("default_tensor"):
        default = _tensor_attr(node, "default_tensor").reshape(-1)[0]
    if keys is None or values is None:
        raise LoweringError(f"{node.describe()}: keys and values must be given")
    return keys.reshape(-1), values.reshape(-1), default


def _default_for(out_elem: ir.Type) -> object:
    if is_string(out_elem):
        return "_Unused"
    if is_float(out_elem):
        return -0.0
    return -1


def _check_label_encoder(node: Node) -> str | None:
    try:
        keys, values, _ = _keys_values(node)
    except LoweringError as exc:
        return str(exc)
    if len(keys) != len(values):
        return f"{len(keys)} keys but {len(values)} values"
    if is_string(node.in_elem(0)) != (keys.dtype == object):
        return "the keys' type does not match the input's"
    return None


def _encode(node: Node, x: ir.Value, in_onnx: ir.Type, keys: np.ndarray, values: np.ndarray, default: object, out_onnx: ir.Type) -> ir.Value:
    """Elementwise lookup: the index of each element of `x` among `keys` (the string table's
    search, or a chain of compares for numbers; NaN keys match NaN), then the value at that
    index, `default` where there is none (a table of K + 1 values whose last is the default)."""
    k = len(keys)
    in_elem = convert_element(in_onnx)
    if is_string(in_onnx):
        table = string_table(node, [_item(s) for s in keys])
        zero, empty_locale = const_scalar(0, _i32()), string_constant(node, "")

        def index(s: ir.Value) -> ir.Value:
            return call(node, "onnxc_str_table_find", [table, s, zero, empty_locale])

    else:
        key_consts = [(float(kv) if is_float(in_elem) else int(kv)) for kv in keys]
        if not is_float(in_elem):  # a key the input type cannot hold matches nothing
            lo, hi = min_value(in_elem, is_unsigned(in_onnx)), max_value(in_elem, is_unsigned(in_onnx))
            usable = [lo <= kv <= hi for kv in key_consts]
        else:
            usable = [True] * k

        def index(v: ir.Value) -> ir.Value:
            idx = const_scalar(-1, _i64())
            for i in reversed(range(k)):
                if not usable[i]:
                    continue
                kv = key_consts[i]
                if is_float(in_elem):
                    if np.isnan(kv):
                        hit = arith.cmpf(arith.CmpFPredicate.UNO, v, v)
                    else:
                        hit = arith.cmpf(arith.CmpFPredicate.OEQ, v, const_scalar(kv, in_elem))
                else:
                    hit = arith.cmpi(arith.CmpIPredicate.eq, v, const_scalar(kv, in_elem))
                idx = arith.select(hit, const_scalar(i, _i64()), idx)
            return idx

    last = const_scalar(k, _i64())
    zero64 = const_scalar(0, _i64())

    def slot(v: ir.Value) -> ir.Value:
        i = index(v)
        return arith.select(arith.cmpi(arith.CmpIPredicate.slt, i, zero64), last, i)

    if is_string(out_onnx):
        vtable = string_table(node, [_item(s) for s in [*values, default]])
        return elementwise([x], _i64(), lambda v: call(node, "onnxc_str_table_get", [vtable, slot(v)]))
    out_elem = convert_element(out_onnx)
    np_type = np.float64 if is_float(out_elem) else np.int64
    table_values = np.concatenate([values.astype(np_type), np.array([default], dtype=np_type)])
    vconst = const_tensor(table_values, out_elem)
    return elementwise([x], out_elem, lambda v: tensor.extract(vconst, [arith.index_cast(ir.IndexType.get(), slot(v))]))


def _item(s: object) -> str | bytes:
    """A string element of an attribute (bytes from tensor attributes, str from lists)."""
    return bytes(s) if isinstance(s, (bytes, np.bytes_)) else str(s)


@lowers("LabelEncoder", check=_check_label_encoder, min_version=2, domain=ML)
def lower_label_encoder(node: Node) -> list[ir.Value]:
    """LabelEncoder: each element's value among the keys, else the default (`_encode`)."""
    keys, values, default = _keys_values(node)
    out_onnx = node.out_elem(0)
    if default is None:
        default = _default_for(out_onnx)
    return [_encode(node, node.input(0), node.in_elem(0), keys, values, default, out_onnx)]


def _check_category_mapper(node: Node) -> str | None:
    cats_s, cats_i = node.attr("cats_strings", []) or [], node.attr("cats_int64s", []) or []
    if len(cats_s) != len(cats_i):
        return f"{len(cats_s)} cats_strings but {len(cats_i)} cats_int64s"
    return None


@lowers("CategoryMapper", check=_check_category_mapper, domain=ML)
def lower_category_mapper(node: Node) -> list[ir.Value]:
    """CategoryMapper: strings to int64 (cats_strings -> cats_int64s, else default_int64) or
    int64 to strings (the other way, else default_string), as LabelEncoder's lookup."""
    strings = np.array(node.attr("cats_strings", []) or [], dtype=object)
    ints = np.array(node.attr("cats_int64s", []) or [], dtype=np.int64)
    if is_string(node.in_elem(0)):
        return [_encode(node, node.input(0), node.in_elem(0), strings, ints, int(node.attr("default_int64", -1)), node.out_elem(0))]
    return [_encode(node, node.input(0), node.in_elem(0), ints, strings, str(node.attr("default_string", "_Unused")), node.out_elem(0))]


def _check_one_hot_encoder(node: Node) -> str | None:
    ints, strs = node.attr("cats_int64s", []) or [], node.attr("cats_strings", []) or []
    if not ints and not strs:
        return "cats_int64s or cats_strings must be given"
    if is_string(node.in_elem(0)) != (not ints):
        return "string inputs take cats_strings, numbers cats_int64s"
    return None


@lowers("OneHotEncoder", check=_check_one_hot_encoder, domain=ML)
def lower_one_hot_encoder(node: Node) -> list[ir.Value]:
    """OneHotEncoder: each element's category index (LabelEncoder's lookup, -1 when it has none),
    then a float row with a 1 at that index. With zeros=0 an element without a category is a
    run-time error (the status channel, runtime_checks.py), as in the reference."""
    x = node.input(0)
    ints = node.attr("cats_int64s", []) or []
    keys = np.array(ints, dtype=np.int64) if ints else np.array(node.attr("cats_strings"), dtype=object)
    k = len(keys)
    idx = _encode(node, x, node.in_elem(0), keys, np.arange(k, dtype=np.int64), -1, _i64())
    r = rank_of(x)
    f32 = ir.F32Type.get()
    if not int(node.attr("zeros", 1)):
        missing = count_where(idx, lambda v: arith.cmpi(arith.CmpIPredicate.slt, v, const_scalar(0, _i64())))
        require(arith.cmpi(arith.CmpIPredicate.eq, missing, const_index(0)), node.op, "{count} element(s) have no category (zeros=0)", [("count", missing)])

    def body(args: list[ir.Value]) -> list[ir.Value]:
        hit = arith.cmpi(arith.CmpIPredicate.eq, args[0], arith.index_cast(_i64(), index_of(r)))
        return [arith.select(hit, const_scalar(1.0, f32), const_scalar(0.0, f32))]

    out = empty([*shape_of(idx), k], f32)
    return [generic([idx], [out], [affine_map(r + 1, list(range(r))), identity_map(r + 1)], ["parallel"] * (r + 1), body)[0]]


# --- Constant ------------------------------------------------------------------------------------------


def lower_string_constant(node: Node) -> list[ir.Value]:
    """Constant of strings: a table global, read element by element (row-major)."""
    attrs = node.op.attributes
    if "value" in attrs:
        array, _ = attribute_to_array(attrs["value"])
        array = np.asarray(array, dtype=object)
    elif "value_string" in attrs:
        array = np.array(node.attr("value_string"), dtype=object)
    elif "value_strings" in attrs:
        array = np.array(node.attr("value_strings"), dtype=object)
    else:
        raise node.fail("a string constant without a value")
    table = string_table(node, list(array.reshape(-1)))
    flat = generic([], [empty([array.size], _i64())], [identity_map(1)], ["parallel"],
                   lambda a: [call(node, "onnxc_str_table_get", [table, arith.index_cast(_i64(), index_of(0))])])[0]  # fmt: skip
    return [reshape(flat, list(array.shape))]


# --- TfIdfVectorizer on strings ----------------------------------------------------------------------


class _TokenIdNode(Node):
    """A TfIdfVectorizer node seen with integer tokens: the string input replaced by token ids
    (`ids`, None during the pre-check) and `pool_strings` by the ids of the pool's strings, so
    the integer lowering (tfidf.py) counts the n-grams."""

    def __init__(self, node: Node, ids: ir.Value | None, pool_ids: list[int]) -> None:
        super().__init__(node.op, node.info, list(node.inputs), node.lowering)
        t = node.onnx_types[0]
        if isinstance(t, ir.RankedTensorType):
            self.onnx_types[0] = ir.RankedTensorType.get(list(t.shape), _i64())
        if ids is not None:
            self.inputs[0] = ids
        self._pool_ids = pool_ids

    def attr(self, name: str, default: object = None) -> object:
        if name == "pool_int64s":
            return self._pool_ids
        if name == "pool_strings":
            return None
        return super().attr(name, default)


def _string_pool(node: Node) -> tuple[list[str | bytes], list[int]]:
    """(the distinct strings of pool_strings, the pool as their ids)."""
    distinct: dict[str | bytes, int] = {}
    ids = [distinct.setdefault(_item(s), len(distinct)) for s in (node.attr("pool_strings", []) or [])]
    return list(distinct), ids


def _check_tfidf_strings(node: Node) -> str | None:
    base = PATTERNS[("", "TfIdfVectorizer")]
    _, ids = _string_pool(node)
    if not ids:
        return "string input needs pool_strings"
    return base.check(_TokenIdNode(node, None, ids)) if base.check is not None else None


def lower_tfidf_strings(node: Node) -> list[ir.Value | None]:
    """TfIdfVectorizer on strings: each token becomes the id of its string in the pool (-1, which
    matches no n-gram, when absent), then the integer lowering runs."""
    base = PATTERNS[("", "TfIdfVectorizer")]
    distinct, ids = _string_pool(node)
    table = string_table(node, distinct)
    zero, empty_locale = const_scalar(0, _i32()), string_constant(node, "")
    tokens = elementwise([node.input(0)], _i64(), lambda s: call(node, "onnxc_str_table_find", [table, s, zero, empty_locale]))
    return list(base.fn(_TokenIdNode(node, tokens, ids)))


# --- Cast from strings ------------------------------------------------------------------------------------


def _check_cast_strings(node: Node) -> str | None:
    src, dst = node.in_elem(0), node.out_elem(0)
    if is_string(src) and is_string(dst):
        return None
    if is_string(dst):
        return "casting numbers to strings is not lowered (ONNX leaves their text form open)"
    if is_bool(dst) or is_exotic(dst) or not element_supported(dst):
        return f"casting strings to {dst} is not lowered"
    return None


def lower_cast_strings(node: Node) -> list[ir.Value]:
    """Cast/CastLike from strings: parsed in the C locale (`onnxc_str_to_f64`: decimal or
    scientific, INF/NaN in any case; `onnxc_str_to_i64`: the leading decimal integer), then
    converted as a number cast would (f64 or i64/ui64 to the target); strings to strings: as is."""
    src, dst = node.in_elem(0), node.out_elem(0)
    x = node.input(0)
    if is_string(src) and is_string(dst):
        return [x]
    out = convert_element(dst)
    if is_float(out):
        f64 = ir.F64Type.get()
        return [elementwise([x], out, lambda s: convert_scalar(call(node, "onnxc_str_to_f64", [s]), f64, dst))]
    unsigned = is_unsigned(dst)
    parsed = ir.IntegerType.get_unsigned(64) if unsigned else _i64()
    flag = const_scalar(int(unsigned), _i32())
    return [elementwise([x], out, lambda s: convert_scalar(call(node, "onnxc_str_to_i64", [s, flag]), parsed, dst))]


# --- Scatter without reduction ---------------------------------------------------------------------------


def _check_scatter_strings(node: Node) -> str | None:
    """Scatters move strings only without a reduction (which would add or multiply handles)."""
    reduction = str(node.attr("reduction", "none") or "none")
    if reduction != "none":
        return f"reduction '{reduction}' is not defined for strings"
    base = _SCATTER[node.op_type]
    return base.check(node) if base.check is not None else None


_SCATTER = {t: PATTERNS[("", t)] for t in ("ScatterND", "ScatterElements")}
for _t, _base in _SCATTER.items():
    _with_strings(_t, _base.fn, _check_scatter_strings)

_with_strings("TfIdfVectorizer", lower_tfidf_strings, _check_tfidf_strings)
_with_strings("Cast", lower_cast_strings, _check_cast_strings)
_with_strings("CastLike", lower_cast_strings, _check_cast_strings)
_with_strings("Equal", lower_equal_strings)
_with_strings("Constant", lower_string_constant)
