"""onnxc.transforms."""
