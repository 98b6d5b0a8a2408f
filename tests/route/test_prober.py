from __future__ import annotations

from pathlib import Path

import pytest

from infradoctor.load.engine import run_sync
from infradoctor.load.spec import RequestSpec
from infradoctor.procs import free_port
from infradoctor.route.evidence import DIRECT, ROUTER
from infradoctor.route.prober import ProbePath, ProbePlan, run_probe, schedule, upstream_of
from infradoctor.route.sender import EngineSender
from tests.route.servers import backends
from tests.support.servers import python_server

R = ProbePath("router", ROUTER, "http://lb/x")
A = ProbePath("a", DIRECT, "http://a/x")
B = ProbePath("b", DIRECT, "http://b/x")


def test_schedule_alternates_router_and_all_backends_at_once() -> None:
    assert [[p.name for p in g] for g in schedule([R, A, B])] == [["router"], ["a", "b"]]
    assert [[p.name for p in g] for g in schedule([A, B])] == [["a", "b"]]
    assert [[p.name for p in g] for g in schedule([R])] == [["router"]]


def test_upstream_header_detection() -> None:
    assert upstream_of({"x-upstream-addr": "1.1.1.1:80, 2.2.2.2:80"}, None) == (
        "x-upstream-addr", "1.1.1.1:80, 2.2.2.2:80", 2)
    envoy = {"x-envoy-upstream-host": "1.1.1.1:80", "x-envoy-attempt-count": "3"}
    assert upstream_of(envoy, None) == ("x-envoy-upstream-host", "1.1.1.1:80", 3)
    assert upstream_of({"x-pod": "1.1.1.1:80"}, "x-pod") == ("x-pod", "1.1.1.1:80", 1)
    assert upstream_of({"x-served-by": "1.1.1.1:80"}, "x-pod") == (None, None, None)
    assert upstream_of({}, None) == (None, None, None)


CLOSER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        body = b"closed after each response"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.integration
def test_engine_sender_keeps_alive_reconnects_and_classifies(tmp_path: Path) -> None:
    with backends(tmp_path, [{"latency_ms": 300}]) as (slow,):
        with python_server(CLOSER, tmp_path, name="closer") as closer:

            async def go() -> dict[str, object]:
                keep = EngineSender(RequestSpec(url=slow.url + "/health"), timeout_s=5)
                first = [await keep.send() for _ in range(5)]
                timed = EngineSender(RequestSpec(url=slow.url + "/predict"), timeout_s=0.1)
                timeout = await timed.send()
                after_timeout = await timed.send()
                close = EngineSender(RequestSpec(url=closer.url + "/"), timeout_s=5)
                closed = [await close.send() for _ in range(3)]
                refused = await EngineSender(RequestSpec(url=f"http://127.0.0.1:{free_port()}/"), timeout_s=1).send()
                for sender in (keep, timed, close):
                    await sender.close()
                return {"first": first, "keep_opened": keep.opened, "timeout": timeout, "after": after_timeout,
                        "closed": closed, "close_opened": close.opened, "refused": refused}

            out = run_sync(go())
    assert [e.status for e in out["first"]] == [200] * 5 and out["keep_opened"] == 1
    assert out["timeout"].error == "read_timeout" and 90 <= out["timeout"].latency_ms < 1000
    assert out["after"].error == "read_timeout"  # a fresh connection, timed out again
    assert [e.status for e in out["closed"]] == [200] * 3 and out["close_opened"] == 3
    assert out["refused"].error == "connect_refused" and out["refused"].status is None


@pytest.mark.integration
def test_run_probe_interleaves_paths_within_budget(tmp_path: Path) -> None:
    with backends(tmp_path, [{"latency_ms": 1, "served_by": True}, {"latency_ms": 1}]) as (b1, b2):
        paths = [ProbePath("router", ROUTER, b1.url + "/predict"), ProbePath(b1.url, DIRECT, b1.url + "/predict"),
                 ProbePath(b2.url, DIRECT, b2.url + "/predict")]
        plan = ProbePlan(concurrency=3, per_worker=2, duration_s=30, max_requests=60)

        def make(url: str) -> EngineSender:
            return EngineSender(RequestSpec(url=url, capture_headers=("x-served-by",)), capture=("x-served-by",))

        run = run_sync(run_probe(paths, plan, make, opened=lambda s: s.opened))
    # slots of 3 x 2 requests per path, the router alone, then both backends at once: 18 a round, so it stops
    # after the fourth router slot reaches 60
    assert len(run.samples) == 60
    kinds = [s.path for s in run.samples]
    assert kinds.count("router") == 24 and kinds.count(b1.url) == 18 and kinds.count(b2.url) == 18
    assert run.header == "x-served-by"
    assert all(s.served_by == f"127.0.0.1:{b1.port}" for s in run.samples if s.kind == ROUTER)
    assert run.connections == {"router": 3, b1.url: 3, b2.url: 3}  # keep-alive across slots
    assert [s.started_s for s in run.samples] == sorted(s.started_s for s in run.samples)
    assert sorted(s.seq for s in run.samples if s.path == "router") == list(range(24))


@pytest.mark.integration
def test_engine_sender_reopens_a_connection_the_server_closed_while_idle(tmp_path: Path) -> None:
    import asyncio

    with backends(tmp_path, [{"fastapi": True, "keep_alive_s": 0.5}]) as (uv,):

        async def go() -> tuple[list[object], int]:
            sender = EngineSender(RequestSpec(url=uv.url + "/predict"), timeout_s=5)
            first = await sender.send()
            await asyncio.sleep(2.0)  # uvicorn closes the idle keep-alive connection after 0.5 s (busy machine: margin)
            second = await sender.send()
            third = await sender.send()
            await sender.close()
            return [first, second, third], sender.opened

        exchanges, opened = run_sync(go())
    assert [e.status for e in exchanges] == [200, 200, 200]  # type: ignore[attr-defined]
    assert opened == 2


def test_an_unreachable_path_is_probed_lightly() -> None:
    dead = f"http://127.0.0.1:{free_port()}/x"
    plan = ProbePlan(concurrency=3, per_worker=2, duration_s=30, max_requests=9)
    run = run_sync(run_probe([ProbePath(dead, DIRECT, dead)], plan, lambda url: EngineSender(RequestSpec(url=url))))
    # the first slot sends 3 x 2 requests; after it failed to connect at all, one request per slot
    assert len(run.samples) == 9
    assert {s.error for s in run.samples} == {"connect_refused"}


def test_paths_that_never_connect_are_backed_off_and_given_up() -> None:
    import time

    from infradoctor.route.prober import ALL_UNREACHABLE_GIVE_UP_S, UNREACHABLE_BACKOFF_S

    dead = [f"http://127.0.0.1:{free_port()}/x" for _ in range(2)]
    paths = [ProbePath("router", ROUTER, dead[0]), ProbePath(dead[1], DIRECT, dead[1])]
    plan = ProbePlan(concurrency=2, per_worker=2, duration_s=60, max_requests=100_000)
    t0 = time.monotonic()
    run = run_sync(run_probe(paths, plan, lambda url: EngineSender(RequestSpec(url=url))))
    elapsed = time.monotonic() - t0
    assert run.gave_up and {s.error for s in run.samples} == {"connect_refused"}
    assert ALL_UNREACHABLE_GIVE_UP_S <= elapsed < 30  # stopped early, not after the 60 s asked for
    # one connect per slot after the first, one slot per path per backoff pause: no flood
    per_path = max(sum(1 for s in run.samples if s.path == p.name) for p in paths)
    assert per_path <= 4 + elapsed / UNREACHABLE_BACKOFF_S
    assert len(run.samples) < 200


@pytest.mark.integration
def test_a_live_path_keeps_the_probe_going(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/x"
    with backends(tmp_path, [{"latency_ms": 1}]) as (live,):
        paths = [ProbePath("router", ROUTER, dead), ProbePath(live.url, DIRECT, live.url + "/predict")]
        plan = ProbePlan(concurrency=2, per_worker=2, duration_s=3.5, max_requests=100_000)
        run = run_sync(run_probe(paths, plan, lambda url: EngineSender(RequestSpec(url=url))))
    assert not run.gave_up and run.duration_s >= 3.5
    routed = [s for s in run.samples if s.kind == ROUTER]
    assert {s.error for s in routed} == {"connect_refused"}
    assert len(routed) < 4 + run.duration_s / 0.1 + 5  # the dead router is backed off
    assert any(s.ok for s in run.samples if s.kind == DIRECT)
