"""The README's examples run as written and print what they say: the in-process example prints
the answer of the PRM-weighted vote and whether it is correct (run on the simulator here: the
real engines are the integration tests' job)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import fasttts
from fasttts.config import EngineConfig, RunConfig, VerifierConfig

ROOT = Path(__file__).resolve().parents[1]


def _block(doc: Path, marker: str) -> str:
    """The fenced python block of `doc` that contains `marker`."""
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    return next(b for b in blocks if marker in b)


def _on_the_simulator(**kw) -> RunConfig:
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")), **kw)


def test_the_in_process_example_prints_the_answer(monkeypatch):
    for doc in (ROOT / "README.md", ROOT / "docs" / "usage.md"):
        code = _block(doc, "tts.solve(")
        monkeypatch.setattr(fasttts, "RunConfig", _on_the_simulator)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(doc), "exec"), {})
        answer, correct = printed.getvalue().split()
        assert correct in ("True", "False")
        assert not answer.startswith("{")  # an answer, not the dict of every vote


def test_the_quickstart_figures_are_printed_from_the_committed_run(capsys):
    """Every number the README's "What it printed" paragraph states comes out of
    `benchmarks/table.py` on the committed folder of that run."""
    import runpy

    readme = (ROOT / "README.md").read_text()
    paragraph = readme.split("What it printed", 1)[1].split("On 4 problems", 1)[0]
    folder = re.search(r"`(benchmarks/results/quickstart_\w+)/`", paragraph).group(1)
    figures = re.findall(r"\d+\.\d+ (?:for|s)", paragraph)  # accuracies and latencies
    assert len(figures) == 5
    runpy.run_path(str(ROOT / "benchmarks" / "table.py"), run_name="not_main")["main"](
        [str(ROOT / folder)])
    row = capsys.readouterr().out.splitlines()[-1]
    for figure in figures:
        assert figure.split()[0] in row, figure
    assert "generator bfloat16, 2 threads" in row and "bfloat16" in paragraph
