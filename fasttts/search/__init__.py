"""Search methods (the policy): one file per method over the shared loop of `fasttts.runtime`."""

from fasttts.config import SearchConfig
from fasttts.search.base import SearchConfigError, SearchStrategy
from fasttts.search.beam_search import BeamSearch
from fasttts.search.best_of_n import BestOfN

__all__ = ["METHODS", "SearchConfigError", "SearchStrategy", "make_strategy"]

#: Search methods by name.
METHODS: dict[str, type[SearchStrategy]] = {cls.name: cls for cls in (BeamSearch, BestOfN)}


def make_strategy(cfg: SearchConfig) -> SearchStrategy:
    """The strategy for `cfg.method`, validated against `cfg`.

    Raises:
        SearchConfigError: unknown method (lists the methods) or invalid parameters.
    """
    if cfg.method not in METHODS:
        raise SearchConfigError(
            f"unknown search method {cfg.method!r}; methods: {', '.join(sorted(METHODS))}"
        )
    return METHODS[cfg.method](cfg)
