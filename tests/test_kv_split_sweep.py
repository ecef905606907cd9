"""`benchmarks/kv_split_sweep.py --store-curve`: the replay of a transformers verifier's store
of whole prefixes (the data `memory_planner.VERIFIER_STORE_HIT` is fitted on)."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import kv_split_sweep  # noqa: E402

SMALL = ["--generator", "qwen2.5-math-1.5b", "--n", "16", "--max-tokens", "512",
         "--b-dec", "16", "--b-pre", "16"]


def _rows(text: str) -> dict[float, list[str]]:
    return {float(cells[0]): cells for cells in
            (line.strip("| ").split(" | ") for line in text.splitlines()
             if re.match(r"\| \d", line)) if len(cells) == 5}


def test_the_replay_at_the_searched_size_is_the_search(capsys):
    """Replayed through the simulator's own store at the size the search ran with, the
    recorded calls cost the search's verifier seconds and tokens exactly; a store of 0.01 GiB (~370
    tokens) computes more than one that keeps every parent, which computes only each path's
    newest step (the floor, recompute share 0)."""
    kv_split_sweep.main(SMALL + ["--verifier", "skywork-prm-1.5b", "--verifier-gib", "0.25",
                                 "--store-curve", "0.01,0.25,4"])
    out = capsys.readouterr().out
    head = re.search(r"verifier ([\d.]+) s, (\d+) tokens computed.*every parent kept: (\d+)",
                     out)
    rows = _rows(out.split("| store GiB | x (planner")[0])
    assert rows[0.25][2] == head.group(2) and rows[0.25][4] == head.group(1)
    assert int(rows[4.0][2]) == int(head.group(3)) < int(rows[0.01][2])
    assert float(rows[4.0][3]) == 0.0


def test_a_paged_verifier_has_no_store_to_replay():
    with pytest.raises(SystemExit, match="paged vLLM engine, not in transformers"):
        kv_split_sweep.main(SMALL + ["--verifier", "math-shepherd-7b", "--verifier-gib", "1", "--store-curve", "1"])
