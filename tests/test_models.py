"""Model resolution and the embedded-model preparation checks."""

import dataclasses

import pytest

from fasttts.models import EMBEDDED_MODELS, ModelError, prepare_model, resolve_model
from fasttts.models import embedded


def test_resolve_forms(tmp_path):
    assert resolve_model("Qwen/Qwen2.5-Math-1.5B-Instruct") == "Qwen/Qwen2.5-Math-1.5B-Instruct"
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    with pytest.raises(ModelError, match="not an embedded model"):
        resolve_model("nope")
    with pytest.raises(ModelError, match="empty"):
        resolve_model(" ")
    with pytest.raises(ModelError, match="unknown embedded model"):
        prepare_model("nope")


def test_wrong_sha256_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTTTS_CACHE", str(tmp_path))
    good = EMBEDDED_MODELS["qwen2.5-coder-0.5b-instruct"]
    bad = dataclasses.replace(good, sha256="0" * 64)
    monkeypatch.setitem(EMBEDDED_MODELS, good.name, bad)
    with pytest.raises(ModelError, match="expected 491400064 bytes and sha256 0000"):
        prepare_model(good.name)
    assert list((tmp_path / "models").iterdir()) == []


def test_missing_package_names_the_pip_extra(monkeypatch):
    m = dataclasses.replace(EMBEDDED_MODELS["qwen2.5-coder-0.5b-instruct"],
                            packages=("no_such_pkg_part1",))
    with pytest.raises(ModelError, match=r"pip install 'fasttts\[models\]'"):
        m.part_paths()


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTTTS_CACHE", str(tmp_path))
    assert embedded.prepared_path("x") == tmp_path / "models" / "x"
