"""`split_masked_memory.py`: masked loads/stores wider than a register become register-wide ones,
with the same lanes read and written (an LLVM code-generator assertion aborted the process on the
wide ones: see the module docstring)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.passmanager import PassManager
from mlir.runtime import get_ranked_memref_descriptor

from onnxc.targets.cpu.split_masked_memory import split_wide_masked_memory

# 20 lanes from an unaligned offset: with 256-bit registers, pieces of 8, 8 and 4 lanes.
_KERNEL = """
func.func @f(%src: memref<40xf32>, %dst: memref<48xf32>, %n: index) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c24 = arith.constant 24 : index
  %mask = vector.create_mask %n : vector<20xi1>
  %pass = arith.constant dense<-1.0> : vector<20xf32>
  %v = vector.maskedload %src[%c3], %mask, %pass : memref<40xf32>, vector<20xi1>, vector<20xf32> into vector<20xf32>
  vector.store %v, %dst[%c0] : memref<48xf32>, vector<20xf32>
  vector.maskedstore %dst[%c24], %mask, %v : memref<48xf32>, vector<20xi1>, vector<20xf32>
  return
}
"""


def _masked_ops(module: ir.Module) -> list[tuple[str, int]]:
    """(op name, lanes) of every masked load/store of `module`."""
    out: list[tuple[str, int]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "llvm.intr.masked.load":
            out.append((op.name, ir.VectorType(op.results[0].type).shape[0]))
        elif op.name == "llvm.intr.masked.store":
            out.append((op.name, ir.VectorType(op.operands[0].type).shape[0]))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return out


def test_wide_masked_memory_is_split_into_register_wide_pieces_with_the_same_lanes() -> None:
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_KERNEL)
        PassManager.parse(
            "builtin.module(convert-vector-to-llvm,finalize-memref-to-llvm,convert-arith-to-llvm,"
            "convert-index-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)"
        ).run(module.operation)
        assert sorted(_masked_ops(module)) == [("llvm.intr.masked.load", 20), ("llvm.intr.masked.store", 20)]
        assert split_wide_masked_memory(module, 256) == 2
        assert module.operation.verify()
        assert sorted(_masked_ops(module)) == sorted([("llvm.intr.masked.load", n) for n in (8, 8, 4)] + [("llvm.intr.masked.store", n) for n in (8, 8, 4)])
        assert split_wide_masked_memory(module, 256) == 0  # nothing wider is left
        engine = ExecutionEngine(module, opt_level=2)
    src = np.arange(40, dtype=np.float32) + 100.0
    for n in (0, 1, 8, 9, 17, 20):
        dst = np.full(48, 7.0, np.float32)
        args = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in (src, dst)]
        engine.invoke("f", *args, ctypes.pointer(ctypes.c_int64(n)))
        lanes = np.arange(20)
        loaded = np.where(lanes < n, src[3:23], -1.0)  # masked-off lanes: the pass-through
        np.testing.assert_array_equal(dst[:20], loaded, err_msg=f"n={n}")
        np.testing.assert_array_equal(dst[20:24], 7.0)  # never written
        np.testing.assert_array_equal(dst[24:44], np.where(lanes < n, loaded, 7.0), err_msg=f"n={n}")  # masked-off lanes untouched
        np.testing.assert_array_equal(dst[44:], 7.0)


def test_register_wide_masked_memory_is_left_alone() -> None:
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_KERNEL.replace("20xi1", "8xi1").replace("20xf32", "8xf32"))
        PassManager.parse("builtin.module(convert-vector-to-llvm,finalize-memref-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)").run(module.operation)
        assert split_wide_masked_memory(module, 256) == 0


# The node test whose JIT compile aborted (SIGABRT in LLVM's x86-avoid-sfb) at jit_opt_level=0 on
# an AVX2 CPU: its attention tiles use 16-lane masked loads. Run in a child process so that an
# abort fails this test instead of killing pytest.
_GQA_CHILD = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("ignore")
    import numpy as np
    from onnx.backend.test.case import node
    import onnxc
    from onnxc.targets.cpu import CpuPipelineOptions
    case = next(c for c in node.collect_testcases("Attention") if c.name == "test_attention_4d_gqa_softcap")
    model = case.model
    inputs, outputs = case.data_sets[0]
    feeds = {vi.name: np.asarray(a) for vi, a in zip(model.graph.input, inputs)}
    m = onnxc.compile(model, options=CpuPipelineOptions(jit_opt_level=0))
    got = m(**feeds)
    got = list(got.values()) if isinstance(got, dict) else list(got)
    np.testing.assert_allclose(got[0], outputs[0], rtol=1e-3, atol=1e-5)
    print("ok")
    """
)


def test_attention_with_wide_masked_tiles_compiles_at_jit_opt_level_0() -> None:
    r = subprocess.run([sys.executable, "-c", _GQA_CHILD], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-2000:])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
