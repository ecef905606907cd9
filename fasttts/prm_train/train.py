"""The `fasttts prm train` pipeline: rollouts -> step-end features -> fitted head -> saved head.

Each stage's output is kept in the output folder (`rollouts.jsonl`, `features.npz`), so a
stopped run resumes where it stopped, and a rerun with more problems samples only the new
ones. Source: issue 17; outcome supervision as in OVM (Yu et al. 2024).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from fasttts.config import EngineConfig
from fasttts.eval.datasets import DATASETS, load_dataset, numeric_answers
from fasttts.models import resolve_model
from fasttts.models.heads import save_head
from fasttts.prm_train.features import FeatureExtractor
from fasttts.prm_train.fit import Example, evaluate, fit_head, select_layer, split_problems
from fasttts.prm_train.rollouts import RolloutConfig, sample_rollouts
from fasttts.prm_train.store import JsonlStore

__all__ = ["TrainConfig", "train_head"]

TRAIN_DATA_HINT = "../shared/data/gsm8k-train/train.jsonl (7473 GSM8K training problems)"


@dataclass
class TrainConfig:
    """Settings of one `fasttts prm train` run.

    Attributes:
        generator: the generator whose hidden states the head reads (embedded name or folder).
        data: training problems (a JSONL path or packaged name); never an evaluation set.
        limit: how many problems (from `offset`).
        offset: problems skipped from the start of `data`.
        rollouts: sampling settings.
        layers: candidate layers (1..num_hidden_layers), the best is chosen on held-out problems.
        val_fraction: share of problems held out for the layer choice.
        out_dir: the run's folder (rollouts, features, report, the head).
        name: the head's name (the verifier name it is served as).
        num_threads: CPU threads of the engine.
        kv_cache_memory_bytes: the generator engine's KV cache (bytes).
    """

    generator: str
    data: str
    limit: int = 200
    offset: int = 0
    rollouts: RolloutConfig = field(default_factory=RolloutConfig)
    layers: tuple[int, ...] = (8, 12, 16, 20, 24)
    val_fraction: float = 0.25
    out_dir: str = "runs/prm-train"
    name: str = ""
    num_threads: int = 2
    kv_cache_memory_bytes: int = 2 << 30


def _examples(cfg: TrainConfig, records: list[dict], progress) -> list[Example]:
    """Features of every sampled completion, cached in features.npz (keyed by problem id)."""
    path = Path(cfg.out_dir) / "features.npz"
    cached = dict(np.load(path, allow_pickle=False)) if path.exists() else {}
    want = {f"{r['id']}/{j}" for r in records for j in range(len(r["samples"]))}
    if not want <= set(cached) or cached.get("layers", np.array([])).tolist() != list(cfg.layers):
        ext = FeatureExtractor(resolve_model(cfg.generator), list(cfg.layers))
        cached = {"layers": np.array(cfg.layers)} | {k: v for k, v in cached.items() if k in want}
        for r in progress(records, desc="features", unit="problem"):
            if f"{r['id']}/0" in cached:
                continue
            feats = ext.features(r["problem"], [s["text"] for s in r["samples"]])
            cached.update({f"{r['id']}/{j}": f.astype(np.float16) for j, f in enumerate(feats)})
        tmp = path.with_name("features.tmp.npz")
        np.savez(tmp, **cached)
        tmp.replace(path)
    return [Example(r["id"], cached[f"{r['id']}/{j}"].astype(np.float32), bool(s["correct"]))
            for r in records for j, s in enumerate(r["samples"])]


def train_head(cfg: TrainConfig, progress=None, command: str = "") -> dict:
    """Run every stage; returns the report (also written to `<out_dir>/report.json`).

    Args:
        cfg: the run's settings.
        progress: a tqdm-like wrapper `progress(iterable, desc=..., unit=...)`; None = tqdm.
        command: the command line that ran it, kept in the head's provenance.

    Raises:
        fasttts.eval.datasets.DatasetError: bad `data`.
        ValueError: too few labelled completions of both outcomes to fit a head.
    """
    from tqdm import tqdm

    progress = progress or (lambda it, **kw: tqdm(it, file=sys.stderr, **kw))
    if cfg.data in DATASETS:
        raise ValueError(f"--data {cfg.data!r} is an evaluation set ({', '.join(DATASETS)} are "
                         f"test sets); train on a training split, e.g. {TRAIN_DATA_HINT}")
    problems = load_dataset(cfg.data, limit=cfg.limit, offset=cfg.offset)
    out = Path(cfg.out_dir)
    store = JsonlStore(out / "rollouts.jsonl", {"generator": cfg.generator, **asdict(cfg.rollouts)})
    bar = tqdm(total=len(problems), desc="rollouts", unit="problem", file=sys.stderr,
               initial=sum(p.id in store.records for p in problems))
    engine = EngineConfig(model=cfg.generator, num_threads=cfg.num_threads,
                          kv_cache_memory_bytes=cfg.kv_cache_memory_bytes,
                          max_model_len=4096, seed=cfg.rollouts.seed)
    sample_rollouts(store, problems, engine, cfg.rollouts, numeric_answers(problems), bar.update)
    bar.close()
    records = [store.records[p.id] for p in problems]
    examples = _examples(cfg, records, progress)
    labels = [e.correct for e in examples]
    if sum(labels) < 2 or len(labels) - sum(labels) < 2:
        raise ValueError(f"{sum(labels)} correct and {len(labels) - sum(labels)} incorrect "
                         f"completions: a head needs both; sample more problems")
    val_ids = split_problems([e.problem_id for e in examples], cfg.val_fraction, cfg.rollouts.seed)
    train = [e for e in examples if e.problem_id not in val_ids]
    val = [e for e in examples if e.problem_id in val_ids]
    best, rows = select_layer(train, val, len(cfg.layers))
    weight = fit_head(examples, best.layer, best.l2)  # refit on every problem
    report = {"layer": cfg.layers[best.layer], "l2": best.l2, "held_out": best.metrics,
              "refit_on_all": evaluate(examples, best.layer, weight),
              "candidates": [{**r, "layer": cfg.layers[r["layer"]]} for r in rows],
              "problems": len(problems), "held_out_problems": len(val_ids),
              "completions": len(examples), "correct_fraction": float(np.mean(labels))}
    meta = {"base": cfg.generator, "layer": cfg.layers[best.layer], "system_prompt": None,
            "format": "ovm", "command": command, "train": {"data": cfg.data, "offset": cfg.offset,
                                       "limit": cfg.limit, **asdict(cfg.rollouts)},
            "metrics": {k: report[k] for k in ("held_out", "problems", "completions",
                                               "correct_fraction", "l2")}}
    head = save_head(out / "head" / (cfg.name or f"{Path(cfg.generator).name}-ovm"), weight, meta)
    report["head"] = str(head)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
