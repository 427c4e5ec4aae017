"""The values that cross the sandbox boundary: encoded inside, written as JSON without the json
module, decoded outside; worked out by hand."""

from __future__ import annotations

import json

import pytest

from scout.grading import values


def test_encode_by_hand():
    assert values.encode(3) == ["int", "3"]
    assert values.encode([1, "a", None]) == ["list", [["int", "1"], ["str", "a"], ["none", None]]]
    assert values.encode({(1, 2.5): True}) == [
        "dict",
        [[["tuple", [["int", "1"], ["float", "2.5"]]], ["bool", True]]],
    ]
    assert values.encode(b"\x01") == ["bytes", "01"]


def test_user_classes_do_not_survive():
    class Always(int):
        def __eq__(self, other):
            return True

    assert values.encode(Always(3)) is None and values.encode([1, Always(3)]) is None
    assert values.encode(object()) is None


@pytest.mark.parametrize(
    "value",
    [0, -12, 1.5, float("inf"), 2 + 3j, "quote \" backslash \\ newline \n tab \t é 😀 \x00", b"\xff",
     [1, [2, (3, frozenset({4}))]], {"k": {1: [None, True, False]}}, set()],
)  # fmt: skip
def test_dumps_is_json_that_decodes_back(value):
    data = values.encode(value)
    text = values.dumps(data)
    assert json.loads(text) == data and "\n" not in text  # one results line, whatever the strings hold
    assert values.decode(json.loads(text)) == value


def test_dumps_by_hand():
    assert values.dumps(["list", [["str", 'a"b'], ["bool", False], ["none", None]]]) == (
        '["list",[["str","a\\"b"],["bool",false],["none",null]]]'
    )


def test_the_sandboxed_source_runs_without_the_json_module():
    ns: dict = {}
    exec(values.encoder_source(), ns)
    assert "json" not in ns and ns["dumps"](ns["encode"]([1, "x"])) == '["list",[["int","1"],["str","x"]]]'


@pytest.mark.parametrize(
    "data",
    [["int", "1.5"], ["int", 3], ["bool", "yes"], ["list", "abc"], ["nope", 1], [1, 2], "int", ["dict", [[1]]]],
)
def test_decode_refuses_malformed_data(data):
    with pytest.raises(values.Malformed):
        values.decode(data)
