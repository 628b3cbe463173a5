// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// ImageDecoder: a private function per node calls the run-time decoder twice through the C
// interface (size the output from the bytes, then decode into a buffer of that size) and returns
// the extract_slice of the rows and columns written; the caller sees a tensor<?x?xCxi8>.

// CHECK-LABEL: func.func private @onnxc_image_decoder_0(%{{.+}}: tensor<?xi8>) -> tensor<?x?x1xi8>
// CHECK: %[[DATA:.+]] = bufferization.to_buffer %{{.+}} read_only : tensor<?xi8> to memref<?xi8, strided<[?], offset: ?>>
// CHECK: %[[DIMS:.+]] = memref.alloca() : memref<2xi64>
// CHECK: call @onnxc_image_decoder_size(%[[DATA]], %[[DIMS]], %{{.+}})
// CHECK: %[[BUF:.+]] = memref.alloc(%{{.+}}, %{{.+}}) : memref<?x?x1xi8>
// CHECK: call @onnxc_image_decoder_decode(%[[DATA]], %{{.+}}, %[[DIMS]], %{{.+}})
// CHECK: %[[T:.+]] = bufferization.to_tensor %[[BUF]] restrict writable
// CHECK: tensor.extract_slice %[[T]][0, 0, 0] [%{{.+}}, %{{.+}}, 1] [1, 1, 1]
// CHECK-DAG: func.func private @onnxc_image_decoder_decode(memref<?xi8, strided<[?], offset: ?>>, memref<?x?x?xi8>, memref<2xi64>, i64) attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @onnxc_image_decoder_size(memref<?xi8, strided<[?], offset: ?>>, memref<2xi64>, i64) attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @gray
// CHECK: %[[C:.+]] = tensor.cast %{{.+}} : tensor<100xi8> to tensor<?xi8>
// CHECK: call @onnxc_image_decoder_0(%[[C]]) : (tensor<?xi8>) -> tensor<?x?x1xi8>
func.func @gray(%x: tensor<100xui8>) -> tensor<?x?x1xui8> {
  %0 = "onnx.image_decoder"(%x) {pixel_format = "Grayscale"} : (tensor<100xui8>) -> tensor<?x?x1xui8>
  return %0 : tensor<?x?x1xui8>
}

// -----

// Two decoders in one module: one declaration of each run-time function, one helper each.
// CHECK-LABEL: func.func private @onnxc_image_decoder_1(%{{.+}}: tensor<?xi8>) -> tensor<?x?x3xi8>
// CHECK-LABEL: func.func private @onnxc_image_decoder_0(%{{.+}}: tensor<?xi8>) -> tensor<?x?x3xi8>
// CHECK: func.func private @onnxc_image_decoder_decode(
// CHECK-NOT: func.func private @onnxc_image_decoder_decode(
// CHECK: func.func private @onnxc_image_decoder_size(
// CHECK-NOT: func.func private @onnxc_image_decoder_
// CHECK-LABEL: func.func @two
// CHECK: call @onnxc_image_decoder_0
// CHECK: call @onnxc_image_decoder_1
func.func @two(%x: tensor<?xui8>, %y: tensor<?xui8>) -> (tensor<?x?x3xui8>, tensor<?x?x3xui8>) {
  %0 = "onnx.image_decoder"(%x) : (tensor<?xui8>) -> tensor<?x?x3xui8>
  %1 = "onnx.image_decoder"(%y) {pixel_format = "BGR"} : (tensor<?xui8>) -> tensor<?x?x3xui8>
  return %0, %1 : tensor<?x?x3xui8>, tensor<?x?x3xui8>
}
