"""fasttts: fast test-time scaling for LLM reasoning on vLLM."""
