"""`fasttts bench report DIR`: REPORT.md and the figures, from the recipe runs in DIR.

DIR holds one folder per recipe run (`fasttts bench NAME --out DIR/NAME`, or `fasttts bench
all --out DIR`): config.json naming the recipe, rows.jsonl (`fasttts.bench.store.RowStore`),
and run.json (`fasttts.bench.runinfo`: command, platform, wall time). For each run, in the
order of `RECIPES`, the recipe's report hook (`Recipe.report`) draws its PNGs into
DIR/figures/<recipe>/ (DIR/figures/<recipe>/<folder>/ when a recipe has several runs) and
returns its `Section`; REPORT.md gets a summary table (recipe, backend, wall time, our
headline number against the paper's), then one section per run: its plots, the paper's
numbers, ours, where we fall short, the command, the backend, the wall time and the date.
Recipes with no run, or with no report hook yet, are listed as such. A damaged line of
rows.jsonl is set aside as `RowStore` does (rows.jsonl.bad, a warning naming the line) and the
rest is reported. REPORT.md is written atomically.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fasttts.bench import RECIPES, Recipe, Section
from fasttts.bench.runinfo import read_run
from fasttts.bench.store import RowsFileWarning, RowStore, check_out_dir
from fasttts.jsonio import JsonFileError, read_json

__all__ = ["REPORT_NAME", "ReportError", "RunFolder", "find_runs", "write_report"]

REPORT_NAME = "REPORT.md"


class ReportError(ValueError):
    """DIR cannot be reported: missing, not a folder, not writable, or holding no runs."""


@dataclass
class RunFolder:
    """One recipe run found in DIR.

    Attributes:
        folder: its folder.
        config: its config.json (None: unreadable, see `notes`).
        recipe: its recipe (None: config.json names none this fasttts knows).
        rows: its rows.jsonl entries ({"key", "row", "requests"}), damaged lines set aside.
        run: its run.json (None: not recorded, e.g. a run by an older fasttts).
        notes: what was wrong with the folder, one line each (damaged lines, ...).
    """

    folder: Path
    config: dict | None = None
    recipe: Recipe | None = None
    rows: list[dict] = field(default_factory=list)
    run: dict | None = None
    notes: list[str] = field(default_factory=list)


def find_runs(root: str | os.PathLike) -> list[Path]:
    """The run folders in `root`: its sub-folders holding a config.json, by name.

    Raises:
        ReportError: `root` is missing, not a folder, or holds no run folder.
    """
    root = Path(root)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise ReportError(f"bench report: {root} {what}; give the folder that `fasttts bench "
                          f"NAME --out DIR/NAME` or `fasttts bench all --out DIR` wrote")
    runs = sorted(p for p in root.iterdir() if p.is_dir() and (p / "config.json").is_file())
    if not runs:
        hint = (" (it is one run's folder: give its parent)"
                if (root / "config.json").is_file() else "")
        raise ReportError(f"bench report: {root} holds no benchmark runs (no sub-folder with a "
                          f"config.json){hint}; run `fasttts bench NAME --out {root}/NAME` or "
                          f"`fasttts bench all --out {root}` first")
    return runs


def _load(folder: Path) -> RunFolder:
    """A run folder's config, rows (`RowStore`: damaged lines set aside) and run.json."""
    out = RunFolder(folder)
    try:
        out.config = read_json(folder / "config.json")
        out.run = read_run(folder)
    except JsonFileError as e:
        out.notes.append(str(e))
    if not isinstance(out.config, dict):
        out.notes.append(f"{folder / 'config.json'}: not a recipe's configuration")
        out.config = None
        return out
    out.recipe = RECIPES.get(out.config.get("recipe"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RowsFileWarning)
        try:
            with RowStore(folder, out.config) as store:
                out.rows = store.rows
        except ValueError as e:
            out.notes.append(str(e))
    for w in caught:  # the damaged lines are this report's to tell; the rest as they were
        if issubclass(w.category, RowsFileWarning):
            out.notes.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out


def _duration(seconds: float) -> str:
    """"42 s", "5 min 20 s", "1 h 02 min"."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _inferred_command(config: dict, backend: str, folder: str) -> str:
    """The `fasttts bench` command a run's config.json says made it (for runs without a
    run.json): the recipe, --quick, a backend other than the recipe's default, SART's T."""
    from fasttts.bench import RECIPES

    name = config.get("recipe", "?")
    words = ["fasttts", "bench", name] + (["--quick"] if config.get("quick") else [])
    recipe = RECIPES.get(name)
    if recipe is not None and backend in recipe.backends and backend != recipe.backends[0]:
        words += ["--backend", backend]
    if config.get("sart_t") not in (None, 400):
        words += ["--sart-t", str(config["sart_t"])]
    return "`" + " ".join([*words, "--out", folder]) + "`"


def _facts(run: RunFolder) -> dict[str, str]:
    """Command, backend, wall time, date and fasttts commit of a run, as report lines."""
    config = run.config or {}
    backend = (config.get("backend") or (config.get("plan") or {}).get("backend")
               or (run.recipe.backends[0] if run.recipe else "?"))
    if not run.run or not run.run.get("runs"):
        walls = [r["row"]["wall_s"] for r in run.rows
                 if isinstance(r["row"].get("wall_s"), (int, float))]
        wall = (f"{_duration(sum(walls))} (the rows' own wall_s added up; no run.json)"
                if walls else "not recorded (no run.json)")
        where = "simulated" if backend == "sim" else backend
        return {"command": f"{_inferred_command(config, backend, run.folder.name)} (inferred "
                           f"from config.json: no run.json, run by an older fasttts)",
                "backend": f"{where} (no run.json: device not recorded)", "wall time": wall,
                "date": "not recorded"}
    runs = run.run["runs"]
    last = runs[-1]
    wall = _duration(sum(r.get("wall_s", 0.0) for r in runs))
    if len(runs) > 1:
        wall += f" over {len(runs)} runs (" + ", ".join(
            f"{r.get('start', '?')} - {r.get('end', '?')}, {r.get('status', '?')}"
            for r in runs) + ")"
    elif last.get("status") != "ok":
        wall += f" ({last.get('status')})"
    return {"command": f"`{last.get('recipe_command') or last.get('command')}`",
            "backend": last.get("platform_text", backend),
            "wall time": wall, "date": str(last.get("end", "?"))[:10],
            "fasttts": f"{last.get('fasttts_version', '?')}, {_commits(runs)}"}


def _commits(runs: list[dict]) -> str:
    """The fasttts commit a run ran, or, for a run resumed over sittings of different
    commits, each sitting's in order ("commits a (runs 1-2), b (run 3)")."""
    def name(r: dict) -> str:
        commit = r.get("git_commit")
        return ((commit[:10] + (" with uncommitted changes" if r.get("git_dirty") else ""))
                if commit else "not recorded")
    groups = [(c, [i for i, _ in g]) for c, g in
              itertools.groupby(enumerate(runs, 1), key=lambda e: name(e[1]))]
    if len(groups) == 1:
        return f"commit {groups[0][0]}"
    return "commits " + ", ".join(
        f"{c} (run {i[0]})" if len(i) == 1 else f"{c} (runs {i[0]}-{i[-1]})" for c, i in groups)


@dataclass
class _Entry:
    """One line of the summary table and (for a run) its section of REPORT.md."""

    recipe: str
    run: RunFolder | None
    section: Section | None = None
    status: str = ""
    markdown: str = ""


def _figdir(root: Path, run: RunFolder, several: bool) -> Path:
    name = run.config["recipe"]
    return root / "figures" / name / run.folder.name if several else root / "figures" / name


def _report_one(root: Path, run: RunFolder, several: bool) -> _Entry:
    """Call the run's report hook (status says why not, or what went wrong)."""
    name = (run.config or {}).get("recipe", "?")
    entry = _Entry(name, run)
    if run.config is None:
        entry.status = "not reported: config.json unreadable"
    elif run.recipe is None:
        entry.status = f"not reported: unknown recipe {name!r} (not in this fasttts)"
    elif run.recipe.report is None:
        entry.status = "not reported (the recipe has no report hook yet)"
    elif not run.rows:
        entry.status = "not reported: no finished rows yet"
    else:
        figdir = _figdir(root, run, several)
        try:
            figdir.mkdir(parents=True, exist_ok=True)
            entry.section = run.recipe.report(run.config, run.rows, figdir)
        except Exception as e:  # one broken hook must not lose the others' sections
            entry.status = f"report hook failed: {type(e).__name__}: {e}"
    entry.markdown = _section_md(root, entry, _figdir(root, run, several)
                                 if run.config else root)
    return entry


def _section_md(root: Path, entry: _Entry, figdir: Path) -> str:
    """A run's section: title, figures, paper, ours, shortfall, then its facts."""
    run, sec = entry.run, entry.section
    title = sec.title if sec else f"{entry.recipe} ({run.folder.name})"
    parts = [f"## {title}", ""]
    if sec:
        rel = figdir.relative_to(root).as_posix()
        parts += [f"![{sec.title}: {f}]({rel}/{f})" for f in sec.figures] + [""]
        gap = "\n\n" if sec.ours.lstrip().startswith("|") else " "  # a table starts a block
        parts += [f"**The paper.** {sec.paper}", "", f"**Ours.**{gap}{sec.ours}", "",
                  "### Where we fall short", "", sec.shortfall or "Nowhere that we measured.",
                  ""]
    else:
        parts += [f"**{entry.status}**", ""]
    facts = {"folder": f"`{run.folder.name}`", **_facts(run)}
    parts += ["| run | |", "|---|---|",
              *(f"| {k} | {v.replace('|', chr(92) + '|')} |" for k, v in facts.items())]
    if run.notes:
        parts += ["", "Problems found in this run's files:", "",
                  *(f"- {n}" for n in run.notes)]
    return "\n".join(parts) + "\n"


def _summary(entries: list[_Entry]) -> str:
    """The table at the top: recipe, run folder, backend, wall time, headline vs paper."""
    lines = ["| recipe | run | backend | wall time | ours vs the paper |", "|---|---|---|---|---|"]
    for e in entries:
        if e.run is None:
            lines.append(f"| {e.recipe} | - | - | - | {e.status} |")
            continue
        facts = _facts(e.run)
        headline = (e.section.headline or "see its section") if e.section else e.status
        lines.append(f"| {e.recipe} | `{e.run.folder.name}` | {facts['backend']} | "
                     f"{facts['wall time'].split(' (')[0].split(' over ')[0]} | {headline} |")
    return "\n".join(lines)


def _entries(root: Path, runs: list[RunFolder]) -> list[_Entry]:
    """Every recipe in `RECIPES` order (its runs, or one "not run" line), then runs of
    recipes this fasttts does not know."""
    entries = []
    for name in RECIPES:
        mine = [r for r in runs if r.config and r.config.get("recipe") == name]
        entries += [_report_one(root, r, len(mine) > 1) for r in mine] or [
            _Entry(name, None, status="not run")]
    entries += [_report_one(root, r, False) for r in runs
                if not (r.config and r.config.get("recipe") in RECIPES)]
    return entries


def write_report(root: str | os.PathLike) -> tuple[Path, list[_Entry]]:
    """Write root/REPORT.md and root/figures/ from the runs in `root` (module docstring).

    Returns:
        (REPORT.md's path, the entries: `.status` says what was not reported and why,
        `.run.notes` what was set aside).

    Raises:
        ReportError: `root` missing, not a folder, not writable, or holding no runs.
    """
    root = Path(root)
    folders = find_runs(root)
    try:
        check_out_dir(root)
    except ValueError as e:
        raise ReportError(f"bench report: {e}") from e
    entries = _entries(root, [_load(f) for f in folders])
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        "# fasttts bench report", "",
        f"Written by `fasttts bench report {root}` on {now} from the {len(folders)} "
        f"run folder(s) here. Rows on the simulator are virtual-clock seconds of its cost "
        f"model (labelled simulated), predictions, not measurements; rows on vllm are "
        f"wall-clock seconds on the host named in their section.", "",
        _summary(entries), "", *(e.markdown for e in entries if e.run is not None)])
    path = root / REPORT_NAME
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{REPORT_NAME}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's is 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)  # a reader sees the old report or the new one, never half
    except BaseException:
        os.unlink(tmp)
        raise
    return path, entries
