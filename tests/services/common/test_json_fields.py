"""The one JSON encoder of the hot paths (records in Redis, event fields, stream frames) and the reader of
`*_json` fields: what goes in comes back, whatever Python hands it."""

from __future__ import annotations

import json
from datetime import date

import pytest

from services.common.errors import InvalidArgument
from services.common.json_fields import dump_bytes, dumps, json_object


class Opaque:
    def __str__(self) -> str:
        return "opaque thing"


def test_what_json_can_hold_comes_back_unchanged():
    value = {"text": "naïve 中文 emoji 🙂", "n": [1, 2.5, None, True], "nested": {"a": [{"b": "c"}]}, "t": (1, 2)}
    assert json.loads(dump_bytes(value)) == {**value, "t": [1, 2]}
    assert "中文".encode() in dump_bytes(value)  # UTF-8 as is, not \u escapes
    assert dumps(value) == dump_bytes(value).decode()


def test_what_json_cannot_hold_becomes_text_instead_of_failing():
    assert json.loads(dumps({"blob": Opaque(), "day": date(2026, 11, 26)})) == {"blob": "opaque thing", "day": "2026-11-26"}
    assert json.loads(dumps({1: "int key", None: "none key"})) == {"1": "int key", "null": "none key"}


def test_integers_past_64_bits_keep_every_digit():
    big = {"id": 2**70 + 1, "list": [-(2**65)]}
    assert json.loads(dumps(big)) == big


def test_a_json_field_must_hold_an_object_and_says_which_field_when_not():
    assert json_object('{"a": 1}', "inputs_json") == {"a": 1}
    assert json_object("  ", "inputs_json") == {}
    with pytest.raises(InvalidArgument, match="inputs_json is not valid JSON"):
        json_object("{oops", "inputs_json")
    with pytest.raises(InvalidArgument, match="inputs_json must be a JSON object, not list"):
        json_object("[1]", "inputs_json")
