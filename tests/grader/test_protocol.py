"""What comes from a child is data: envelopes are checked field by field, texts are capped and
made writable, and control characters are escaped on the way out."""
from __future__ import annotations

import json

import pytest

from grader.protocol import Result, Status, capped, check_envelope, printable, storable


def test_capped_says_how_much_was_left_out():
    assert capped("abcdef", 6) == "abcdef"
    assert capped("abcdefgh", 3) == "abc... [5 more characters]"


def test_storable_escapes_lone_surrogates():
    text = storable("bad \ud800 and \udcff", 100)
    assert text == "bad \\ud800 and \\udcff"
    text.encode("utf-8")  # strict


def test_printable_escapes_control_characters_but_keeps_lines():
    shown = printable("a\x1b[2Jb\x07c\n\td\r\x9b\u202eé")
    assert shown == "a\\x1b[2Jb\\x07c\n\td\\r\\x9b\\u202eé"


def test_results_cap_their_message_and_stay_writable():
    result = Result("2.1-schedule", "2.1", "t", 1, 0, Status.FAILED, "\ud800" + "x" * 20_000, 0.1, output="\udcff")
    assert result.message.endswith("more characters]") and len(result.message) < 9_000
    json.dumps({"m": result.message, "o": result.output}, ensure_ascii=False).encode("utf-8")


def test_a_well_formed_envelope_keeps_its_fields():
    envelope = {"kind": "exception", "type": "ValueError", "module_not_found": None, "not_implemented": False,
                "message": "boom", "traceback": "  File ...", "extra": "dropped", "tampered": ["builtins.len"]}
    assert check_envelope(envelope) == {**{k: v for k, v in envelope.items() if k != "extra"}}
    assert check_envelope({"kind": "observation", "observation": [1, {"a": 2}]})["observation"] == [1, {"a": 2}]


@pytest.mark.parametrize("envelope, why", [
    ([], "not a mapping"),
    ({"kind": "passed"}, "its kind is 'passed'"),
    ({"kind": 3}, "its kind is 3"),
    ({"kind": "fail"}, "its 'message' is a NoneType"),
    ({"kind": "fail", "message": b"bytes"}, "its 'message' is a bytes"),
    ({"kind": "exception", "type": "E", "module_not_found": 5, "not_implemented": False, "message": "", "traceback": ""},
     "its 'module_not_found' is a int"),
    ({"kind": "observation"}, "no observation"),
    ({"kind": "garbage", "message": "", "tampered": "builtins.len"}, "'tampered' is not a list of names"),
])
def test_a_malformed_envelope_says_what_is_wrong(envelope, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        check_envelope(envelope)


# --- a child's serialised report, bounded before any object is built ---------------------------
def _pickled(value) -> bytes:
    import pickle

    return pickle.dumps(value, protocol=2)


def test_check_pickle_accepts_an_ordinary_observation():
    from grader.protocol import check_pickle

    check_pickle(_pickled({"kind": "observation", "observation": {"runs": [{"case": [i, 2], "rows": list(range(50))}
                                                                           for i in range(200)]}}))


@pytest.mark.parametrize("levels", [25, 40])
def test_check_pickle_refuses_shared_references_that_unfold_into_too_many_objects(levels):
    from grader.protocol import TooLarge, check_pickle

    bomb: list = []
    for _ in range(levels):
        bomb = [bomb, bomb]
    data = _pickled({"kind": "observation", "observation": bomb})
    assert len(data) < 2048
    with pytest.raises(TooLarge, match="objects"):
        check_pickle(data)


def test_check_pickle_refuses_deep_nesting_and_a_container_filled_after_it_was_memoised():
    from grader.protocol import TooLarge, check_pickle

    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(TooLarge, match="deeper"):
        check_pickle(_pickled(deep))
    shared = list(range(1000))
    with pytest.raises(TooLarge):  # the memo entry is counted in full wherever it is read again
        check_pickle(_pickled([shared] * 2000), max_nodes=1_000_000)


def test_a_forged_result_file_is_garbage_quickly(tmp_path):
    import io
    import time

    import torch

    from grader.harness import _read_result

    bomb: list = []
    for _ in range(40):
        bomb = [bomb, bomb]
    cases = {"shared": bomb, "cycle": (cycle := []), "expanded": torch.zeros(1).expand(10**9)}
    cycle.append(cycle)
    for name, value in cases.items():
        buffer = io.BytesIO()
        torch.save({"kind": "observation", "observation": value}, buffer)
        (tmp_path / name).write_bytes(buffer.getvalue())
        started = time.monotonic()
        read = _read_result(tmp_path / name, 16 * 1024 * 1024)
        assert read["kind"] == "garbage" and "too large" in read["message"], (name, read)
        assert time.monotonic() - started < 5, name
