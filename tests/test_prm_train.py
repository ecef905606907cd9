"""The PRM bootstrap's pieces on hand-made inputs (fasttts.prm_train, fasttts.models.heads)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from fasttts.models import DERIVED_MODELS
from fasttts.models.heads import build_head_checkpoint, register_heads, save_head
from fasttts.prm_train.fit import Example, evaluate, fit_head, select_layer, split_problems
from fasttts.prm_train.rollouts import sample_seed
from fasttts.prm_train.store import JsonlStore, StoreConfigError
from fasttts.prm_train.train import TrainConfig, train_head


def test_store_resumes_and_sets_damage_aside(tmp_path):
    path = tmp_path / "r.jsonl"
    store = JsonlStore(path, {"samples": 2})
    store.append({"id": "a", "x": 1})
    store.append({"id": "b", "x": 2})
    with open(path, "ab") as f:
        f.write(b'not json\n{"id": "c", "x"')  # a damaged line, then a cut-short one
    with pytest.warns(UserWarning, match="line 3: not a record"):
        again = JsonlStore(path, {"samples": 2})
    assert sorted(again.records) == ["a", "b"]
    assert path.read_bytes().count(b"\n") == 2
    assert (tmp_path / "r.jsonl.bad").read_bytes() == b"not json\n"
    with pytest.raises(StoreConfigError, match="samples differ"):
        JsonlStore(path, {"samples": 4})


@pytest.mark.parametrize("bad, why", [
    (b"[" * 100_000 + b"\n", "nested too deeply"),
    (b'{"id": "c", "x": ' + b"9" * 5000 + b"}\n", "more than 4300 digits"),
    (b'{"id": "c\xff"}\n', "not UTF-8 text"),
])
def test_store_sets_aside_lines_python_cannot_read(tmp_path, bad, why):
    path = tmp_path / "r.jsonl"
    JsonlStore(path, {"samples": 2}).append({"id": "a", "x": 1})
    with open(path, "ab") as f:
        f.write(bad)
    with pytest.warns(UserWarning, match=f"line 2: not a record .*{why}"):
        again = JsonlStore(path, {"samples": 2})
    assert sorted(again.records) == ["a"] and (tmp_path / "r.jsonl.bad").read_bytes() == bad


@pytest.mark.parametrize("text, message", [("{garbled", "r.config.json: invalid JSON"),
                                           ("[1]", "r.config.json is a JSON list")])
def test_a_damaged_store_config_is_named_in_one_line(tmp_path, text, message):
    (tmp_path / "r.config.json").write_text(text)
    with pytest.raises(StoreConfigError, match=message):
        JsonlStore(tmp_path / "r.jsonl", {"samples": 2})


def test_sample_seed_is_stable_and_distinct():
    assert sample_seed(0, "gsm8k-train-0", 0) == sample_seed(0, "gsm8k-train-0", 0)
    seeds = {sample_seed(0, f"p{i}", j) for i in range(20) for j in range(8)}
    assert len(seeds) == 160 and all(0 <= s < 2 ** 31 for s in seeds)


def test_split_is_seeded_and_by_problem():
    ids = [f"p{i}" for i in range(20) for _ in range(3)]
    val = split_problems(ids, 0.25, seed=1)
    assert len(val) == 5 and val == split_problems(ids, 0.25, seed=1)
    assert val != split_problems(ids, 0.25, seed=2)


def _examples(rng, problems: int, informative_layer: int) -> list[Example]:
    """Two candidate layers; only `informative_layer` carries the label (dim 0 = +/-1), and a
    large constant dim 1 (like a final-norm hidden state's) lets a bias-free head shift."""
    out = []
    for p in range(problems):
        for j in range(4):
            correct = j % 2 == 0
            feats = rng.normal(size=(3, 2, 8)).astype(np.float32)
            feats[:, :, 1] = 5.0
            feats[:, informative_layer, 0] += 2.0 if correct else -2.0
            out.append(Example(f"p{p}", feats, correct))
    return out


def test_layer_choice_finds_the_informative_layer():
    rng = np.random.default_rng(0)
    train, val = _examples(rng, 30, 1), _examples(rng, 10, 1)
    best, rows = select_layer(train, val, num_layers=2, l2_grid=(1e-3,))
    assert best.layer == 1 and len(rows) == 2
    assert best.metrics["pairwise_accuracy"] > 0.95 and best.metrics["pairs"] == 40
    assert rows[0]["pairwise_accuracy"] < 0.8  # the uninformative layer ranks near chance
    assert best.weight[0] > 0  # higher dim 0 = more likely correct


def test_evaluate_by_hand():
    # one problem, two completions of one step each; weight reads dim 0
    e = [Example("p", np.array([[[1.0, 0.0]]], np.float32), True),
         Example("p", np.array([[[-1.0, 0.0]]], np.float32), False)]
    m = evaluate(e, 0, np.array([1.0, 0.0], np.float32))
    assert m == {"pairwise_accuracy": 1.0, "pairs": 1, "step_auroc": 1.0, "final_auroc": 1.0}
    w = fit_head(e, 0, l2=1e-2)
    assert w.shape == (2,) and w[0] > 0


def test_head_folder_and_checkpoint(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 3, "hidden_size": 4,
        "layer_types": ["full_attention"] * 3}))
    (base / "tokenizer.json").write_text("{}")
    save_file({f"model.layers.{i}.w": torch.full((2,), float(i)) for i in range(3)}
              | {"model.embed_tokens.weight": torch.zeros(5, 4), "model.norm.weight": torch.ones(4),
                 "lm_head.weight": torch.zeros(5, 4)}, str(base / "model.safetensors"))
    heads = tmp_path / "heads"
    with pytest.raises(ValueError, match="missing \\['layer'\\]"):
        save_head(heads / "bad", np.zeros(4), {"base": str(base)})
    save_head(heads / "tiny-ovm", np.arange(4, dtype=np.float32), {"base": str(base), "layer": 2})
    out = build_head_checkpoint(heads / "tiny-ovm", tmp_path / "ckpt")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForSequenceClassification"]
    assert cfg["num_labels"] == 1 and cfg["num_hidden_layers"] == 2
    assert cfg["layer_types"] == ["full_attention"] * 2
    assert cfg["fasttts_ovm"]["layer"] == 2 and (out / "tokenizer.json").is_file()
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == ["model.embed_tokens.weight", "model.layers.0.w",
                                    "model.layers.1.w", "model.norm.weight", "score.weight"]
        assert f.get_tensor("score.weight").tolist() == [[0.0, 1.0, 2.0, 3.0]]
    assert register_heads(heads) == ["tiny-ovm"]
    assert DERIVED_MODELS.pop("tiny-ovm").base == str(base)


def test_training_refuses_an_evaluation_set():
    with pytest.raises(ValueError, match="'gsm8k' is an evaluation set"):
        train_head(TrainConfig(generator="x", data="gsm8k"))


def test_planner_spec_of_a_trained_head():
    from fasttts.engines.real import derived_model_spec
    from fasttts.models.embedded import DerivedModel
    from fasttts.perf.specs import find_model_spec

    base = find_model_spec("qwen2.5-coder-0.5b-instruct")
    DERIVED_MODELS["t-ovm"] = DerivedModel("t-ovm", "", base.name, None, num_layers=6, lm_head=False)
    try:
        spec = derived_model_spec("t-ovm")
        assert (spec.name, spec.num_layers, spec.lm_head) == ("t-ovm", 6, False)
        assert spec.kv_bytes_per_token == base.kv_bytes_per_token * 6 // 24
    finally:
        del DERIVED_MODELS["t-ovm"]
    assert derived_model_spec("not-a-model") is None
