"""The driver's GPU flags and sub-commands (issue 9, item 5), through `python -m onnxc.tools.driver`:

- `onnxc compile --target cuda --emit ptx --gpu-arch sm_XX [--tensor-cores auto|off] [--allow-tf32]`:
  the PTX targets the chip asked for, tensor cores follow the flags, and ptxas assembles it;
- `onnxc run --target vulkan --check`: runs on the Vulkan device and checks against a reference;
- `onnxc bench --target vulkan|cuda`: warm-up, median/p90; CUDA without a GPU is a clear error;
- GPU flags with a CPU target, and CPU-only flags with a GPU target, are errors naming the flag.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_gpu_cuda import _matmul_model, ptxas  # noqa: F401  (ptxas: the fixture)
from test_gpu_vulkan import MODELS, _vulkan_or_skip

DRIVER = [sys.executable, "-m", "onnxc.tools.driver"]


def onnxc(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DRIVER, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def softmax_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpu_tools") / "softmax.onnx"
    onnx.save(MODELS["softmax"](), path)
    return path


@pytest.mark.parametrize("chip", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_gpu_arch_selects_the_chip(chip: str, softmax_path: Path, tmp_path: Path, ptxas: str) -> None:
    from onnxc.targets.cuda import assemble

    out = tmp_path / "k.ptx"
    r = onnxc("compile", softmax_path, "--target", "cuda", "--emit", "ptx", "--gpu-arch", chip, "-o", out)
    assert r.returncode == 0, r.stderr
    sections = out.read_text().split("// onnxc kernel module: ")[1:]
    assert sections
    for section in sections:
        _, _, text = section.partition("\n")
        assert f".target {chip}" in text
        assert assemble(text, chip, ptxas).kernels


@pytest.mark.parametrize(
    "flags, mma",
    [([], False), (["--allow-tf32"], True), (["--allow-tf32", "--tensor-cores", "off"], False)],
)
def test_tensor_core_flags(flags: list[str], mma: bool, tmp_path: Path, ptxas: str) -> None:
    """A 64x64x64 f32 MatMul (whole tensor-core tiles) uses mma.sync (tf32) only with
    --allow-tf32 and not with --tensor-cores off."""
    model = tmp_path / "mm.onnx"
    onnx.save(_matmul_model(64, 64, 64), model)
    r = onnxc("compile", model, "--target", "cuda", "--emit", "ptx", "--gpu-arch", "sm_90", *flags)
    assert r.returncode == 0, r.stderr
    assert ("mma.sync" in r.stdout) == mma
    assert ".target sm_90" in r.stdout


@pytest.mark.parametrize("flag", [["--gpu-arch", "sm_80"], ["--allow-tf32"], ["--tensor-cores", "off"]])
def test_gpu_flags_need_the_cuda_target(flag: list[str], softmax_path: Path) -> None:
    r = onnxc("compile", softmax_path, "--target", "vulkan", "--emit", "gpu", *flag)
    assert r.returncode == 1
    assert f"{flag[0]}: only for --target cuda" in r.stderr


def test_unknown_gpu_arch_is_refused(softmax_path: Path) -> None:
    r = onnxc("compile", softmax_path, "--target", "cuda", "--emit", "ptx", "--gpu-arch", "sm_70")
    assert r.returncode == 2 and "invalid choice: 'sm_70'" in r.stderr


def test_run_on_vulkan_checks_against_the_reference(softmax_path: Path, tmp_path: Path) -> None:
    _vulkan_or_skip()
    x = np.random.default_rng(3).standard_normal((6, 100)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = onnxc("run", softmax_path, "--target", "vulkan", "--input", f"x={tmp_path / 'x.npy'}", "--check", "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    got = np.load(tmp_path / "out" / "y.npy")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-3, atol=1e-6)


def test_run_of_a_library_refuses_a_gpu_target(tmp_path: Path) -> None:
    lib = tmp_path / "m.so"
    lib.write_bytes(b"")
    r = onnxc("run", lib, "--target", "vulkan")
    assert r.returncode == 1 and "runs on the CPU" in r.stderr


def test_bench_on_vulkan(softmax_path: Path) -> None:
    _vulkan_or_skip()
    r = onnxc("bench", softmax_path, "--target", "vulkan", "--iterations", "3", "--warmup", "1")
    assert r.returncode == 0, r.stderr
    assert "target: vulkan (" in r.stdout
    assert "median" in r.stdout and "p90" in r.stdout


def test_bench_on_cuda_without_a_gpu_says_so(softmax_path: Path) -> None:
    from onnxc.targets.cuda import cuda_device_count

    if cuda_device_count():
        pytest.skip("an NVIDIA GPU is present: the no-GPU message is not given")
    r = onnxc("bench", softmax_path, "--target", "cuda", "--gpu-arch", "sm_90")
    assert r.returncode == 1
    assert "no NVIDIA GPU is present" in r.stderr
    assert "Traceback" not in r.stderr


def test_bench_refuses_cpu_flags_on_a_gpu_target(softmax_path: Path) -> None:
    r = onnxc("bench", softmax_path, "--target", "vulkan", "--threads", "2")
    assert r.returncode == 1 and "--threads: only for --target cpu" in r.stderr
