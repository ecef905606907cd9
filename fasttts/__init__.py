"""fasttts: fast test-time scaling for LLM reasoning on vLLM.

`FastTTS(RunConfig(...)).solve(problem)` runs a verifier-guided search; see README.md.
"""

import fasttts.search  # noqa: F401  (adds the methods' rules to SearchConfig's checks)
from fasttts.api import FastTTS
from fasttts.config import EngineConfig, RunConfig, SearchConfig, VerifierConfig

__all__ = ["EngineConfig", "FastTTS", "RunConfig", "SearchConfig", "VerifierConfig"]
__version__ = "0.1.0"
