"""The similarity pass on its own: what it pairs, what it must not, its options and its file.

(The dashboard tests grade a small class and check the pass end to end, in the CSV and the page.)"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import zipfile

import pytest

from course import cli, similarity
from course.discovery import discover
from grader.layout import REPOSITORY as REPO

CLOCK_CYCLES = re.compile(r"# BEGIN SOLUTION 2\.1\n(.*?)# END SOLUTION", re.S)


def disguised(text: str) -> str:
    """What a copier hands in: every name changed, no comments, lines re-spaced."""
    text = re.sub(r"\b(microbatches|wave|stage|schedule|device|warmup|actions|rank|world_size)\b", lambda m: m[0][:2] + "_x", text)
    return "\n\n".join(line for line in text.splitlines() if not line.strip().startswith("#")) + "\n"


@functools.cache
def answer_key_source(name: str) -> str:
    return (REPO / "minitorch" / name).read_text()


def key() -> dict[str, str]:
    return {name: answer_key_source(name) for name in similarity.STUDENT_FILES}


def stub_files() -> dict[str, str]:
    """The kit's stubs (handout/ is checked against the answer key by `make handout-check`)."""
    return similarity.read_stubs()


def only_clock_cycles(stubs: dict[str, str]) -> dict[str, str]:
    """The stubs with the key's clock_cycles and nothing else filled in."""
    body = CLOCK_CYCLES.search(answer_key_source("pipeline.py"))[1]
    return {**stubs, "pipeline.py": stubs["pipeline.py"].replace('    raise NotImplementedError("Problem 2.1: clock_cycles")\n', body, 1)}


def test_the_kit_stubs_never_count():
    stubs = stub_files()
    sources = {"a": stubs, "b": dict(stubs), "c": {"pipeline.py": stubs["pipeline.py"]}}
    assert similarity.find_pairs(sources, similarity.read_stubs(), threshold=0.01) == []


def line_numbers(text: str, start: str, wanted: list[str]) -> list[int]:
    """The 1-based numbers of the lines ``wanted``, found one after the other in ``text`` from the
    first line that starts with ``start`` (after indentation)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(start))
    numbers = []
    for line in wanted:
        at = lines.index(line, at) + 1
        numbers.append(at)
    return numbers


def excerpt_lines(regions) -> dict[int, str]:
    """The file lines the regions' excerpts show, by number (folded and cut lines left out)."""
    shown = {}
    for region in regions:
        for row in region.text.splitlines():
            if row[:5].strip():
                assert row[5:7] == "  " and region.first <= int(row[:5]) <= region.last, row
                shown[int(row[:5])] = row[7:]
    return shown


def test_a_disguised_copy_is_found_with_the_copied_lines():
    sources = {"alice": key(), "bob": {name: disguised(text) for name, text in key().items()}, "carol": stub_files()}
    [pair] = similarity.find_pairs(sources, similarity.read_stubs())
    assert (pair.a, pair.b) == ("alice", "bob") and {m.file for m in pair.files} == {"pipeline.py", "tensor_parallel.py"}
    pipeline = next(m for m in pair.files if m.file == "pipeline.py")
    assert min(pipeline.similarity) > 0.9 and pipeline.overlap > similarity.MIN_OVERLAP
    # The copied lines: the key's clock_cycles (its 2.1 solution), as they are in alice's file, disguised in bob's
    copied = [line for line in CLOCK_CYCLES.search(answer_key_source("pipeline.py"))[1].splitlines()
              if line.strip() and not line.strip().startswith("#")]
    assert any(line.strip().startswith("yield ") for line in copied)
    for side, text, lines in ((0, key()["pipeline.py"], copied),
                              (1, disguised(key()["pipeline.py"]), [disguised(line).rstrip("\n") for line in copied])):
        numbers = line_numbers(text, "def clock_cycles(", lines)
        assert all(any(r.first <= n <= r.last for r in pipeline.regions[side]) for n in numbers), (side, numbers)
        shown = excerpt_lines(pipeline.regions[side])
        assert all(text.splitlines()[n - 1] == line for n, line in shown.items()), side  # this side's own lines
        # alice's excerpt starts at the solution: all of it shows. bob's starts at clock_cycles' docstring (its
        # renamed words are not the kit's) and stops at MAX_REGION_LINES: its first copied lines show.
        assert set(numbers) <= set(shown) if side == 0 else numbers[0] in shown, (side, numbers, sorted(shown))
    first = pipeline.regions[0][0]
    assert answer_key_source("pipeline.py").splitlines()[first.first - 1].strip() == "# BEGIN SOLUTION 2.1"  # kit lines trimmed


def test_the_threshold_decides_and_a_two_line_overlap_never_counts():
    stubs = stub_files()
    partial = only_clock_cycles(stubs)
    sources = {"key": key(), "partial": partial}
    [pair] = similarity.find_pairs(sources, similarity.read_stubs(), threshold=0.5)
    share_of_key = pair.files[0].similarity[0]  # "key" is a: the share of the key's own code found in "partial"
    assert pair.files[0].similarity[1] == 1.0 and share_of_key < 0.2
    assert similarity.find_pairs(sources, similarity.read_stubs(), threshold=1.0)  # 100% of partial's code
    tiny = {**stubs, "pipeline.py": stubs["pipeline.py"].replace(
        '    raise NotImplementedError("Problem 2.1: clock_cycles")', "    if num_microbatches == 0:\n        return", 1)}
    assert similarity.find_pairs({"key": key(), "tiny": tiny}, similarity.read_stubs(), threshold=0.01) == []


def test_code_common_to_many_students_is_not_evidence():
    """MOSS's -m: the code more than max(10, 10%) of the class share is left out."""
    stubs = stub_files()
    same = only_clock_cycles(stubs)
    few = {f"s{i}": same for i in range(3)}
    assert len(similarity.find_pairs(few, similarity.read_stubs())) == 3
    many = {f"s{i:02d}": same for i in range(similarity.COMMON_STUDENTS + 1)}
    assert similarity.find_pairs(many, similarity.read_stubs()) == []


def test_public_solutions_are_compared_with_students_only(tmp_path):
    for folder in ("class/copier", "class/honest", "public/github-a", "public/github-b"):
        (tmp_path / folder).mkdir(parents=True)
    for name, text in key().items():
        (tmp_path / "public/github-a" / name).write_text(text)
        (tmp_path / "public/github-b" / name).write_text(text)
        (tmp_path / "class/copier" / name).write_text(disguised(text))
    with zipfile.ZipFile(tmp_path / "public" / "github-c.zip", "w") as archive:
        archive.writestr("hw/pipeline.py", answer_key_source("pipeline.py"))
    for name, text in stub_files().items():
        (tmp_path / "class/honest" / name).write_text(text)
    students = [(s.name, s.path) for s in discover(tmp_path / "class", tmp_path / "unpacked")[0]]
    result = similarity.run(students, public_folder=tmp_path / "public")
    assert result["public_solutions"] == 3
    assert {(p["a"], p["b"]) for p in result["pairs"]} == {
        ("copier", "public:github-a"), ("copier", "public:github-b"), ("copier", "public:github-c")
    }
    assert similarity.similar_to([(p["a"], p["b"]) for p in result["pairs"]]) == {
        "copier": ["public:github-a", "public:github-b", "public:github-c"]
    }


def test_similarity_file_round_trip_and_malformed_files(tmp_path):
    sources = {"alice": key(), "bob": {name: disguised(text) for name, text in key().items()}}
    pairs = similarity.find_pairs(sources, similarity.read_stubs())
    path = tmp_path / similarity.SIMILARITY_FILE
    similarity.write(path, {"schema": similarity.SCHEMA, "pairs": [similarity._pair_json(p) for p in pairs]})
    assert pairs and similarity.read(path) == pairs
    for content, expected in (
        ("{not json", "cannot read it"),
        (json.dumps({"schema": "other", "pairs": []}), "not a similarity-1 file"),
        (json.dumps({"schema": similarity.SCHEMA, "pairs": [{"a": "x", "b": "y", "files": []}]}), "pair 1: malformed"),
        (json.dumps({"schema": similarity.SCHEMA, "pairs": [{"a": "x", "b": "y", "files": [{"file": "p.py"}]}]}), "pair 1: malformed"),
    ):
        path.write_text(content)
        with pytest.raises(similarity.SimilarityError, match=re.escape(expected)):
            similarity.read(path)


def test_batch_refuses_bad_similarity_options_before_grading(tmp_path, capsys):
    (tmp_path / "class").mkdir()
    for options, message in (
        (["--similarity-threshold", "0"], "--similarity-threshold must be in (0, 1]"),
        (["--similarity-threshold", "1.5"], "--similarity-threshold must be in (0, 1]"),
        (["--public-solutions", str(tmp_path / "nowhere")], "is not a folder"),
    ):
        assert cli.main(["batch", str(tmp_path / "class"), "--csv", str(tmp_path / "g.csv"), *options]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "g.csv").exists()


def test_batch_says_when_copydetect_is_missing(tmp_path, monkeypatch):
    args = argparse.Namespace(no_similarity=False, similarity_threshold=0.5, public_solutions=None)
    assert similarity.argument_problem(args) is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "copydetect is not installed" in similarity.argument_problem(args)
    assert similarity.argument_problem(argparse.Namespace(**{**vars(args), "no_similarity": True})) is None


def test_missing_kit_stubs_are_named(tmp_path):
    with pytest.raises(similarity.SimilarityError, match="run `make handout`"):
        similarity.read_stubs(tmp_path)


SAME_PAIRS = """
import json, sys
from pathlib import Path
from course import similarity
result = similarity.run([(name, Path(sys.argv[1]) / name) for name in ("a", "b")], similarity.DEFAULT_THRESHOLD, None)
print(json.dumps(result["pairs"], sort_keys=True))
"""


@pytest.mark.timeout(300)
def test_two_processes_find_the_same_pairs(tmp_path):
    """batch and a Slurm merge run the pass in different processes (Python salts str hashes per
    process): the same overlaps, similarities and regions in both."""
    import subprocess
    import sys

    key = (REPO / "minitorch" / "pipeline.py").read_text()
    for name, text in (("a", key), ("b", key.replace("num_microbatches", "chunks"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pipeline.py").write_text(text)
    found = [subprocess.run([sys.executable, "-c", SAME_PAIRS, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                            timeout=240, env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}).stdout
             for seed in ("1", "2")]
    assert json.loads(found[0]) and found[0] == found[1]
