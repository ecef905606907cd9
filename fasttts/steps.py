"""Step splitting and the generator's prompt, shared by generator, verifier and search.

One function splits text into steps everywhere, so the PRM scores exactly the steps the
generator produced (a known fault of public implementations is the two splitting differently).
"""

from __future__ import annotations

from fasttts.jsonio import check_text

__all__ = ["DEFAULT_SYSTEM_PROMPT", "build_messages", "has_final_answer", "split_steps"]

#: The system prompt of Hugging Face search-and-learn's beam search recipes (step format with a
#: boxed final answer), used for instruct generators.
DEFAULT_SYSTEM_PROMPT = (
    "Solve the following math problem efficiently and clearly:\n\n"
    "- For simple problems (2 steps or fewer):\n"
    "Provide a concise solution with minimal explanation.\n\n"
    "- For complex problems (3 steps or more):\n"
    "Use this step-by-step format:\n\n"
    "## Step 1: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "## Step 2: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "...\n\n"
    "Regardless of the approach, always conclude with:\n\n"
    "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n"
    "Where [answer] is just the final number or expression that solves the problem."
)


def build_messages(problem: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one problem: the system prompt, then the problem as the user turn.

    Raises:
        ValueError: the problem is empty or only whitespace, or either text is not valid
            Unicode (a lone surrogate: undecodable bytes of a command-line argument).
    """
    if not problem or not problem.strip():
        raise ValueError("problem is empty: give the text of a math problem")
    check_text(problem, "the problem")
    if system_prompt is not None:
        check_text(system_prompt, "the system prompt")
    return [
        {"role": "system", "content": system_prompt or DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": problem},
    ]


def split_steps(text: str, delimiter: str = "\n\n") -> list[str]:
    """Split generated text into steps; each step keeps its trailing delimiter.

    Joining the result gives `text` back exactly. Runs of delimiters stay attached to the step
    before them; an empty text has no steps.

    Example: "a\\n\\nb\\n\\nc" -> ["a\\n\\n", "b\\n\\n", "c"].
    """
    if not delimiter:
        raise ValueError("step delimiter must be non-empty")
    steps: list[str] = []
    pos = 0
    while pos < len(text):
        idx = text.find(delimiter, pos)
        if idx < 0:
            steps.append(text[pos:])
            break
        end = idx + len(delimiter)
        while text.startswith(delimiter, end):
            end += len(delimiter)
        if steps and not text[pos:idx].strip():
            steps[-1] += text[pos:end]  # a whitespace-only piece is not a step of its own
        else:
            steps.append(text[pos:end])
        pos = end
    return steps


def has_final_answer(text: str) -> bool:
    """True when `text` contains a completed `\\boxed{...}` (balanced braces)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return False
    depth = 0
    for ch in text[start + len("\\boxed") :]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return True
    return False
