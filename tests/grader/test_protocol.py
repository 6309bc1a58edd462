"""What comes from a child is data: envelopes are checked field by field, texts are capped and
made writable, and control characters are escaped on the way out."""
from __future__ import annotations

import json

import pytest

from grader.protocol import (
    MAX_REPORT_BYTES,
    MESSAGE_BYTES,
    OUTPUT_BYTES,
    WRITTEN_REPORT_BYTES,
    Report,
    Result,
    Status,
    as_json,
    capped,
    check_envelope,
    escaped_bytes,
    one_line,
    printable,
    read_json_report,
    report_text,
    storable,
    write_json_report,
)

# What a child can print or raise that grows when escaped: control characters (six bytes each
# in JSON), DEL, bidirectional controls (seven once shown as \u202e), a character beyond the
# BMP (twelve: two \uXXXX escapes), CJK text (six), lone surrogates (made \ud800 first).
FLOODS = {
    "control": "\x01\x1b\x07",
    "delete": "\x7f",
    "bidirectional": "\u202e\u2066",
    "beyond the BMP": "\U0001F600",
    "CJK": "梯度",
    "lone surrogates": "\ud800",
    "line breaks": "\n\t\r",
}


def _views(text: str) -> list[int]:
    """The bytes ``text`` takes in each place it goes: the JSON report, and the terminal, the
    CSV and Gradescope's JSON (printable or one_line, then JSON)."""
    return [len(json.dumps(view)) - 2 for view in (text, printable(text), one_line(text))]


def test_capped_says_how_much_was_left_out():
    assert capped("abcdef", 6) == "abcdef"
    assert capped("abcdefgh" * 10, 40) == "abcdefghabcdefgh... [64 more characters]"
    assert escaped_bytes(capped("abcdefgh" * 10, 40)) == 40


@pytest.mark.parametrize("flood", FLOODS.values(), ids=FLOODS.keys())
def test_caps_count_bytes_after_escaping(flood):
    """The cap holds in every view a text reaches, however much it grows when escaped."""
    text = storable(flood * 100_000, 8_000)
    assert text.endswith("more characters]")
    assert max(_views(text)) <= 8_000
    assert escaped_bytes(text) == max(_views(text)) or flood in ("\x7f", "\n\t\r")  # the widest view, or wider
    assert len(text) < 8_000


@pytest.mark.parametrize("flood", FLOODS.values(), ids=FLOODS.keys())
def test_a_text_within_its_cap_is_kept_whole(flood):
    text = flood * 50
    assert storable(text, 50 * 12 * len(flood)) == text.encode("utf-8", "backslashreplace").decode()


def test_storable_escapes_lone_surrogates():
    text = storable("bad \ud800 and \udcff", 100)
    assert text == "bad \\ud800 and \\udcff"
    text.encode("utf-8")  # strict


def test_printable_escapes_control_characters_but_keeps_lines():
    shown = printable("a\x1b[2Jb\x07c\n\td\r\x9b\u202eé\u200f")
    assert shown == "a\\x1b[2Jb\\x07c\n\td\\r\\x9b\\u202eé\\u200f"


def test_one_line_escapes_line_breaks_too():
    name = "pipeline.py\nTotal                 90/90\r\t\u2028\x1b[2J\u202eyp.evil"
    shown = one_line(name)
    assert shown == "pipeline.py\\nTotal                 90/90\\r\\t\\u2028\\x1b[2J\\u202eyp.evil"
    assert len(shown.splitlines()) == 1


def test_results_cap_their_message_and_stay_writable():
    result = Result("2.1-schedule", "2.1", "t", 1, 0, Status.FAILED, "\ud800" + "x" * 20_000, 0.1, output="\udcff")
    assert result.message.endswith("more characters]") and escaped_bytes(result.message) <= MESSAGE_BYTES
    json.dumps({"m": result.message, "o": result.output}, ensure_ascii=False).encode("utf-8")


def _flooded_report(criteria: int, flood: str) -> Report:
    """A report whose every text is as large as its cap allows, of ``flood`` characters."""
    report = Report(submission=flood * 100, files={}, environment={}, seed=1, planned=criteria, complete=True)
    for number in range(criteria):
        report.results.append(Result(f"9.{number}-x", "9", flood * 1000, 1, 0, Status.FAILED, flood * 20_000, 1.0,
                                     output=flood * 40_000, details={"own_pieces": {"message": flood * 20_000}}))
        report.note(flood * 2_000)
        report.flag(flood * 2_000 + str(number))
    report.policy_findings = [{"file": "pipeline.py", "line": 1, "name": flood * 2_000, "code": flood * 160}] * 100
    return report


@pytest.mark.parametrize("flood", FLOODS.values(), ids=FLOODS.keys())
def test_a_flooded_report_stays_under_the_readers_bound_and_reads_back(flood, tmp_path):
    """As many criteria as the rubric has, each with the largest message and output a child
    can produce, of characters that grow when escaped: the report is written within the
    writers' bound and the reader takes it back (a class run records its score)."""
    from grader.rubric import load_rubric

    report = _flooded_report(len(load_rubric().criteria), flood)
    path = tmp_path / "report.json"
    write_json_report(report, path)
    assert path.stat().st_size <= WRITTEN_REPORT_BYTES < MAX_REPORT_BYTES
    read = read_json_report(path)
    assert read is not None and len(read["criteria"]) == len(report.results)
    assert all(max(_views(c["output"])) <= OUTPUT_BYTES for c in read["criteria"])


def test_a_report_too_large_for_its_caps_is_cut_evenly_and_says_so(tmp_path):
    """Caps per criterion bound what one criterion holds; a rubric with very many criteria
    still gets a report the reader takes back: the outputs are cut further, evenly."""
    report = _flooded_report(400, "\x01")
    text = report_text(as_json(report))
    assert len(text) <= WRITTEN_REPORT_BYTES
    data = json.loads(text)
    assert "this report was too large" in data["notes"][-1]
    outputs = {len(c["output"]) for c in data["criteria"]}
    assert len(outputs) == 1 and all(c["message"] for c in data["criteria"])


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


# --- a child's report on the wire: JSON plus safetensors, bounded while it is read ----------------
def _round_trip(value):
    from grader.result_file import decode, encode

    return decode(encode({"kind": "observation", "observation": value}))["observation"]


def _same(a, b) -> bool:
    """Equal, with the same types all the way down (tuple is not list, 1 is not 1.0 or True)."""
    import math

    import torch

    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        # exact: a tensor against its own written and read-back copy
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(type(k) is type(j) for k, j in zip(a, b)) and all(_same(a[k], b[k]) for k in a)
    return a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


def test_a_report_reads_back_as_what_plain_copy_built():
    import math

    import torch

    from grader.child import plain_copy

    observation = plain_copy({
        "runs": [(0, 1), (1, 0)], 3: {7: "seven", "x": [None, True, 2, 2.0, -0.0]}, "text": "é \ud800 \x1b",
        "floats": (math.nan, math.inf, -math.inf, 1e308, 5e-324), "big": 2**80,
        "tensors": [torch.zeros(0), torch.zeros(0, 3), torch.tensor(1.5, dtype=torch.float64), torch.tensor(True),
                    torch.arange(6).reshape(2, 3).t(), torch.randn(2, 2, requires_grad=True),
                    torch.ones(3, dtype=torch.float32), torch.tensor([True, False]), torch.zeros(2, dtype=torch.int64)],
    })
    back = _round_trip(observation)
    assert _same(back, observation), back
    assert _same(back, _round_trip(back))
    assert not _same((1,), [1]) and not _same({1: 0}, {"1": 0}) and not _same([1], [1.0])  # the check itself can fail


@pytest.mark.parametrize("value", [{1, 2}, object(), b"bytes", {(1, 2): 3}, 1j])
def test_what_the_format_cannot_hold_is_refused_when_written(value):
    from grader.result_file import encode

    with pytest.raises(TypeError, match="cannot be reported"):
        encode({"kind": "observation", "observation": [value]})


def _forged(structure: str, tensors: dict | None = None, metadata: dict | None = None) -> bytes:
    from safetensors.torch import save

    return save(tensors or {}, metadata={"envelope": structure} if metadata is None else metadata)


@pytest.mark.parametrize("data, why", [
    (b"", "too short"),
    (b"\x10\x00\x00\x00\x00\x00\x00\x00{}", "cut short"),
    (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "header is not a mapping"),
    (_forged("", metadata={"other": "x"}), "has no envelope"),
    (_forged("[1, 2]"), "not a mapping"),
    (_forged('{"set": [1]}'), "a 'set' value the format does not know"),
    (_forged('{"tuple": [1], "dict": []}'), "not one of the format's tagged values"),
    (_forged('{"dict": [["k"]]}'), "not a [str or int key, value] pair"),
    (_forged('{"dict": [["t", {"tensor": 0}]]}'), "a 'tensor' value the format does not know"),
    (_forged('{"dict": [["nan", NaN]]}'), "bare constant NaN"),
    (_forged('{"dict": [["x", 1]]'), "unreadable"),
])
def test_a_malformed_report_says_what_is_wrong(data, why):
    from grader.result_file import Malformed, decode

    with pytest.raises(Malformed, match=why.replace("[", r"\[").replace("(", r"\(")):
        decode(data)


def test_a_tensor_is_read_once_so_nothing_is_shared():
    import torch

    from grader.result_file import Malformed, decode

    data = _forged('{"dict": [["a", {"tensor": 0}], ["b", {"tensor": 0}]]}', {"t0": torch.zeros(2)})
    with pytest.raises(Malformed, match="'tensor' value"):
        decode(data)


@pytest.mark.parametrize("bomb, why", [
    ('{"dict": [["o", ' + "[" * 101 + "]" * 101 + "]]}", "nests deeper than 100 levels"),
    ('{"dict": [["o", ' + "[" * 100_000 + "]" * 100_000 + "]]}", "nests deeper than 100 levels"),
    ('{"dict": [["o", [' + ",".join(["0"] * 1_000_001) + "]]]}", "more than 1000000 values"),
])
def test_the_reader_bounds_nesting_and_values(bomb, why):
    from grader.result_file import TooLarge, decode

    with pytest.raises(TooLarge, match=why):
        decode(_forged(bomb))


def test_the_reader_bounds_the_tensors_and_the_structure_before_parsing_them(monkeypatch):
    import struct

    import torch

    from grader import result_file
    from grader.result_file import TooLarge, decode

    many = _forged("{}", {f"t{i}": torch.zeros(1) for i in range(result_file.MAX_TENSORS + 1)})
    with pytest.raises(TooLarge, match="tensors"):
        decode(many)
    claimed = struct.pack("<Q", result_file.MAX_HEADER_BYTES + 1) + b"{" + b" " * result_file.MAX_HEADER_BYTES
    with pytest.raises(TooLarge, match="structure takes more than"):
        decode(claimed)


def test_a_forged_result_file_is_garbage_quickly(tmp_path):
    import time

    from grader.harness import _read_result

    cases = {
        "nested": _forged('{"dict": [["kind", "observation"], ["observation", ' + "[" * 200_000 + "]" * 200_000 + "]]}"),
        "oversized": b"\x00" * (16 * 1024 * 1024 + 1),
        "junk": b"\xff" * 1000,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        started = time.monotonic()
        read = _read_result(tmp_path / name, 16 * 1024 * 1024)
        assert read["kind"] == "garbage", (name, read)
        assert ("too large" if name != "junk" else "not in the grader's format") in read["message"], (name, read)
        assert time.monotonic() - started < 5, name
