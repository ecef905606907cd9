"""Request and response shapes of the OpenAI-compatible API, with the limits every request
is checked against.

Requests follow OpenAI's `/v1/chat/completions` and `/v1/completions`; the test-time scaling
search is chosen by an extra `tts` object (the `openai` client sends it with
`extra_body={"tts": {...}}`). Unknown fields are refused (400, naming the field), so a typo
never silently falls back to a default, and types are strict (`"stream": "yes"` or
`"n": "2"` is a 400, not coerced). Semantic limits (n, max_tokens, prompt size, the served
model names) are checked by `to_search` against `ServerLimits` (400). Every error has
OpenAI's shape (`error_body`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from fasttts.config import MAX_N, SearchConfig, VerifierConfig
from fasttts.options import copied_fields, describe_error
from fasttts.search import GIVEN_ONLY

__all__ = ["BadRequest", "ChatCompletionRequest", "ChatMessage", "CompletionRequest",
           "MAX_NAME_CHARS", "ServerLimits", "TTSOptions", "error_body", "to_search"]

#: Most characters of a message's `name` and of a request's `user`.
MAX_NAME_CHARS = 256


def error_body(status: int, message: str, kind: str, param: str | None = None) -> dict:
    """OpenAI's error object: {"error": {"message", "type", "param", "code"}} (code = the
    HTTP status)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


class BadRequest(ValueError):
    """A well-formed request the server cannot serve (HTTP 400; the message says why and
    what is allowed). `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ServerLimits(_Strict):
    """What one request may ask for.

    Attributes:
        served_model_names: the model names clients may send, as vLLM's
            `--served-model-name` (`GET /v1/models` lists them); any other name is refused.
            Empty = the generator's name as configured (`fasttts.serve.build_state` fills it);
            each name has at least one character that is not a space.
        max_n: most paths one request may search (n; at most 4096, `fasttts.config.MAX_N`).
        max_tokens: most tokens one path may generate (tokens).
        max_prompt_chars: most characters of the problem and the system prompt together
            (characters).
        max_body_bytes: most bytes of a request body, refused (413) before it is read whole
            or parsed (bytes; at most 1 GiB: a body is held whole in memory while it is
            parsed).
    """

    served_model_names: tuple[str, ...] = Field(default=(), strict=False)  # a list is fine
    max_n: int = Field(default=64, gt=0, le=MAX_N)
    max_tokens: int = Field(default=4096, gt=0)
    max_prompt_chars: int = Field(default=8000, gt=0)
    max_body_bytes: int = Field(default=1 << 20, gt=0, le=1 << 30)

    @field_validator("served_model_names")
    @classmethod
    def _named(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        if any(not name.strip() for name in names):
            raise ValueError(f"a served model name is empty (got {list(names)!r}); clients "
                             f"send the name, so give each at least one character")
        return names


#: The `SearchConfig` fields a request sets outside `tts`: sampling from OpenAI's own fields
#: (temperature, top_p, max_tokens, seed), the system prompt from the messages; the step
#: delimiter is the server's.
_OUTSIDE_TTS = ("temperature", "top_p", "max_tokens", "seed", "system_prompt", "step_delimiter")
_TTS_FIELDS = [f for f in SearchConfig.model_fields if f not in _OUTSIDE_TTS]

#: The test-time scaling search of one request: the `fasttts.config.SearchConfig` fields
#: (types, ranges, defaults, docs) but those set outside `tts`, and the verifier's
#: `agg_strategy`; a method's own parameters and `lookahead` default to None (= the method's
#: default) and count only when given.
TTSOptions = create_model(
    "TTSOptions", __base__=_Strict, __module__=__name__,
    __doc__="The test-time scaling search of one request (fields as in "
            "`fasttts.config.SearchConfig`;\n`None` = the method's default).",
    **copied_fields(SearchConfig, [f for f in _TTS_FIELDS if f not in GIVEN_ONLY]),
    **copied_fields(VerifierConfig, ["agg_strategy"]),
    **copied_fields(SearchConfig, [f for f in _TTS_FIELDS if f in GIVEN_ONLY], GIVEN_ONLY))


class ChatMessage(_Strict):
    """One chat message (text content only)."""

    role: Literal["system", "user", "assistant"]
    content: str
    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS)


class _Common(_Strict):
    model: str
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: dict | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    tts: TTSOptions = Field(default_factory=TTSOptions)


class ChatCompletionRequest(_Common):
    """`POST /v1/chat/completions`: the last user message is the problem; an optional system
    message becomes the generator's system prompt."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class CompletionRequest(_Common):
    """`POST /v1/completions`: `prompt` is the problem."""

    prompt: str | list[str]


def _problem(req: ChatCompletionRequest | CompletionRequest) -> tuple[str, str | None]:
    if isinstance(req, CompletionRequest):
        if isinstance(req.prompt, list):
            if len(req.prompt) != 1:
                raise BadRequest(f"prompt: one problem per request, got a list of "
                                 f"{len(req.prompt)}; send a string", "prompt")
            return req.prompt[0], None
        return req.prompt, None
    system = [m.content for m in req.messages if m.role == "system"]
    users = [m.content for m in req.messages if m.role == "user"]
    if any(m.role == "assistant" for m in req.messages) or len(users) != 1 or len(system) > 1:
        raise BadRequest("messages: send exactly one user message (the problem) and at most "
                         "one system message; multi-turn conversations are not supported",
                         "messages")
    return users[0], system[0] if system else None


def to_search(req: ChatCompletionRequest | CompletionRequest,
              limits: ServerLimits) -> tuple[str, SearchConfig, str]:
    """The problem, the search configuration and the aggregation of a request.

    Raises:
        BadRequest: unknown model, n != 1, a stop list, an empty problem, a problem and
            system prompt over max_prompt_chars, tts.n
            or max_tokens over the limits, or a search configuration the method refuses
            (message from `fasttts.search.check_search`).
    """
    if req.model not in limits.served_model_names:
        names = ", ".join(map(repr, limits.served_model_names))
        raise BadRequest(f"model {req.model!r} is not served here; use one of {names} "
                         f"(GET /v1/models)", "model")
    if req.n != 1:
        raise BadRequest(f"n={req.n}: one answer per request; the search budget is tts.n "
                         f"(e.g. \"tts\": {{\"n\": {req.n}}})", "n")
    if req.stop:
        raise BadRequest("stop is not supported: steps end at the step delimiter and paths at "
                         "end-of-sequence or a boxed answer", "stop")
    problem, system = _problem(req)
    if not problem.strip():
        raise BadRequest("the problem is empty; send the problem text", "messages")
    chars = len(problem) + len(system or "")
    if chars > limits.max_prompt_chars:
        what = "the problem and the system prompt have" if system else "the problem has"
        raise BadRequest(f"{what} {chars} characters; at most {limits.max_prompt_chars} are "
                         f"allowed", "messages")
    tts = req.tts
    if tts.n > limits.max_n:
        raise BadRequest(f"tts.n={tts.n} is over this server's limit of {limits.max_n}",
                         "tts.n")
    max_tokens = getattr(req, "max_completion_tokens", None) or req.max_tokens
    if max_tokens is not None and max_tokens > limits.max_tokens:
        raise BadRequest(f"max_tokens={max_tokens} is over this server's limit of "
                         f"{limits.max_tokens}", "max_tokens")
    fields = {k: v for k, v in tts.model_dump(exclude={"agg_strategy"}).items() if v is not None}
    if req.temperature is not None:
        fields["temperature"] = req.temperature
    if req.top_p is not None:
        fields["top_p"] = req.top_p
    if req.seed is not None:
        fields["seed"] = req.seed
    fields["max_tokens"] = max_tokens or min(SearchConfig.model_fields["max_tokens"].default,
                                             limits.max_tokens)
    if system is not None:
        fields["system_prompt"] = system
    # only the fields the client set count as "set" (method-specific checks use that)
    explicit = {k for k in tts.model_fields_set if k != "agg_strategy"}
    try:
        search = SearchConfig(**{k: v for k, v in fields.items()
                                 if k in explicit or k not in TTSOptions.model_fields})
    except ValidationError as e:
        raise BadRequest(describe_error(e), "tts") from e
    return problem, search, tts.agg_strategy
