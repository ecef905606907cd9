"""Local checkpoints with a hub PRM's layout, derived from an embedded model.

Real PRM weights cannot be downloaded on the machines fasttts is developed on, so the PRM
formats are exercised on folders that have the real PRM's layout (architecture name, head
tensors, step-tag token) around the embedded model's weights. They run the real loading and
scoring code; they score no better than their untrained heads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fasttts.models.embedded import prepare_model

__all__ = ["derive_checkpoint", "math_shepherd_checkpoint"]


def derive_checkpoint(dest: Path, base: str, config_update: dict, extra_tensors: dict | None = None,
                      rename_tokens: dict[str, str] | None = None) -> dict:
    """Write a folder with embedded model `base`'s weights (linked), its config updated with
    `config_update`, one more safetensors file holding `extra_tensors` (name -> torch tensor),
    and added tokens renamed as `rename_tokens` says (old text -> new text, same id).

    Returns:
        The written config.

    Raises:
        FileExistsError: `dest` exists.
        KeyError: a token of `rename_tokens` is not in the vocabulary.
    """
    src = prepare_model(base)
    dest = Path(dest)
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.name == "model.safetensors":
            (dest / f.name).symlink_to(f)
        elif f.name != "config.json":
            shutil.copy(f, dest / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(config_update)
    (dest / "config.json").write_text(json.dumps(cfg))
    if extra_tensors:
        from safetensors.torch import save_file

        save_file(extra_tensors, str(dest / "head.safetensors"))
    if rename_tokens:
        tok = json.loads((dest / "tokenizer.json").read_text())
        for entry in tok["added_tokens"]:
            entry["content"] = rename_tokens.get(entry["content"], entry["content"])
        vocab = tok["model"]["vocab"]
        for old, new in rename_tokens.items():
            if old in vocab:
                vocab[new] = vocab.pop(old)
        (dest / "tokenizer.json").write_text(json.dumps(tok))
    return cfg


def math_shepherd_checkpoint(dest: Path, base: str) -> Path:
    """A Math-Shepherd-format PRM folder from embedded model `base`: its own LM head (read at
    the "+" / "-" rows) and " ки" as one token (the unused `<|vision_pad|>` id renamed), as in
    peiyi9979/math-shepherd-mistral-7b-prm's vocabulary.

    Raises:
        FileExistsError: `dest` exists.
    """
    derive_checkpoint(dest, base, {}, rename_tokens={"<|vision_pad|>": " ки"})
    return Path(dest)
