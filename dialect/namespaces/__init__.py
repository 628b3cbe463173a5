"""Empty Python modules for the ONNX dialect namespaces (`onnx`, `onnx_ml`, `onnx_training`,
`onnx_preview`), found by the MLIR bindings through a dialect search prefix.

Whenever the bindings wrap an operation (`value.owner`, walking, `op.parent`) they import the
Python module of its dialect, `<prefix>.<namespace>` for each registered prefix, and remember only
a successful import: a dialect without a module costs an import search per wrap (about 90 µs; most
of the time of the ONNX passes on big models). `onnxc.dialect.context` appends this package as a
search prefix (the bindings' own extension hook), so the search ends at these modules once. They
define no op classes: ONNX ops stay generic `OpView`s.
"""
