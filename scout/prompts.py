"""How prepared prompts are named and compared, apart from the planner: the key of a data view
(the metadata of a prepared split counts its rows per view) and a prompt's comparable text (the
overlap check between validation and test prompts)."""

from __future__ import annotations

import json


def view_key(view: dict) -> str:
    """How the prepared data's metadata names one view (tokenizer | prompt limit | chat options)."""
    return f"{view['tokenizer']}|{view['max_prompt_length']}|{json.dumps(view['chat'], sort_keys=True)}"


def normalized(prompt) -> str:
    """A prompt as compared across datasets: its text (a chat's messages joined), whitespace collapsed."""
    if isinstance(prompt, list):
        prompt = "\n".join(str(m.get("content", "")) for m in prompt)
    return " ".join(str(prompt).split()).lower()
