"""onnxc.tools."""
