# RUN: rm -rf %t && mkdir -p %t/model
# RUN: %PYTHON %s %t
# RUN: not onnx-opt %t/model/up.onnx 2>&1 | filecheck %s --check-prefix=UP
# RUN: not onnx-opt %t/model/abs.onnx 2>&1 | filecheck %s --check-prefix=ABS
# RUN: not onnx-opt %t/model/link.onnx 2>&1 | filecheck %s --check-prefix=LINK
# RUN: not onnx-opt %t/model/eof.onnx 2>&1 | filecheck %s --check-prefix=EOF
# RUN: onnx-opt %t/model/good.onnx | filecheck %s --check-prefix=GOOD
# External data must stay inside the model's folder: `..`, absolute paths and links that leave the
# folder are refused (a known vulnerability class of ONNX tooling), as are offsets past the end.

import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper

root = Path(sys.argv[1])
folder = root / "model"
(root / "secret.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
(folder / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
os.symlink(root / "secret.bin", folder / "escape.bin")


def save(name: str, location: str, **keys: str) -> None:
    w = onnx.TensorProto(name="w", data_type=T.FLOAT, dims=[2, 3], data_location=T.EXTERNAL)
    for k, v in {"location": location, **keys}.items():
        w.external_data.add(key=k, value=v)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], name,
                              [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])], initializer=[w])  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), folder / f"{name}.onnx")


save("up", "../secret.bin")
save("abs", "/etc/passwd")
save("link", "escape.bin")
save("eof", "w.bin", offset="16", length="24")
save("good", "w.bin")

# UP-NOT: Traceback
# UP: error:
# UP: The initializer 'w' of graph 'up' is invalid: the external data location '../secret.bin' of tensor 'w' contains '..'; external data must lie in the model's folder.
# ABS: The initializer 'w' of graph 'abs' is invalid: the external data location '/etc/passwd' of tensor 'w' is an absolute path; external data must lie in the model's folder.
# LINK: The initializer 'w' of graph 'link' is invalid: the external data location 'escape.bin' of tensor 'w' resolves to '{{.*}}secret.bin', outside the model's folder
# EOF: The initializer 'w' of graph 'eof' is invalid: the external data location 'w.bin' of tensor 'w' asks for 24 bytes at offset 16, past the end of the file (24 bytes).
# GOOD: func.func @good
