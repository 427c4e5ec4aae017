"""The tokenizer and template check of a teacher-student pair (scout.pairing), on local tokenizers
built like the paper's models': the Qwen2 base vocabulary's 151,643 ids (a word-level stand-in),
each family's added tokens at their released ids, and the released chat templates
(tests/data/tokenizers/README.md says where each was read)."""

from __future__ import annotations

import json
import re
from functools import cache

import pytest
import yaml
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from scout import grid
from scout.pairing import check_pair, first_difference, first_unmapped
from tests.support.toy import REPO

DATA = REPO / "tests" / "data" / "tokenizers"
BASE = 151643  # the Qwen2 base vocabulary both families share; the added tokens follow it
WORDS = ["\n", " ", "user", "assistant", "system", "Find", " the", " sum", " of", " 2", " and", " 3", ".", "<unk>"]
# the paper's models: (added tokens, chat template); a prepared teacher reads its base model's tokenizer
FAMILY = {"Qwen3-1.7B": ("qwen3", "qwen3"), "Qwen3-8B-DAPO": ("qwen3", "qwen3"),
          "Qwen3-4B-Instruct-2507": ("qwen3", "qwen3-instruct-2507"),
          "DeepSeek-R1-Distill-Qwen-1.5B": ("deepseek-r1-distill-qwen", "deepseek-r1-distill-qwen"),
          "Skywork-OR1-Math-7B": ("deepseek-r1-distill-qwen", "deepseek-r1-distill-qwen")}  # fmt: skip
CONVERSATIONS = [[{"role": "user", "content": "Find the sum of 2 and 3."}]]
PAPER = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())


def tokenizer(added: dict[int, str], template: str, roles: dict, base_shift: int = 0, fuse: bool = True):
    """A word-level tokenizer over ``BASE`` base ids (``WORDS`` first, from ``base_shift``), the added
    tokens at their ids, special-token roles from ``roles``, and ``template``."""
    base = [*WORDS, *(f"<b{i}>" for i in range(BASE - len(WORDS)))]
    vocab = {w: (i + base_shift) % BASE for i, w in enumerate(base)} | {t: i for i, t in added.items()}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    specials = "|".join(map(re.escape, added.values()))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(f"{specials}|\\n| ?[A-Za-z0-9]+|."), behavior="isolated")
    tok.decoder = decoders.Fuse() if fuse else decoders.WordPiece()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                   **{k: v for k, v in roles.items() if v is not None})  # fmt: skip
    fast.add_special_tokens({"additional_special_tokens": list(added.values())})
    fast.chat_template = template
    return fast


@cache
def model_tokenizer(model: str, base_shift: int = 0, fuse: bool = True):
    tokens, template = FAMILY[model]
    spec = json.loads((DATA / f"{tokens}.json").read_text())
    added = {int(i): t for i, t in spec.pop("added_tokens").items()}
    return tokenizer(added, (DATA / f"{template}.jinja").read_text(), spec, base_shift, fuse)


def test_first_unmapped_and_first_difference_by_hand():
    assert first_unmapped({"a": 0, "b": 1}, {"a": 0, "b": 1, "c": 2}) is None
    assert first_unmapped({"a": 0, "b": 1, "c": 2}, {"a": 0, "c": 1}) == (1, "b", "c")
    assert first_unmapped({"a": 0, "z": 5}, {"a": 0}) == (5, "z", None)
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def _paper_pair(paper, setting: str):
    s = paper["settings"][setting]
    return check_pair(f"{setting}: {s['teacher']} scores {s['student']}", model_tokenizer(s["student"]),
                      model_tokenizer(s["teacher"]), CONVERSATIONS, grid.chat_options(paper, s["student"]),
                      grid.chat_options(paper, s["teacher"]))  # fmt: skip


def test_the_papers_four_pairs_pass_and_the_check_names_each_template_difference():
    """Every pair maps its ids. Qwen3-1.7B renders with thinking off (an empty think block ends its
    generation prompt); neither Qwen3-4B-Instruct-2507's template nor Qwen3-8B's without that
    option has it, so those teachers score a context they never render themselves. Skywork and
    the R1 distill share a template."""
    found = {s: _paper_pair(PAPER, s) for s in PAPER["settings"]}
    assert {s: p.verdict for s, p in found.items()} == dict.fromkeys(PAPER["settings"], "passes")
    for s in ("q4b-q1.7b-math", "q4b-q1.7b-code", "q8b-q1.7b-math"):
        text = found[s].checks["template"]
        assert text.startswith("the teacher scores the student's rendering; its own template differs at token 16")
        student, teacher = text.split(", the teacher's ")
        assert student.endswith("<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'")
        assert teacher.endswith("<|im_start|>assistant\\n'")
    sky = found["sky7b-ds1.5b-math"]
    assert sky.checks["template"] == "the same rendering of 1 prompts" and sky.checks["special tokens"] == "same roles"
    assert sky.checks["vocabulary"] == "all 151665 student ids are the same tokens to the teacher"
    assert found["q4b-q1.7b-math"].checks["vocabulary"] == "all 151669 student ids are the same tokens to the teacher"


def test_a_teacher_of_the_other_family_is_refused_at_the_first_id_it_reads_otherwise():
    """The R1 distill as teacher of a Qwen3 student: the same base vocabulary, but id 151643 is
    Qwen3's <|endoftext|> and the distill's end of sentence."""
    got = check_pair("cross", model_tokenizer("Qwen3-1.7B"), model_tokenizer("DeepSeek-R1-Distill-Qwen-1.5B"),
                     CONVERSATIONS, {"enable_thinking": False}, {})  # fmt: skip
    assert got.verdict == "refused"
    assert got.problems == ["vocabulary: token id 151643 is '<|endoftext|>' to the student; the teacher reads it as "
                            "'<｜end▁of▁sentence｜>'"]  # fmt: skip
    assert "eos '<|im_end|>' vs '<｜end▁of▁sentence｜>'" in got.checks["special tokens"]
    assert got.checks["template"] == "not compared: the ids do not map"
    shifted = model_tokenizer("Qwen3-4B-Instruct-2507", base_shift=1)  # every base id one later
    got = check_pair("shifted", model_tokenizer("Qwen3-1.7B"), shifted, CONVERSATIONS, {}, {})
    assert got.problems == ["vocabulary: token id 0 is '\\n' to the student; the teacher reads it as '<b151628>'"]


def test_ids_that_decode_to_other_text_are_refused():
    """The same vocabulary under another decoder (WordPiece's joins tokens with spaces): the ids map,
    but the teacher reads other text from them."""
    got = check_pair("decoder", model_tokenizer("Qwen3-1.7B"), model_tokenizer("Qwen3-8B-DAPO", fuse=False),
                     CONVERSATIONS, {}, {})  # fmt: skip
    assert got.verdict == "refused" and got.problems[0].startswith("decoding: the student's rendered prompt decodes")


@pytest.mark.parametrize("student_chat", [{"enable_thinking": False}, {}])
def test_one_tokenizer_on_both_sides_differs_only_by_its_options(student_chat):
    tok = model_tokenizer("Qwen3-1.7B")
    got = check_pair("same", tok, tok, CONVERSATIONS, student_chat, {})
    assert got.verdict == "passes"
    assert ("differs" in got.checks["template"]) == bool(student_chat)
