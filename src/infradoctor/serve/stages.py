"""Stage timers: ``with stage("preprocess"):`` records a stage's duration in the current request.

The current request is a :class:`RequestTiming` held in a context variable, set by the ASGI middleware (or by
:func:`request_timing` outside a server). Context variables follow the request into ``await``-ed coroutines and into
Starlette's thread pool (``def`` endpoints), so stages recorded anywhere on the request's path land in its record.
Outside a request a stage costs two clock reads and records nothing.

On CUDA, ``stage(name, cuda=True)`` records a pair of CUDA events on the current stream instead of reading the host
clock: the request path never waits for the GPU. The events are resolved later, when the middleware finishes the
request (a background thread waits for them after the response is sent). ``stage(name, sync=True)`` synchronises the
device before and after the stage and measures wall time: exact per-stage latency at the cost of two syncs. Without
CUDA (torch not imported, or no device) both fall back to wall time.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

Clock = Callable[[], int]
"""A monotonic clock in nanoseconds."""


class RequestTiming:
    """The stage durations of one request, in the order stages first ended.

    Durations of stages with the same name add up (a stage entered twice in one request reports its total).
    """

    __slots__ = ("clock", "durations", "pending", "request_id", "started_ns")

    def __init__(self, request_id: str = "", *, clock: Clock = time.perf_counter_ns) -> None:
        self.request_id = request_id
        """The request's id (from ``X-Request-ID``, ``traceparent`` or generated)."""
        self.clock = clock
        """Nanosecond clock the stages of this request read."""
        self.started_ns = clock()
        """When the request started, on ``clock``."""
        self.durations: dict[str, float] = {}
        """Stage name -> milliseconds, resolved so far."""
        self.pending: list[tuple[str, Any, Any]] = []
        """CUDA stages not resolved yet: (name, start event, end event)."""

    def add(self, name: str, duration_ms: float) -> None:
        """Add ``duration_ms`` to stage ``name``."""
        durations = self.durations
        durations[name] = durations.get(name, 0.0) + duration_ms

    def elapsed_ms(self) -> float:
        """Milliseconds since the request started."""
        return (self.clock() - self.started_ns) / 1e6

    def resolve_ready(self) -> None:
        """Resolve CUDA stages whose end event has completed, without waiting for the device."""
        if not self.pending:
            return
        still: list[tuple[str, Any, Any]] = []
        for name, start, end in self.pending:
            if end.query():
                self.add(name, float(start.elapsed_time(end)))
            else:
                still.append((name, start, end))
        self.pending = still

    def resolve_all(self) -> None:
        """Resolve every CUDA stage, waiting for the device where needed (never call this on the request path)."""
        for name, start, end in self.pending:
            end.synchronize()
            self.add(name, float(start.elapsed_time(end)))
        self.pending = []


_current: contextvars.ContextVar[RequestTiming | None] = contextvars.ContextVar(
    "infradoctor_request_timing", default=None
)


def current_timing() -> RequestTiming | None:
    """The timing record of the request being served in this context, or None outside a request."""
    return _current.get()


def activate(timing: RequestTiming) -> contextvars.Token[RequestTiming | None]:
    """Make ``timing`` the current request's record; pass the token to :func:`deactivate`."""
    return _current.set(timing)


def deactivate(token: contextvars.Token[RequestTiming | None]) -> None:
    """Undo :func:`activate`."""
    _current.reset(token)


@contextmanager
def request_timing(request_id: str = "", *, clock: Clock = time.perf_counter_ns) -> Iterator[RequestTiming]:
    """Make a fresh record current, to collect stages outside a server (a batch job, a test).

    Use it as ``with request_timing() as timing: ...``.
    """
    timing = RequestTiming(request_id, clock=clock)
    token = _current.set(timing)
    try:
        yield timing
    finally:
        _current.reset(token)


def record(name: str, duration_ms: float) -> None:
    """Record a duration measured elsewhere (e.g. a queue wait) as a stage of the current request."""
    timing = _current.get()
    if timing is not None:
        timing.add(name, duration_ms)


def _cuda() -> Any | None:
    """``torch.cuda`` when torch is already imported and a CUDA device is usable; else None (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        return cuda if cuda.is_available() else None
    except Exception:  # a broken driver is "no CUDA", not a failed request
        return None


class Stage:
    """One timed stage; a context manager (``with`` / ``async with``) and a decorator (sync or async functions).

    A Stage object times one execution at a time; as a decorator it makes a fresh one per call.
    """

    __slots__ = ("_cuda", "_start", "_start_event", "_timing", "cuda", "name", "sync")

    def __init__(self, name: str, *, cuda: bool = False, sync: bool = False) -> None:
        self.name = name
        """Stage name as it appears in ``Server-Timing``, logs and metrics."""
        self.cuda = cuda
        """Time with CUDA events resolved after the response (no sync on the request path)."""
        self.sync = sync
        """Synchronise the device around the stage and measure exact wall time."""
        self._timing: RequestTiming | None = None
        self._start = 0
        self._cuda: Any | None = None
        self._start_event: Any | None = None

    def __enter__(self) -> Stage:
        timing = self._timing = _current.get()
        if timing is None:
            return self
        if self.cuda or self.sync:
            cuda = self._cuda = _cuda()
            if cuda is not None:
                if self.sync:
                    cuda.synchronize()
                else:
                    event = self._start_event = cuda.Event(enable_timing=True)
                    event.record()
                    return self
        self._start = timing.clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timing = self._timing
        if timing is None:
            return
        self._timing = None
        start_event = self._start_event
        if start_event is not None:
            self._start_event = None
            end_event = self._cuda.Event(enable_timing=True)  # type: ignore[union-attr]
            end_event.record()
            timing.pending.append((self.name, start_event, end_event))
            return
        if self.sync and self._cuda is not None:
            self._cuda.synchronize()
        timing.add(self.name, (timing.clock() - self._start) / 1e6)

    async def __aenter__(self) -> Stage:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        """Decorate ``func`` (sync or async) so that each call is timed as this stage."""
        name, cuda, sync = self.name, self.cuda, self.sync
        if inspect.iscoroutinefunction(func):
            async_func = cast(Callable[..., Awaitable[Any]], func)

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with Stage(name, cuda=cuda, sync=sync):
                    return await async_func(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Stage(name, cuda=cuda, sync=sync):
                return func(*args, **kwargs)

        return cast(F, wrapper)


def stage(name: str, *, cuda: bool = False, sync: bool = False) -> Stage:
    """Time a stage of the current request, as a context manager or a decorator.

    ``with stage("inference"): ...``, ``async with stage("fetch"): ...`` or ``@stage("preprocess")``.

    Args:
        name: stage name (``Server-Timing`` metric name; characters outside an HTTP token become ``_`` there).
        cuda: time GPU work with CUDA events, resolved after the response, so the request path never waits for
            the device; falls back to wall time without CUDA.
        sync: synchronise the device before and after the stage and measure exact wall time.
    """
    return Stage(name, cuda=cuda, sync=sync)
