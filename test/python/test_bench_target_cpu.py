"""`bench/models.py --target-cpu CPU`: onnxc's code generated for another CPU than the host (AVX2
code for a Zen 3 measured on an AVX-512 machine), with the ISA of that code in every line.

The option reaches `CpuPipelineOptions.target_cpu` next to the threads asked for; a run on the
tiny model of test_bench_peers checks its outputs against onnxruntime and names the code's ISA;
an unknown CPU, or one whose code would not run on this machine, exits 1 with one line. Speed is
never asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_bench_peers import QUICK_ARGS, _tiny_model, bench

from onnxc.targets.cpu import CpuPipelineOptions
from onnxc.targets.cpu.isa import KNOWN_CPUS, host_cpu


def _runs_here(name: str) -> bool:
    cpu, host = KNOWN_CPUS[name], host_cpu()
    return cpu.arch == host.arch and cpu.features <= host.features


def test_target_cpu_reaches_the_compile_options() -> None:
    kwargs = bench.onnxc_threads_kwargs(2)
    options = bench.onnxc_target_cpu_kwargs("znver3", kwargs)["options"]
    assert isinstance(options, CpuPipelineOptions)
    assert (options.target_cpu, options.threads) == ("znver3", 2)
    assert bench.onnxc_target_cpu_kwargs("haswell", {})["options"].target_cpu == "haswell"


@pytest.mark.skipif(not _runs_here("znver3"), reason="znver3 (AVX2+FMA) code does not run on this machine")
def test_bench_runs_code_for_the_target_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    model = _tiny_model(tmp_path / "tiny.onnx")
    rows = []
    real = bench.bench_one
    monkeypatch.setattr(bench, "bench_one", lambda *a, **k: rows.append(real(*a, **k)) or rows[-1])
    assert bench.main(["--models", str(model), "--target-cpu", "znver3", *QUICK_ARGS]) == 0
    (row,) = rows
    assert row.errors == [] and row.check == "ok", (row.errors, row.check)
    out = capsys.readouterr().out
    assert out.startswith("ISA: AVX2+FMA (onnxc code for --target-cpu znver3); machine: "), out
    assert f"host ISA {host_cpu().isa}" in out.splitlines()[0]
    assert "tiny.onnx: ISA AVX2+FMA (onnxc code for --target-cpu znver3)" in out, out


def test_unknown_target_cpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--models", "light:squeezenet", "--target-cpu", "pentium-pro"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("--target-cpu: unknown target CPU 'pentium-pro' (known: host,") and "\n" not in err, err


def test_target_cpu_that_cannot_run_here_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    foreign = [name for name in KNOWN_CPUS if not _runs_here(name)]
    if not foreign:
        pytest.skip(f"every known CPU's code runs on this machine ({host_cpu().isa})")
    assert bench.main(["--models", "light:squeezenet", "--target-cpu", foreign[0]]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"--target-cpu {foreign[0]}: its code (") and "does not run on this machine" in err, err
