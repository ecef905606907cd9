"""The simulator's tokenizer: reversible, stateless, about as many tokens as a real BPE.

Text is split into UTF-8 chunks of at most 4 bytes (a real BPE tokenizer averages ~4 characters
per token on English); each chunk is one token whose id encodes its bytes, so `decode` needs no
vocabulary and any text round-trips. Ids below `FIRST_CHUNK_ID` are special tokens: EOS and the
chat-template markers.
"""

from __future__ import annotations

import sys
from array import array

__all__ = ["ASSISTANT", "EOS", "FIRST_CHUNK_ID", "SYSTEM", "USER", "chunk_id", "decode",
           "encode", "encode_chat", "split_prompt"]

EOS, SYSTEM, USER, ASSISTANT = 0, 1, 2, 3
FIRST_CHUNK_ID = 1024
_SPECIAL_TEXT = {EOS: "", SYSTEM: "<|system|>\n", USER: "\n<|user|>\n", ASSISTANT: "\n<|assistant|>\n"}
_MAX_CHUNK = 4


def chunk_id(chunk: bytes) -> int:
    """The token id of a 1-4 byte chunk."""
    return FIRST_CHUNK_ID + ((int.from_bytes(chunk, "big") << 3) | len(chunk))


def _chunk_bytes(token_id: int) -> bytes:
    v = token_id - FIRST_CHUNK_ID
    return (v >> 3).to_bytes(v & 7, "big")


#: An array type of 4-byte unsigned ints: the whole chunks of a text are read in one pass.
_WORD = next(code for code in "IL" if array(code).itemsize == _MAX_CHUNK)


def encode(text: str) -> list[int]:
    """Token ids of `text` (no special tokens): one per 4-byte UTF-8 chunk (`chunk_id`, the
    whole chunks read as big-endian words in one pass)."""
    data = text.encode()
    whole = len(data) - len(data) % _MAX_CHUNK
    words = array(_WORD, data[:whole])
    if sys.byteorder == "little":
        words.byteswap()
    ids = [FIRST_CHUNK_ID + ((w << 3) | _MAX_CHUNK) for w in words]
    if whole < len(data):
        ids.append(chunk_id(data[whole:]))
    return ids


def decode(token_ids: list[int]) -> str:
    """Text of `token_ids`; special tokens render as their template text (EOS as nothing).
    Bytes of a character split across tokens are joined before decoding."""
    out, buf = [], bytearray()
    for t in token_ids:
        if t < FIRST_CHUNK_ID:
            out.append(buf.decode(errors="replace"))
            buf.clear()
            out.append(_SPECIAL_TEXT.get(t, ""))
        else:
            buf += _chunk_bytes(t)
    out.append(buf.decode(errors="replace"))
    return "".join(out)


def encode_chat(messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a system/user conversation followed by the assistant marker.

    Raises:
        ValueError: a role other than system/user.
    """
    ids: list[int] = []
    for m in messages:
        role = m.get("role")
        if role not in ("system", "user"):
            raise ValueError(f"the simulator's chat template takes system and user messages, got {role!r}")
        ids.append(SYSTEM if role == "system" else USER)
        ids += encode(m.get("content", ""))
    ids.append(ASSISTANT)
    return ids


def split_prompt(token_ids: list[int]) -> tuple[str, int]:
    """(problem text, index just past the last assistant marker) of a prompt + path.

    The problem is the text of the last user message; generated tokens follow the marker.

    Raises:
        ValueError: no assistant marker (not a prompt from `encode_chat`).
    """
    try:
        end = len(token_ids) - 1 - token_ids[::-1].index(ASSISTANT)
    except ValueError:
        raise ValueError("prompt has no assistant marker; build it with encode_chat") from None
    start = max((i for i in range(end) if token_ids[i] == USER), default=-1) + 1
    return decode(token_ids[start:end]), end + 1
