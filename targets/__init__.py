"""Code-generation targets of onnxc.

`onnxc.targets.cpu` lowers linalg-on-tensors modules through the vector dialect to LLVM and
runs them (JIT) or writes shared libraries (AOT). GPU and accelerator targets go beside it.
"""
