"""The benchmark and training-set catalogue: how each source row becomes a row of the common schema.

Common schema (JSONL, one object per line):

- math: ``{"id", "domain": "math", "prompt", "answer"}``
- code: ``{"id", "domain": "code", "prompt", "tests"}`` (``tests`` as in ``scout.grading.code``)

``prompt`` is a chat message list (or, in the toy world, a plain string rendered as one user turn).
Where the source is (hub id, config, split), the expected row count and the avg@k repeats live in
the config; what is intrinsic to a dataset lives here: its required columns, the conversion (field
mapping and filter) and the prompt template. A converter returns None for a row its filter drops.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import pickle
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from scout.grading.code import Unconvertible, calls_from_asserts
from scout.grading.rows import check_graded


class DataError(ValueError):
    """A dataset does not have the shape the catalogue expects; the message names it."""


MATH_TEMPLATE = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."

# LiveCodeBench's chat prompt (lcb_runner/prompts/code_generation.py)
LCB_SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests. You will NOT "
    "return anything except for the program."
)
LCB_FORMAT_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters."
)
LCB_FORMAT_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows."
)
# LiveCodeBench runs every program after these imports (lcb_runner/evaluation/testing_util.py)
LCB_IMPORTS = "\n".join(
    [
        *(
            f"from {m} import *"
            for m in (
                "string re datetime collections heapq bisect copy math random statistics itertools "
                "functools operator io sys json builtins typing"
            ).split()
        ),
        "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools, "
        "functools, operator, io, sys, json",
        "sys.setrecursionlimit(50000)",
    ]
)
EVALPLUS_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code "
    "block:\n```\n{prompt}\n```"
)
MBPP_TEMPLATE = (
    "You are an expert Python programmer, and here is your task: {text} Your code should pass these "
    "tests:\n\n{tests}\n\nWrite your solution in a ```python code block."
)
DAPO_PREFIX = re.compile(r"^Solve the following math problem step by step\..*?\n\n", re.DOTALL)
DAPO_SUFFIX = re.compile(r'\n\nRemember to put your answer on its own line after "Answer:"\.\s*$')


def user(text: str, system: str | None = None) -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


def lcb_prompt(content: str, starter_code: str = "") -> list[dict]:
    fmt = LCB_FORMAT_STARTER if starter_code else LCB_FORMAT_STDIN
    code = starter_code or "# YOUR CODE HERE"
    text = f"### Question:\n{content}\n\n### Format: {fmt}\n```python\n{code}\n```\n\n### Answer: (use the provided format with backticks)\n\n"
    return user(text, LCB_SYSTEM)


def math_answer(value) -> str:
    """Gold answers as text; numeric golds stored as floats (27.0) become integers (27)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value).strip()
    if len(text) >= 2 and text[0] == text[-1] == "$":
        text = text[1:-1].strip()
    return text


def _math_row(id_: str, problem: str, answer) -> dict:
    return {
        "id": id_,
        "domain": "math",
        "prompt": user(MATH_TEMPLATE.format(problem=problem)),
        "answer": math_answer(answer),
    }


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):  # LiveCodeBench pickles plain strings; nothing else loads
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a test-case blob")


def lcb_cases(text: str) -> list[dict]:
    """LiveCodeBench test cases: JSON, or base64(zlib(pickle(JSON string))) for private tests."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        blob = zlib.decompress(base64.b64decode(text.encode()))
        return json.loads(_NoGlobals(io.BytesIO(blob)).load())


def _tests(kind: str, cases: list[dict], fn_name: str | None, timeout: float) -> dict:
    tests = {"type": kind, "setup": LCB_IMPORTS, "extract": "lcb", "timeout": timeout, "cases": cases}
    return tests | ({"fn_name": fn_name} if kind == "functional" else {})


# -- converters: (source row, index) -> common-schema row or None ------------------------------


def aime24(r: dict, i: int) -> dict:
    return _math_row(f"aime24-{r['id']}", r["problem"], r["answer"])


def aime25(r: dict, i: int) -> dict:
    return _math_row(f"aime25-{r.get('id', i)}", r.get("problem") or r["question"], r["answer"])


def amc23(r: dict, i: int) -> dict:
    return _math_row(f"amc23-{r['id']}", r["question"], r["answer"])


def hmmt25(r: dict, i: int) -> dict:
    return _math_row(f"hmmt25-{r['problem_idx']}", r["problem"], r["answer"])


def olympiad(r: dict, i: int) -> dict | None:
    if r["is_multiple_answer"]:
        return None
    return _math_row(f"olympiad-{r['id']}", r["question"], r["final_answer"][0])


def math500(r: dict, i: int) -> dict:
    return _math_row(r["unique_id"], r["problem"], r["answer"])


def lcb_v5(r: dict, i: int) -> dict:
    cases = lcb_cases(r["public_test_cases"]) + lcb_cases(r["private_test_cases"])
    kinds = {c["testtype"] for c in cases}
    if len(kinds) != 1:
        raise DataError(f"lcb_v5 {r['question_id']}: mixed test types {sorted(kinds)}")
    fn_name = json.loads(r["metadata"] or "{}").get("func_name")
    return {
        "id": f"lcb-{r['question_id']}",
        "domain": "code",
        "prompt": lcb_prompt(r["question_content"], r["starter_code"]),
        "tests": _tests(kinds.pop(), [{"input": c["input"], "output": c["output"]} for c in cases], fn_name, 6),
    }


# evalplus's own comparison (evalplus/evaluate.py, ``unsafe_execute``), laid over the hub's ``test``
# text, which defines ``is_floats`` and ``assertion`` without evalplus's guards: there, ``is_floats([])``
# is True and ``np.allclose(None, [])`` passes, so a ``return None`` answer passed where the expected
# result is empty. Here, as in evalplus: a float is looked for in non-empty sequences only; outside an
# exact match the type and length must agree before the tolerance applies; and the tolerance, once
# raised to 1e-6 by a float result, stays raised for the task's later inputs (evalplus keeps it in one
# variable over the loop).
EVALPLUS_ASSERTION = """

def is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype == np.float64 or x.dtype == np.float32
    return False


_evalplus_atol = []


def assertion(out, exp, atol):
    if _evalplus_atol:
        atol = _evalplus_atol[-1]
    exact_match = out == exp
    if atol == 0 and is_floats(exp):
        atol = 1e-6
        _evalplus_atol.append(atol)
    if not exact_match and atol != 0:
        assert type(out) == type(exp)
        if isinstance(exp, (list, tuple)):
            assert len(out) == len(exp)
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    else:
        assert exact_match
"""


_EVALPLUS_POLY = """
def _poly(xs, x):
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])
"""


class _FindZeroOracle(ast.NodeTransformer):
    """HumanEval/32's root check as evalplus runs it (``unsafe_execute``'s special oracle).

    The hub's export writes ``assert _poly(*candidate(*inp), inp) <= atol``, which unpacks the float
    root and raises for every program, the reference included. evalplus itself asserts
    ``_poly(*inp, out) <= atol`` (signed, as it is written there) and then compares ``out`` with the
    stored root by its ``assertion`` at the same tolerance; this rewrites the loop's body to that."""

    def visit_Assert(self, node):  # noqa: N802 - ast's naming
        test = node.test
        if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Call)
                and getattr(test.left.func, "id", None) == "_poly" and test.left.args
                and isinstance(test.left.args[0], ast.Starred)
                and isinstance(test.left.args[0].value, ast.Call)
                and getattr(test.left.args[0].value.func, "id", None) == "candidate"):  # fmt: skip
            return node
        (op,), (atol,) = test.ops, test.comparators
        if not isinstance(op, ast.LtE):
            raise Unconvertible(f"an unknown form of find_zero's oracle: {ast.unparse(node)}")
        tol = ast.unparse(atol)
        return ast.parse(
            f"_out = candidate(*inp)\nassert _poly(*inp, _out) <= {tol}\nassertion(_out, exp, {tol})"
        ).body


def humaneval_plus_calls(test: str, entry: str) -> tuple[list[str], str]:
    """evalplus's ``check(candidate)`` (base and plus inputs with their results, compared by its own
    ``assertion``): the calls it makes, and its code without the final ``check(entry)``, with
    evalplus's own ``assertion`` after the hub's (``EVALPLUS_ASSERTION``)."""
    tree = ast.parse(test)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        raise Unconvertible("no check(candidate) function in the test")
    inputs = None
    for node in ast.walk(check):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["inputs"]:
            try:
                inputs = ast.literal_eval(node.value)
            except ValueError as exc:
                raise Unconvertible(f"its inputs are not literals ({exc})") from exc
    if not isinstance(inputs, list) or not all(isinstance(args, list) for args in inputs):
        raise Unconvertible("no literal list of argument lists `inputs` in check(candidate)")
    calls = []
    for args in inputs:
        text = repr(args)
        if ast.literal_eval(text) != args:  # nan, inf: not written back as literals
            raise Unconvertible(f"input {text[:60]} does not round-trip as a literal")
        calls.append(f"{entry}(*{text})")
    if entry == "find_zero":
        check = _FindZeroOracle().visit(check)
        if not any(isinstance(n, ast.FunctionDef) and n.name == "_poly" for n in tree.body):
            tree.body.insert(0, ast.parse(_EVALPLUS_POLY).body[0])
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                                          and getattr(n.value.func, "id", None) == "check")]  # fmt: skip
    code = ast.unparse(ast.Module(body=body, type_ignores=[]))
    return calls, "import math\nimport numpy as np\n" + code + EVALPLUS_ASSERTION


def humaneval_plus(r: dict, i: int) -> dict:
    # the values of every base and plus input are computed in the sandbox; evalplus's own check
    # (expected results, float tolerance, find_zero's polynomial test) runs on them outside
    calls, code = humaneval_plus_calls(r["test"], r["entry_point"])
    return {
        "id": r["task_id"],
        "domain": "code",
        "prompt": user(EVALPLUS_INSTRUCTION.format(prompt=r["prompt"].strip())),
        # the task's prompt first: its imports and helper functions; the answer's definition wins
        "tests": {
            "type": "calls",
            "setup": r["prompt"],
            "calls": calls,
            "check": {"code": code, "replay": "check"},
            "extract": "sanitize",
            "timeout": 20,
        },
    }


def mbpp(r: dict, i: int) -> dict:
    return {
        "id": f"mbpp-{r['task_id']}",
        "domain": "code",
        "prompt": user(MBPP_TEMPLATE.format(text=r["text"], tests="\n".join(r["test_list"]))),
        # test_list's asserts become the calls of the function (sandbox) and the asserts over their
        # values (outside): math.isclose, set(...) == ... and the like run as MBPP wrote them
        "tests": {
            **calls_from_asserts(list(r["test_list"]), r["test_setup_code"]),
            "extract": "sanitize",
            "timeout": 10,
        },
    }


def openr1_math(r: dict, i: int) -> dict:
    prompt = [{"role": m["role"], "content": m["content"]} for m in r["prompt"]]
    return {
        "id": f"openr1-{i}",
        "domain": "math",
        "prompt": prompt,
        "answer": math_answer(r["reward_model"]["ground_truth"]),
    }


def _taco_args(value) -> str:
    return "\n".join(json.dumps(a) for a in value)


def deepcoder_taco(r: dict, i: int) -> dict | None:
    t = json.loads(r["tests"]) if isinstance(r["tests"], str) else r["tests"]
    if not t.get("inputs"):
        return None
    if t.get("fn_name"):
        cases = [
            {"input": _taco_args(a), "output": json.dumps(o[0] if isinstance(o, list) and len(o) == 1 else o)}
            for a, o in zip(t["inputs"], t["outputs"], strict=True)
        ]
        tests = _tests("functional", cases, t["fn_name"], 6)
    else:
        text = lambda v: "\n".join(v) if isinstance(v, list) else str(v)  # noqa: E731
        cases = [{"input": text(a), "output": text(o)} for a, o in zip(t["inputs"], t["outputs"], strict=True)]
        tests = _tests("stdin", cases, None, 6)
    return {
        "id": f"taco-{i}",
        "domain": "code",
        "prompt": lcb_prompt(r["problem"], r.get("starter_code") or ""),
        "tests": tests,
    }


def dapo_problem(text: str) -> str:
    """The bare problem of a DAPO prompt (its 'Answer:' instructions removed: we grade boxes)."""
    return DAPO_SUFFIX.sub("", DAPO_PREFIX.sub("", text, count=1)).strip()


def dapo_math(r: dict, i: int) -> dict:
    problem = dapo_problem(r["prompt"][-1]["content"])
    return _math_row(f"dapo-{i}", problem, r["reward_model"]["ground_truth"])


@dataclass(frozen=True)
class Entry:
    convert: Callable[[dict, int], dict | None]
    columns: tuple[str, ...]  # source columns the converter reads
    files: tuple[str, ...] = ()  # read these JSONL files of the repository instead of a split
    dedup: Callable[[dict], str] | None = None  # key of the converted row; later duplicates are dropped


CATALOGUE: dict[str, Entry] = {
    "aime24": Entry(aime24, ("id", "problem", "answer")),
    "aime25": Entry(aime25, ("answer",)),
    "amc23": Entry(amc23, ("id", "question", "answer")),
    "hmmt25": Entry(hmmt25, ("problem_idx", "problem", "answer")),
    "olympiad": Entry(olympiad, ("id", "question", "final_answer", "is_multiple_answer")),
    "math500": Entry(math500, ("unique_id", "problem", "answer")),
    "lcb_v5": Entry(
        lcb_v5,
        ("question_id", "question_content", "starter_code", "public_test_cases", "private_test_cases", "metadata"),
        files=("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl"),  # release_v5
    ),
    "humaneval_plus": Entry(humaneval_plus, ("task_id", "prompt", "entry_point", "test")),
    "mbpp": Entry(mbpp, ("task_id", "text", "test_list", "test_setup_code")),
    "openr1-math-46k": Entry(openr1_math, ("prompt", "reward_model")),
    "deepcoder-taco": Entry(deepcoder_taco, ("problem", "tests")),
    # deduplicated on the problem text of the (single) user message
    "dapo-math-17k": Entry(dapo_math, ("prompt", "reward_model"), dedup=lambda row: row["prompt"][-1]["content"]),
}


def entry(name: str) -> Entry:
    if name not in CATALOGUE:
        raise DataError(
            f"no catalogue entry for dataset {name!r}: add a converter to scout/catalogue.py "
            f"(known: {', '.join(sorted(CATALOGUE))})"
        )
    return CATALOGUE[name]


def _is_prompt(p) -> bool:
    if isinstance(p, str):
        return bool(p.strip())
    return (
        isinstance(p, list)
        and bool(p)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in p)
    )


def check_row(row: dict) -> str | None:
    """What is wrong with a common-schema row, or None."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if not isinstance(row.get("id"), str) or not row["id"]:
        return "missing or empty 'id'"
    if not _is_prompt(row.get("prompt")):
        return "'prompt' must be a non-empty string or a list of {role, content} messages"
    return check_graded(row)


