"""The bench's three outputs: ``results.json``, ``results.md`` and ``psnr_vs_time.png``.

Each method's entry in ``results.json`` is shaped like an ``ns-eval`` output (``experiment_name``,
``method_name``, ``checkpoint``, ``results``), so tools that read ``ns-eval`` files read it too; the
``results`` values are medians over the method's repeats. Beside them: ``status`` (``ok``,
``unsupported``, ``failed``) and its one-line ``reason``, training figures with their median, min
and max (``summary``; samples per ray is the final evaluation's mean over the test views, for models
that report it), the median PSNR-against-training-time ``curve`` (each point says how many test views it
scored: ``views`` of ``views_total``), and every run (``runs``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from nerfstudio_accel.bench.configs import MethodSpec

SUMMARY_KEYS = (
    "steps", "train_seconds", "ms_per_step", "rays_per_second", "samples_per_step", "warmup_seconds",
    "skipped_steps", "peak_memory_mb", "graph_mb", "hard_mining_fraction", "hard_mining_tau_hat", "input_stall_fraction",
)  # fmt: skip


def _spread(values: Sequence[float]) -> Dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _median_curve(curves: Sequence[Sequence[Dict[str, float]]]) -> List[Dict[str, float]]:
    """Point-by-point medians over runs (runs evaluate at the same budget fractions)."""
    points = []
    for index in range(min(len(curve) for curve in curves)):
        keys = set.intersection(*(set(curve[index]) for curve in curves))
        point = {key: statistics.median(curve[index][key] for curve in curves) for key in sorted(keys)}
        point["psnr_min"] = min(curve[index]["psnr"] for curve in curves)
        point["psnr_max"] = max(curve[index]["psnr"] for curve in curves)
        points.append(point)
    return points


def summarize_method(spec: MethodSpec, scene: str, runs: List[Dict], unsupported: Optional[str] = None) -> Dict:
    """One method's entry of ``results.json`` from its runs (each ``{"status": ..., ...}``)."""
    entry: Dict = {
        "experiment_name": scene, "method_name": spec.label, "checkpoint": None, "results": {}, "method": spec.name, "flags": list(spec.flags),
    }  # fmt: skip
    if unsupported is not None:
        return {**entry, "status": "unsupported", "reason": unsupported, "runs": []}
    good = [run for run in runs if run["status"] == "ok"]
    if not good:
        return {**entry, "status": "failed", "reason": runs[-1]["reason"] if runs else "did not run", "runs": runs}
    entry["status"] = "ok"
    if len(good) < len(runs):
        entry["reason"] = (
            f"{len(runs) - len(good)} of {len(runs)} repeats failed: {next(r['reason'] for r in runs if r['status'] != 'ok')}"
        )
    entry["results"] = {key: statistics.median(run["results"][key] for run in good) for key in good[0]["results"]}
    entry["summary"] = {
        key: _spread([run[key] for run in good])
        for key in SUMMARY_KEYS
        if all(run.get(key) is not None for run in good)
    }
    scored = ("psnr", "ssim", "lpips", "num_samples_per_ray")
    entry["summary"].update(
        {key: _spread([run["results"][key] for run in good]) for key in scored if key in entry["results"]}
    )
    entry["peak_memory_kind"] = good[0]["peak_memory_kind"]
    entry["curve"] = _median_curve([run["curve"] for run in good])
    entry["runs"] = runs
    return entry


def _cell(summary: Dict, key: str, digits: int) -> str:
    if key not in summary:
        return "—"
    spread = summary[key]
    text = f"{spread['median']:.{digits}f}"
    if spread["min"] != spread["max"]:
        text += f" ({spread['min']:.{digits}f}–{spread['max']:.{digits}f})"
    return text


def _percent_cell(summary: Dict, key: str) -> str:
    """A fraction as a percentage (one decimal), with the spread over repeats; "—" where not reported."""
    if key not in summary:
        return "—"
    scaled = {name: 100.0 * value for name, value in summary[key].items()}
    return _cell({key: scaled}, key, 1) + "%"


def _views_note(point: Dict) -> str:
    """``", psnr on 5 of 20 views"`` for a curve point that scored part of the test split, else ``""``."""
    views, total = point.get("views"), point.get("views_total")
    return (
        f", psnr on {views:.0f} of {total:.0f} views"
        if views is not None and total is not None and views < total
        else ""
    )


def markdown_table(meta: Dict, methods: Sequence[Dict]) -> str:
    """``results.md``: the settings, one row per method, and PSNR against training time."""
    repeats = meta["repeats"]
    eval_views, parser_factor = meta.get("eval_views"), meta.get("parser_downscale_factor", 1)
    lines = [
        f"# ns-accel-bench: {meta['scene']} on {meta['device_name']}, {meta['budget_seconds']:g} s of training per method",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Data `{meta['data']}` ({meta['dataparser']}, downscale {meta['downscale']:g}"
        + (f", the capture's own images_{parser_factor}" if parser_factor > 1 else "")
        + f"), seed {meta['seed']}, "
        f"torch {meta['versions']['torch']}, nerfstudio {meta['versions']['nerfstudio']}, nerfacc {meta['versions']['nerfacc']}, "
        f"{meta['threads']} CPU threads"
        + (f" (OpenMP threads: {meta['openmp_wait']})" if meta.get("openmp_wait") else "")
        + ". Each method first trains one untimed warm-up step (lazy CUDA loads and "
        "compiles), and evaluation time is not counted in the budget; metrics are means over "
        "every view of the test split, RGBA targets composited over white"
        + (
            f" (evaluations before the last score {eval_views} evenly spaced test view{'s' if eval_views > 1 else ''}, --eval-views)."
            if eval_views
            else "."
        )
        + " Training rays/s and samples/step are training figures; samples/ray is the final evaluation's;"
        " input stall is the mean share of a step spent waiting for its batch (accel methods only)."
        + (f" Values are medians over {repeats} repeats, (min–max) beside them." if repeats > 1 else ""),
        "",
        "| method | steps | ms/step | train rays/s | samples/step | samples/ray | PSNR (dB) | SSIM | LPIPS | peak memory (MB) | graph (MB) | b/B | input stall | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for method in methods:
        summary = method.get("summary", {})
        note = method.get("reason", "")
        if method["status"] != "ok":
            note = f"{method['status']}: {note}"
        elif "peak_memory_kind" in method:
            note = (note + "; " if note else "") + (
                "CUDA max allocated" if method["peak_memory_kind"] == "cuda_max_allocated" else "process peak RSS"
            )
            skipped_steps = summary.get("skipped_steps", {}).get("median", 0)
            if skipped_steps:
                note += f"; {skipped_steps:.0f} non-finite steps skipped"
        cells = [
            _cell(summary, "steps", 0), _cell(summary, "ms_per_step", 1), _cell(summary, "rays_per_second", 0),
            _cell(summary, "samples_per_step", 0), _cell(summary, "num_samples_per_ray", 1), _cell(summary, "psnr", 2), _cell(summary, "ssim", 3),
            _cell(summary, "lpips", 3), _cell(summary, "peak_memory_mb", 0), _cell(summary, "graph_mb", 1),
            _cell(summary, "hard_mining_fraction", 2), _percent_cell(summary, "input_stall_fraction"),
        ]  # fmt: skip
        lines.append(f"| `{method['method_name']}` | " + " | ".join(cells) + f" | {note} |")
    curves = [method for method in methods if method.get("curve")]
    if curves:
        lines += [
            "",
            "PSNR (dB) against training time (s), step in brackets, and the test views scored where not all:",
            "",
        ]
        width = max(len(method["curve"]) for method in curves)
        lines.append("| method | " + " | ".join(f"point {index + 1}" for index in range(width)) + " |")
        lines.append("|---|" + "---:|" * width)
        for method in curves:
            points = [
                f"{p['psnr']:.2f} @ {p['seconds']:.0f} s ({p['step']:.0f}){_views_note(p)}" for p in method["curve"]
            ]
            lines.append(f"| `{method['method_name']}` | " + " | ".join(points + [""] * (width - len(points))) + " |")
    lines += ["", "![PSNR against training time](psnr_vs_time.png)", ""]
    return "\n".join(lines)


@dataclass
class PsnrCurve:
    """One line of a PSNR-against-time figure: ``points`` as in a results.json method's ``curve`` (``seconds``,
    ``psnr``, and ``psnr_min``/``psnr_max`` when repeated), drawn ``offset_seconds`` to the right."""

    label: str
    points: List[Dict[str, float]]
    offset_seconds: float = 0.0

    @property
    def seconds(self) -> List[float]:
        return [point["seconds"] + self.offset_seconds for point in self.points]


def curves_of_results(path: Path, label: str = "", offset_seconds: float = 0.0) -> List[PsnrCurve]:
    """The curves of a results.json's methods that ran; each labelled ``label`` (followed by the method's name
    when the file has several), or the method's name and downscale when ``label`` is empty."""
    saved = json.loads(Path(path).read_text())
    ran = [method for method in saved["methods"] if method.get("curve")]
    downscale = saved["meta"]["downscale"]

    def name(method: Dict) -> str:
        if not label:
            return method["method_name"] + (f", downscale {downscale:g}" if downscale != 1 else "")
        return f"{label}: {method['method_name']}" if len(ran) > 1 else label

    return [PsnrCurve(name(method), method["curve"], offset_seconds) for method in ran]


def plot_curves(curves: Sequence[PsnrCurve], title: str, path: Path, xlabel: str) -> None:
    """PSNR against time, one line per curve, its min–max band where it has one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.0, 4.5), dpi=120)
    for curve in curves:
        line = axes.plot(curve.seconds, [point["psnr"] for point in curve.points], marker="o", label=curve.label)[0]
        if all("psnr_min" in point and "psnr_max" in point for point in curve.points):
            axes.fill_between(
                curve.seconds,
                [point["psnr_min"] for point in curve.points],
                [point["psnr_max"] for point in curve.points],
                color=line.get_color(),
                alpha=0.2,
            )
    axes.set_xlabel(xlabel)
    axes.set_ylabel("test PSNR (dB)")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    if curves:
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_psnr_vs_time(meta: Dict, methods: Sequence[Dict], path: Path) -> None:
    """One PSNR-against-training-time curve per method (min–max band when repeated)."""
    curves = [PsnrCurve(method["method_name"], method["curve"]) for method in methods if method.get("curve")]
    skipped = [method["method_name"] for method in methods if method["status"] != "ok"]
    title = f"{meta['scene']} (downscale {meta['downscale']:g}) on {meta['device_name']}, {meta['budget_seconds']:g} s budget"
    plot_curves(
        curves,
        title + (f"; not run: {', '.join(skipped)}" if skipped else ""),
        path,
        xlabel="training time (s, evaluation excluded)",
    )


def write_outputs(out: Path, meta: Dict, methods: Sequence[Dict]) -> None:
    """Write (or rewrite) the three files; called after every run so a stopped bench keeps its rows."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "methods": list(methods)}, indent=2))
    (out / "results.md").write_text(markdown_table(meta, methods))
    plot_psnr_vs_time(meta, methods, out / "psnr_vs_time.png")
