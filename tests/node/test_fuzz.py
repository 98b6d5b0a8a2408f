"""Mutated real GPU inputs never crash the node command's parsers or rules, and stay bounded in time and memory.

Seeded and bounded (derandomized hypothesis, a few hundred cases in all) so the suite stays fast; the long run of
100,000 cases per parser is benchmarks/bench_node_fuzz.py. Mutations: tests/support/gpu_fuzz.py.
"""

from __future__ import annotations

import random
import time
import tracemalloc

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infradoctor.result import schema_document
from tests.support.gpu_fuzz import corpus_documents, evaluate, mutate_record, mutate_text, mutate_xml, nvml_records

XML = corpus_documents("xml")
TEXT = corpus_documents("text")
RECORDS = nvml_records()
VALIDATOR = jsonschema.Draft202012Validator(schema_document())
MB = 1024 * 1024
CASES = settings(max_examples=30, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def bounded(kind: str, data: bytes | dict) -> dict:
    """Evaluate a case; the result must validate, and a case must not take seconds (a blow-up takes minutes)."""
    start = time.perf_counter()
    result = evaluate(kind, data)
    seconds = time.perf_counter() - start
    size = len(data) if isinstance(data, bytes) else len(str(data))
    assert seconds < 2.0 + size / 1e6, (kind, size, seconds)
    if result:
        errors = list(VALIDATOR.iter_errors(result))
        assert not errors, errors[0].message
    return result


@CASES
@given(document=st.integers(0, len(XML) - 1), seed=st.integers(0, 2**32 - 1))
def test_mutated_xml_reports(document: int, seed: int) -> None:
    bounded("xml", mutate_xml(random.Random(seed), XML[document]))


@CASES
@given(document=st.integers(0, len(TEXT) - 1), seed=st.integers(0, 2**32 - 1))
def test_mutated_text_reports(document: int, seed: int) -> None:
    bounded("text", mutate_text(random.Random(seed), TEXT[document]))


@CASES
@given(record=st.integers(0, len(RECORDS) - 1), seed=st.integers(0, 2**32 - 1))
def test_mutated_nvml_records(record: int, seed: int) -> None:
    bounded("nvml", mutate_record(random.Random(seed), RECORDS[record]))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.binary(max_size=4000))
def test_random_bytes_are_never_a_crash(data: bytes) -> None:
    bounded("xml", data)
    bounded("text", b"==============NVSMI LOG==============\n" + data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(key=st.sampled_from(sorted(RECORDS[0]["devices"][0])), value=json_values)
def test_any_json_where_an_nvml_answer_belongs(key: str, value: object) -> None:
    record = {**RECORDS[0], "devices": [{**RECORDS[0]["devices"][0], key: value}]}
    result = bounded("nvml", record)
    assert result["metrics"]["gpu"]["available"] is True


@pytest.mark.parametrize("kind", ["xml", "text"])
def test_memory_stays_within_three_times_the_input(kind: str) -> None:
    rng = random.Random(7)
    documents = XML if kind == "xml" else TEXT
    mutate = mutate_xml if kind == "xml" else mutate_text
    worst = 0.0
    for case in range(6):
        data = mutate(rng, documents[case % len(documents)])
        tracemalloc.start()
        try:
            evaluate(kind, data)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * len(data) + 100 * MB
        worst = max(worst, peak / max(1, len(data)))
    assert worst < 1000  # bytes per input byte, on documents of 1-500 KB: bounded well inside the 100 MB term
