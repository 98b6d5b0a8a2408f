"""Envelopes are stripped whatever wraps a line, keeping their time and source; partial records are joined."""

from __future__ import annotations

import json

import pytest

from infradoctor.logs.envelope import (
    ACCESS_TAG,
    COMPOSE,
    CRI,
    DMESG_DECODE,
    DOCKER_JSON,
    JSON_MEMBER,
    KERNEL_TAG,
    KUBECTL_PREFIX,
    STERN,
    SYSLOG,
    SYSLOG_5424,
    TIMESTAMP,
    VIEWER,
    EnvelopeReader,
    prefix_regex,
    uniform_envelope,
)
from infradoctor.logs.formats.timestamps import iso_time
from infradoctor.logs.stats import NO_TIME

ENVOY = ('[2024-07-20T07:06:24.729Z] "GET /no-healthy-upstream HTTP/1.1" 503 UH no_healthy_upstream 0 19 0 - "-" '
         '"curl/8.4.0" "2f22e5c6" "localhost:8000" "-"')


@pytest.mark.parametrize("line,kinds,source,program,time", [
    (f"[pod/vllm-0/istio-proxy] {ENVOY}", (KUBECTL_PREFIX,), "vllm-0/istio-proxy", "", None),
    (f"ingressgateway-7cc46d9596-v8qnt istio-proxy {ENVOY}", (STERN,), "ingressgateway-7cc46d9596-v8qnt/istio-proxy",
     "", None),
    (f"envoy-1         | 2024-07-20T07:05:58.670998585Z {ENVOY}", (COMPOSE, TIMESTAMP), "envoy-1", "",
     "2024-07-20T07:05:58Z"),
    (f"2024-06-13T02:36:52.000000000Z stderr F {ENVOY}", (CRI,), "stderr", "", "2024-06-13T02:36:52Z"),
    (f"<134>Dec  4 22:31:11 ingress[8]: {ENVOY}", (SYSLOG,), "ingress", "ingress", "2024-12-04T22:31:11Z"),
    (f"Jul 20 07:05:54 edge-1 envoy[2211]: {ENVOY}", (SYSLOG,), "envoy", "envoy", "2024-07-20T07:05:54Z"),
    (f"<163>1 2021-03-02T05:32:30.000Z web-1 nginx 37 - - {ENVOY}", (SYSLOG_5424,), "nginx", "nginx",
     "2021-03-02T05:32:30Z"),
    (f"2024-11-11T10:37:14.854863+01:00 hermes haproxy[329122] {ENVOY}", (SYSLOG,), "haproxy", "haproxy",
     "2024-11-11T09:37:14Z"),
    (f"ACCESS {ENVOY}", (ACCESS_TAG,), "", "", None),
    (f"kern  :warn  : 2025-01-21T04:41:44,283302+00:00 {ENVOY}", (DMESG_DECODE,), "", "kernel",
     "2025-01-21T04:41:44Z"),
    (f"kernel: {ENVOY}", (KERNEL_TAG,), "", "kernel", None),
    (f"- 2024-06-22T20:16:34.700+00:00 {ENVOY}", (VIEWER,), "", "", "2024-06-22T20:16:34Z"),
    (json.dumps({"log": ENVOY + "\n", "stream": "stdout", "time": "2023-03-08T16:02:42.123456123Z"}), (DOCKER_JSON,),
     "stdout", "", "2023-03-08T16:02:42Z"),
    ('    "textPayload": ' + json.dumps(ENVOY + "\\r\\n") + ",", (JSON_MEMBER,), "", "", None),
    (f"\x1b[32mvllm-0-abcde\x1b[0m vllm {ENVOY}", (STERN,), "vllm-0-abcde/vllm", "", None),
    (ENVOY, (), "", "", None),
])
def test_each_envelope_is_stripped_with_its_time_and_source(line: str, kinds: tuple[str, ...], source: str,
                                                            program: str, time: str | None) -> None:
    stripped = EnvelopeReader(2024).unwrap(line)
    assert stripped is not None
    assert stripped.payload == ENVOY and stripped.kinds == kinds
    assert stripped.source == source and stripped.program == program
    assert stripped.second == (iso_time(time) if time else NO_TIME)


def test_syslog_3164_takes_the_year_given() -> None:
    stripped = EnvelopeReader(2019).unwrap("<30>Jun 27 21:43:42 haproxy[22021]: x")
    assert stripped is not None and stripped.second == iso_time("2019-06-27T21:43:42Z") and stripped.payload == "x"


def test_cri_partial_records_are_joined() -> None:
    reader = EnvelopeReader()
    assert reader.unwrap("2024-06-13T02:36:52.009Z stderr P ERROR first half ") is None
    joined = reader.unwrap("2024-06-13T02:36:52.009Z stderr F and the rest")
    assert joined is not None and joined.payload == "ERROR first half and the rest"
    assert reader.flush() is None


def test_docker_json_without_newline_is_a_partial_record() -> None:
    reader = EnvelopeReader()
    assert reader.unwrap(json.dumps({"log": "part one, ", "stream": "stdout", "time": "2024-01-01T00:00:00Z"})) is None
    left = reader.flush()
    assert left is not None and left.payload == "part one, "


def test_ambiguous_envelopes_are_stripped_only_when_allowed() -> None:
    line = "worker-abcde started the loop"
    assert EnvelopeReader().unwrap(line).kinds == (STERN,)  # type: ignore[union-attr]
    assert EnvelopeReader(ambiguous=frozenset()).unwrap(line).payload == line  # type: ignore[union-attr]


def test_a_uniform_prefix_envelope_becomes_a_regex_for_the_fast_engine() -> None:
    reader = EnvelopeReader(2024)
    lines = [reader.unwrap(f"[pod/p-{i}/c] {ENVOY}") for i in range(3)]
    kinds = uniform_envelope([s for s in lines if s is not None])
    assert kinds == (KUBECTL_PREFIX,)
    assert prefix_regex(kinds) is not None and prefix_regex((DOCKER_JSON,)) is None
