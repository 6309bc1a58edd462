"""The similarity benchmark's mechanics on a class small enough for every test run."""
from benchmarks import similarity_scale


def test_the_scale_benchmark_finds_exactly_what_it_planted():
    outcome = similarity_scale.measure(students=10, copies=1)
    assert outcome["found"] == outcome["planted"] == 2
    assert outcome["missed"] == outcome["unexpected"] == []
