"""Trained PRM heads shipped in the package, and the servable checkpoints built from them.

A head is a folder under `fasttts/models/heads/<name>/` holding `head.safetensors` (the
`score.weight` tensor, float32 [1, hidden]) and `head.json` (the base embedded model, the
number of backbone layers the head reads, the system prompt of its format, and its provenance:
data, command, seed, held-out metrics). A head is a few KB; the backbone comes from the
embedded model. `prepare_model(<name>)` (and so `resolve_model`, `fasttts models prepare`)
builds a Hugging Face `*ForSequenceClassification` folder: the base's config with one label
and `num_hidden_layers` = the head's layer, the base's tensors of those layers, and the head
as `score.weight`. vLLM serves it on its pooling runner (`fasttts.verifiers.ovm`).
"""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

from fasttts.models.embedded import DERIVED_MODELS, DerivedModel, resolve_model

__all__ = ["HEADS_DIR", "build_head_checkpoint", "register_heads", "save_head"]

#: The package folder of shipped heads (one subfolder per head, named as the verifier).
HEADS_DIR = Path(__file__).with_name("heads")
_CONFIG_KEY = "fasttts_ovm"  # the key `fasttts.verifiers.ovm` reads


def save_head(dest: Path, weight, meta: dict) -> Path:
    """Write a head folder: `head.safetensors` (score.weight [1, hidden] float32) and
    `head.json` (`meta`, which must hold "base" and "layer").

    Raises:
        ValueError: `meta` lacks "base" or "layer", or `weight` is not one vector.
    """
    import torch
    from safetensors.torch import save_file

    missing = [k for k in ("base", "layer") if k not in meta]
    w = torch.as_tensor(weight, dtype=torch.float32)
    if missing or w.dim() != 1:
        raise ValueError(f"a head needs meta keys base, layer (missing {missing}) and one "
                         f"weight vector (got shape {tuple(w.shape)})")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    save_file({"score.weight": w[None, :].contiguous()}, str(dest / "head.safetensors"))
    (dest / "head.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return dest


def build_head_checkpoint(head_dir: Path, out: Path) -> Path:
    """Write the servable sequence-classification folder of a head into `out` (module doc).

    Raises:
        ValueError: the head's layer is outside 1..the base's num_hidden_layers.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    meta = json.loads((Path(head_dir) / "head.json").read_text(encoding="utf-8"))
    base = Path(resolve_model(meta["base"]))
    cfg = json.loads((base / "config.json").read_text(encoding="utf-8"))
    layer = int(meta["layer"])
    if not 1 <= layer <= cfg["num_hidden_layers"]:
        raise ValueError(f"head layer {layer} outside 1..{cfg['num_hidden_layers']}")
    arch = [a.replace("ForCausalLM", "ForSequenceClassification") for a in cfg["architectures"]]
    cfg.update(architectures=arch, num_labels=1, id2label={"0": "correct"},
               label2id={"correct": 0}, num_hidden_layers=layer, tie_word_embeddings=False,
               **{_CONFIG_KEY: {k: meta.get(k) for k in ("system_prompt", "layer", "base")}})
    if isinstance(cfg.get("layer_types"), list):  # one entry per layer (transformers >= 4.53)
        cfg["layer_types"] = cfg["layer_types"][:layer]
    out = Path(out)
    out.mkdir(parents=True)
    for f in base.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, out / f.name)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    tensors = {}
    with safe_open(str(base / "model.safetensors"), "pt") as src:
        for key in src.keys():
            if key.startswith("model.layers."):
                if int(key.split(".")[2]) >= layer:
                    continue
            elif key not in ("model.embed_tokens.weight", "model.norm.weight"):
                continue
            tensors[key] = src.get_tensor(key)
    with safe_open(str(Path(head_dir) / "head.safetensors"), "pt") as head:
        tensors["score.weight"] = head.get_tensor("score.weight")
    save_file(tensors, str(out / "model.safetensors"))
    return out


def register_heads(folder: Path = HEADS_DIR) -> list[str]:
    """Register every head folder under `folder` as a derived model; returns their names."""
    names = []
    for head_dir in sorted(p for p in Path(folder).glob("*/head.json")):
        meta = json.loads(head_dir.read_text(encoding="utf-8"))
        name = head_dir.parent.name
        DERIVED_MODELS[name] = DerivedModel(
            name=name, base=meta["base"],
            description=f"trained OVM head on {meta['base']} (layer {meta['layer']}; "
                        f"fasttts prm train)",
            build=partial(build_head_checkpoint, head_dir.parent),
            num_layers=int(meta["layer"]), lm_head=False)
        names.append(name)
    return names
