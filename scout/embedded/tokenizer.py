"""A Hugging Face tokenizer folder read with the ``tokenizers`` library and jinja2 directly.

Why not ``AutoTokenizer``: importing transformers' tokenizer classes takes about 2 s, more than the
whole start-up budget of a toy job. A fast tokenizer is ``tokenizer.json`` (the ``tokenizers``
library's own format) plus special tokens and a chat template in ``tokenizer_config.json`` or
``chat_template.jinja``; this reads those files and renders the template in the same sandboxed
jinja2 environment transformers uses. ``tests/train/test_qwen3.py`` checks ids and rendered prompts
against ``AutoTokenizer``.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def _token_text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class Tokenizer:
    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer as Backend

        self.path = Path(path)
        self.backend = Backend.from_file(str(self.path / "tokenizer.json"))
        config_file = self.path / "tokenizer_config.json"
        self.config = json.loads(config_file.read_text()) if config_file.exists() else {}
        template_file = self.path / "chat_template.jinja"
        self.chat_template = template_file.read_text() if template_file.exists() else self.config.get("chat_template")
        self.special = {
            name: _token_text(self.config.get(name)) for name in ("bos_token", "eos_token", "pad_token", "unk_token")
        }
        self._template = None

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def _id(self, name: str) -> int | None:
        text = self.special.get(name)
        return None if text is None else self.backend.token_to_id(text)

    @property
    def eos_token_id(self) -> int | None:
        return self._id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._id("pad_token")

    @property
    def bos_token_id(self) -> int | None:
        return self._id("bos_token")

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, messages: list[dict], tokenize: bool = False, add_generation_prompt: bool = True, **options
    ) -> str | list[int]:
        """The rendered prompt (text, or ids with ``tokenize``), as transformers renders it."""
        if self.chat_template is None:
            raise ValueError(f"{self.path}: the tokenizer has no chat template")
        if self._template is None:
            self._template = _environment().from_string(self.chat_template)
        text = self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.special, **options
        )
        return self.encode(text) if tokenize else text

    def save_pretrained(self, path: str | Path) -> None:
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            if (self.path / name).exists() and (self.path / name).resolve() != (out / name).resolve():
                shutil.copyfile(self.path / name, out / name)


def _environment():
    """jinja2 as transformers configures it for chat templates."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env
