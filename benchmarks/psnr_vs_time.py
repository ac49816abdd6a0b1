"""One PSNR-against-time figure from several ``ns-accel-bench`` results: runs at two resolutions side by side,
or a warm start drawn after its source run's seconds (``OFFSET_S``), so every curve reads at total time.

    python benchmarks/psnr_vs_time.py --out FIGURE.png --title TITLE \\
        --curve RESULTS.json LABEL OFFSET_S [--curve RESULTS.json LABEL OFFSET_S ...]

LABEL "" names each curve by its method (and downscale). Each method of each results.json is one line with its
min–max band over repeats.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from nerfstudio_accel.bench.report import curves_of_results, plot_curves


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the figure to write (.png)")
    parser.add_argument("--title", default="", help="the figure's title")
    parser.add_argument(
        "--curve",
        nargs=3,
        action="append",
        required=True,
        metavar=("RESULTS_JSON", "LABEL", "OFFSET_S"),
        help="a bench's results.json, its label, and seconds to add to its times (repeatable)",
    )
    args = parser.parse_args(argv)
    curves = []
    for results, label, offset in args.curve:
        if not Path(results).is_file():
            parser.exit(2, f"error: {results} is not a file; give the results.json that ns-accel-bench wrote\n")
        try:
            offset_seconds = float(offset)
        except ValueError:
            parser.exit(2, f"error: OFFSET_S {offset!r} of {results} is not a number of seconds\n")
        curves += curves_of_results(Path(results), label, offset_seconds)
    if not curves:
        parser.exit(2, "error: no method in these results has a curve (every run failed); nothing to plot\n")
    plot_curves(curves, args.title, args.out, xlabel="time (s, training only; evaluations excluded)")
    print(f"wrote {args.out} ({len(curves)} curves)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
