"""onnxc: an ONNX compiler framework on upstream MLIR.

The package's pieces live in sub-packages: `onnxc.dialect` (the ONNX dialect), `onnxc.importers`
(ONNX models in and out), `onnxc.transforms` (passes and pipelines), `onnxc.targets` (code
generation), `onnxc.tools` (`onnx-opt`, the `onnxc` driver).
"""

__version__ = "0.1.0"


def compile(model, target: str = "cpu", **kwargs):  # noqa: A001 - the design's public name
    """Compile an ONNX model (ModelProto, path or bytes) for `target`; see `onnxc.compiler`."""
    from onnxc.compiler import compile as _compile

    return _compile(model, target, **kwargs)


#: Names served by `onnxc.session` (onnxruntime's API over onnxc's backends), imported on first use.
_SESSION_NAMES = ("InferenceSession", "SessionOptions", "NodeArg", "get_available_providers")


def __getattr__(name):
    if name in _SESSION_NAMES:
        from onnxc import session

        return getattr(session, name)
    raise AttributeError(f"module 'onnxc' has no attribute '{name}'")


def import_model(model, config=None, **kwargs):
    """Import an ONNX model into an MLIR module of the ONNX dialect; see `onnxc.importers`."""
    from onnxc.importers import import_model as _import_model

    return _import_model(model, config, **kwargs)
