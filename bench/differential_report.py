"""Print the differential table: every case of `test/python/test_differential.py`, run outside pytest.

Per case: its status (pass, not lowered with onnxc's pre-check problems, or the error), onnxc's
compile time and run time (all runs of the case; wall seconds, CPU seconds of this process in
parentheses, which stay meaningful on a loaded machine), onnxruntime's CPU time for the same
runs (one thread, first run of a fresh session: a rough yardstick, not a benchmark; see
`bench/` for latency), the case's total wall time (references included), and the largest relative and absolute
difference per reference (onnxruntime, and onnx.reference for the small models), with the same
comparison as the tests (`test_differential.compare`, formula in that module's docstring). It
ends with the `EXPECTED_PROBLEMS` dict that matches what onnxc reports now, to paste into the
test when the lowering's coverage changes.

    python bench/differential_report.py [case-name-substring ...]
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "python"))

import test_differential as T  # noqa: E402

from onnxc.errors import DiagnosticsError  # noqa: E402


def main(argv: list[str]) -> int:
    """Run the selected cases (all by default) and print one block per case, then the summary."""
    names = [n for n in T.CASES if not argv or any(a in n for a in argv)]
    problems: dict[str, tuple[str, ...]] = {}
    rows = []
    for name in names:
        case = T.CASES[name]
        t0 = time.perf_counter()
        status, worst = "pass", {}
        try:
            for _label, ref_name, diff in T.run_case(case):
                w = worst.setdefault(ref_name, [0.0, 0.0])
                w[0], w[1] = max(w[0], diff.rel), max(w[1], diff.abs)
        except DiagnosticsError as err:
            problems[name] = T.problem_keys(err)
            status = "not lowered: " + "; ".join(problems[name])
        except AssertionError as err:
            if isinstance(err.__cause__, DiagnosticsError):
                problems[name] = T.problem_keys(err.__cause__)
                status = "not lowered: " + "; ".join(problems[name])
            else:
                status = f"FAIL: {str(err).splitlines()[0]}"
        except Exception as err:  # noqa: BLE001 - report and go on to the next case
            status = f"ERROR {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            traceback.print_exc()
        wall = time.perf_counter() - t0
        rows.append((name, status, case.timings.get("compile_s"), case.timings.get("run_s"), worst, wall))
        diffs = "  ".join(f"{r}: rel {w[0]:.2e} abs {w[1]:.2e}" for r, w in worst.items())
        t = case.timings
        comp = f"{t['compile_s']:.2f} ({t['compile_cpu_s']:.2f})" if "compile_s" in t else "-"
        run = f"{t['run_s']:.3f} ({t['run_cpu_s']:.3f})" if "run_cpu_s" in t else "-"
        ort_run = f"{t['ort_run_cpu_s']:.3f}" if "ort_run_cpu_s" in t else "-"
        print(
            f"{name:20s} compile {comp:>15s} s  run {run:>15s} s  ort run (CPU) {ort_run:>6s} s  "
            f"total {wall:6.1f} s  {status}  {diffs}",
            flush=True,
        )
    print("\nEXPECTED_PROBLEMS = {")
    for name, keys in problems.items():
        print(f"    {name!r}: {keys!r},")
    print("}")
    return 0 if all(r[1] == "pass" or r[1].startswith("not lowered") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
