# RUN: %PYTHON %s | filecheck %s
"""`insert_failure_exits` (targets/cpu/runtime_checks.py) on memrefs in CFG form: the alloc's pointer is
tested for NULL right after it; on NULL the exit block computes the byte count, records the failure
(check id and bytes, first failure only, by selects), sets the exit word (15) and returns poison; a
call of a function of the module is followed by a test of the exit word; `onnxc_status_words`
returns the status' address and the check table is a public constant. In an OpenMP region, the exit
block ends with a copy of the region's terminator."""

from mlir import ir

from onnxc.dialect import onnx_context
from onnxc.targets.cpu.runtime_checks import insert_failure_exits

SRC = """
func.func private @part(%n: index) -> memref<?xf32> {
  %m = memref.alloc(%n) {alignment = 64 : i64} : memref<?xf32> loc("e1"("Expand"))
  return %m : memref<?xf32>
}
func.func @main(%n: index) -> memref<?xf32> {
  %r = func.call @part(%n) : (index) -> memref<?xf32>
  return %r : memref<?xf32>
}
func.func @threaded(%n: index) {
  omp.parallel {
    %m = memref.alloc(%n) : memref<?xf32>
    memref.dealloc %m : memref<?xf32>
    omp.terminator
  }
  return
}
"""

with onnx_context():
    module = ir.Module.parse(SRC)
    insert_failure_exits(module)
    assert module.operation.verify()
    print(module)

# CHECK: onnxc.runtime_checks = [{{.*}}e1{{.*}}Expand{{.*}}could not allocate {bytes} bytes
# CHECK: memref.global "private" @__onnxc_status : memref<16xi64> = dense<0>
# CHECK-LABEL: func.func private @part
# CHECK: %[[M:.+]] = memref.alloc(%{{.+}}) {alignment = 64 : i64} : memref<?xf32>
# CHECK-NEXT: %[[P:.+]] = memref.extract_aligned_pointer_as_index %[[M]]
# CHECK: %[[NULL:.+]] = arith.cmpi eq, %[[P]], %{{.+}} : index
# CHECK: cf.cond_br %[[NULL]], ^[[FAIL:.+]], ^[[CONT:[^ ]+]]
# CHECK: ^[[CONT]]:
# CHECK: return %[[M]]
# CHECK: ^[[FAIL]]:
# CHECK: arith.muli
# CHECK: memref.get_global @__onnxc_status
# CHECK: arith.select
# CHECK: memref.store
# CHECK: %[[POISON:.+]] = ub.poison : memref<?xf32>
# CHECK: return %[[POISON]]
# CHECK-LABEL: func.func @main
# CHECK: call @part
# CHECK: memref.get_global @__onnxc_status
# CHECK: %[[EXIT:.+]] = memref.load %{{.+}}[%c15]
# CHECK: %[[LEFT:.+]] = arith.cmpi ne, %[[EXIT]]
# CHECK: cf.cond_br %[[LEFT]]
# CHECK: ub.poison : memref<?xf32>
# In an OpenMP region the exit block ends the region's work (a copy of its terminator).
# CHECK-LABEL: func.func @threaded
# CHECK: omp.parallel {
# CHECK: %[[T:.+]] = memref.alloc(%{{.+}}) : memref<?xf32>
# CHECK: %[[TP:.+]] = memref.extract_aligned_pointer_as_index %[[T]]
# CHECK: cf.cond_br %{{.+}}, ^[[TFAIL:.+]], ^[[TCONT:[^ ]+]]
# CHECK: ^[[TCONT]]:
# CHECK: memref.dealloc %[[T]]
# CHECK: omp.terminator
# CHECK: ^[[TFAIL]]:
# CHECK: memref.store
# CHECK: omp.terminator
# CHECK: memref.global "public" constant @onnxc_runtime_checks : memref<{{[0-9]+}}xi8> = dense<
# CHECK-LABEL: func.func @onnxc_status_words() -> i64
# CHECK: memref.extract_aligned_pointer_as_index
