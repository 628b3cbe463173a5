"""onnxc.importers."""
