"""A word-level Hugging Face tokenizer for the toy world, saved as ordinary HF files.

Words carry their leading space (" Wait" and "Wait" are different tokens, as in BPE vocabularies),
digits are single tokens and a blank line is one token, so Relay-OPD's reflection trigger and its
paragraph rule work on toy text exactly as on real tokenizers.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from scout.algorithms import reflection_variants
from scout.toy.tasks import sample_corpus_texts

SPECIAL = ["<pad>", "<eos>", "<unk>", "<bos>"]
PATTERN = r"\n\n|\n|    |```python|```| ?[A-Za-z]+|\\[a-z]+|\d|."
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


def _pieces(text: str, pre: pre_tokenizers.PreTokenizer) -> list[str]:
    return [p for p, _ in pre.pre_tokenize_str(text)]


def build_tokenizer(out_dir: str | Path) -> PreTrainedTokenizerFast:
    pre = pre_tokenizers.Split(Regex(PATTERN), behavior="isolated")
    words: set[str] = set(reflection_variants())
    words.update(chr(c) for c in range(32, 127))
    for text in sample_corpus_texts():
        words.update(_pieces(text + "\n", pre))
    vocab = {tok: i for i, tok in enumerate(SPECIAL + sorted(words - set(SPECIAL)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        bos_token="<bos>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast
