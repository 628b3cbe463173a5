"""`onnxc partition model.onnx`: show how onnxc would split a model over this machine's backends.

What: discovers the backends (or takes `--backends vulkan,cpu`), runs the partitioner
(`onnxc.targets.backends.partition.partition`: per-node compatibility, then the `onnx-partition`
roofline pass) and prints the decision table: each subgraph, its nodes, the estimated time on
every backend that supports all of it, the transfer time on the chosen one, and the choice.
With `-o out.onnx` it writes the partitioned model as ONNX (each subgraph a model-local function
whose `metadata_props` name its backend; see `partitioned_onnx`), with `--emit mlir` the
annotated ONNX-dialect module (`onnxc.subgraph`/`onnxc.backend` on each op, the table on the
function) to `-o` or stdout (the table then goes to stderr).

User overrides, as the issue asks: `--backend vulkan[,acc]` forces the named backends in
preference order (each node to the first that supports it, onnxruntime's provider order, the
roofline ignored); `--deny` keeps nodes on the CPU; `--allow` lets only the listed nodes leave
it (both take ONNX node names or op types, comma-separated, repeatable).

Why a subcommand of its own module: the driver only registers it (`add_subparser`), as
`onnxc bench` does, so the backends code stays out of the compile/run paths.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_subparser", "cmd_partition", "main"]


def _names(values: Sequence[str] | None) -> list[str]:
    """Comma-separated, repeatable option values as one list (empty entries dropped)."""
    return [n.strip() for v in values or () for n in v.split(",") if n.strip()]


def cmd_partition(args: argparse.Namespace) -> int:
    """Partition `args.model`, print the decision table, write the model if asked."""
    import onnx

    from onnxc.targets.backends import BackendError, backends
    from onnxc.targets.backends.partition import decision_table, partition, partitioned_onnx
    from onnxc.tools.driver import DriverError

    path = Path(args.model)
    if not path.is_file():
        raise DriverError(f"no model file '{args.model}'")
    model = onnx.load(str(path))
    present = backends()
    wanted = _names(args.backends)
    forced = _names(args.backend)
    unknown = [n for n in wanted + forced if n not in {b.name for b in present}]
    if unknown:
        raise BackendError(f"no backend {', '.join(repr(n) for n in unknown)} on this machine (backends: {', '.join(b.name for b in present)})")
    # --backends narrows the set (a forced backend is in it, the CPU always is).
    chosen = [b for b in present if b.name in wanted or b.name in forced or b.info().device_kind == "cpu"] if wanted else present
    allow = _names(args.allow) if args.allow else None
    p = partition(model, chosen, pin_host=_names(args.deny), prefer=forced or None, allow=allow)
    table = decision_table(p)
    mlir_to_stdout = args.emit == "mlir" and not args.output
    out = sys.stderr if mlir_to_stdout else sys.stdout
    print(f"backends: {', '.join(b.name for b in chosen)}" + (f" (forced in this order: {', '.join(forced)})" if forced else " (roofline)"), file=out)
    print(table, file=out)
    if args.emit == "mlir":
        text = str(p.module)
        if args.output:
            Path(args.output).write_text(text + "\n")
            print(f"wrote {args.output}", file=out)
        else:
            print(text)
    elif args.output:
        written = partitioned_onnx(model, p)
        onnx.save(written, args.output)
        print(f"wrote {args.output} ({len(written.functions)} subgraph function(s))", file=out)
    return 0


def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """Register `partition` on the driver's sub-parsers."""
    p = sub.add_parser("partition", help="split a model over the backends: decision table, partitioned ONNX or MLIR")
    p.add_argument("model", help="the ONNX model (.onnx)")
    p.add_argument("--backends", action="append", metavar="A,B", help="backends to consider (default: all found; the CPU always)")
    p.add_argument("--backend", action="append", metavar="A[,B]", help="force these backends in preference order (each node to the first that supports it)")
    p.add_argument("--allow", action="append", metavar="NODES", help="only these nodes (ONNX names or op types) may leave the CPU")
    p.add_argument("--deny", action="append", metavar="NODES", help="these nodes (ONNX names or op types) stay on the CPU")
    p.add_argument("--emit", choices=("onnx", "mlir"), default="onnx", help="what -o writes (default onnx; mlir without -o prints to stdout)")
    p.add_argument("-o", "--output", help="write the partitioned model here")
    p.set_defaults(func=cmd_partition)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m onnxc.tools.partition model.onnx ...` (same as `onnxc partition`)."""
    from onnxc.tools.driver import main as driver_main

    return driver_main(["partition", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
