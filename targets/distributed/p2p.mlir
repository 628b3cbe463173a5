// Templates of the point-to-point transfers of pipeline stages (targets/distributed/stages.py):
// `string.Template` placeholders $name (function symbol), $memref (the buffer's memref type),
// $flat (the same buffer as one dimension), $groups (the collapse reassociation), $tag (the
// transfer's MPI tag), $peer (the other rank). Functions on buffers: they are merged into a rank's
// module after bufferization (see lowering.py for why); MPI_COMM_WORLD in rank order. The buffer
// is sent as one dimension: 22.1.8's MPI lowering counts only the first dimension's elements.
// @@send
func.func private @$name(%buf: $memref) {
  %comm = mpi.comm_world : !mpi.comm
  %tag = arith.constant $tag : i32
  %peer = arith.constant $peer : i32
  %flat = memref.collapse_shape %buf $groups : $memref into $flat
  mpi.send(%flat, %tag, %peer, %comm) : $flat, i32, i32
  return
}
// @@recv
func.func private @$name() -> $memref {
  %buf = memref.alloc() : $memref
  %comm = mpi.comm_world : !mpi.comm
  %tag = arith.constant $tag : i32
  %peer = arith.constant $peer : i32
  %flat = memref.collapse_shape %buf $groups : $memref into $flat
  mpi.recv(%flat, %tag, %peer, %comm) : $flat, i32, i32
  return %buf : $memref
}
