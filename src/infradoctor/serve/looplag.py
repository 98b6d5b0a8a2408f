"""Event-loop lag monitor: how late the loop runs its callbacks, and which code blocked it.

A watchdog thread posts a callback into the loop every ``interval_s`` (``loop.call_soon_threadsafe``) and measures
how long the loop takes to run it: the lag. While a posted callback has waited longer than ``stall_threshold_s``,
the loop is stalled: the watchdog samples the loop thread's stack (``sys._current_frames``) every
``sample_interval_s`` until the loop comes back, and names the stall's call site: the innermost frame in user code
(not the standard library, not site-packages, not infradoctor) seen most often. That site is what S002
event-loop-blocked points at.

Blocks shorter than the stall threshold are seen too: a few milliseconds after posting each callback
(``probe_s``), the watchdog looks whether it has run; when it has not, the loop is busy with one piece of work at
that instant and the watchdog takes one stack sample (a busy probe). Probes land at instants unrelated to the
program's work, so the share of probes that find user code running on the loop estimates the share of time user
code holds it: a 20 ms ``time.sleep`` inside an ``async def`` endpoint under load shows up although no single
stall reaches 100 ms. A site names the line in the ``async def`` coroutine that was running (the endpoint's line
that calls into the blocking work) when there is one, else the innermost user frame.

It works with any loop object (asyncio, uvloop) without a task inside the loop, so it can be attached from outside
the application. Evidence is a frozen :class:`LoopLagEvidence` with a JSON form, so a server process can write it
to a file for a profiler in another process.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infradoctor.stats import quantile

DEFAULT_INTERVAL_S = 0.05
"""How often the watchdog posts a callback into the loop (it wakes once per period while the loop keeps up)."""

DEFAULT_STALL_THRESHOLD_S = 0.1
"""A callback that waits at least this long marks a stall (100 ms: a request's worth of latency for most APIs)."""

MAX_LAG_SAMPLES = 5000
"""Most recent lag samples kept for percentiles."""

MAX_STALLS = 200
"""Stalls kept (the first ones); the totals count every stall."""

MAX_STACK_FRAMES = 24
"""Frames of the blocking stack kept per stall, innermost first."""

DEFAULT_PROBE_S = 0.002
"""After posting a callback, the watchdog looks this soon whether it ran; if not, it samples the loop's stack."""

MAX_BUSY_SAMPLES = 4000
"""Busy probes kept (the first ones); the totals count every probe."""

_COROUTINE_FLAGS = 0x80 | 0x200  # CO_COROUTINE | CO_ASYNC_GENERATOR


@dataclass(frozen=True)
class StackFrame:
    """One frame of a captured stack."""

    file: str
    """Source file path."""
    line: int
    """Line being executed."""
    function: str
    """Function name."""
    coroutine: bool = False
    """The frame runs an ``async def`` (a coroutine or async generator)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        out: dict[str, Any] = {"file": self.file, "line": self.line, "function": self.function}
        if self.coroutine:
            out["coroutine"] = True
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StackFrame:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data["file"]), int(data["line"]), str(data["function"]), bool(data.get("coroutine", False)))

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclass(frozen=True)
class LoopStall:
    """One period in which the loop ran no callbacks for at least the stall threshold."""

    started_s: float
    """When the stall began, in seconds since the monitor started."""
    duration_s: float
    """How long the posted callback waited (a lower bound of the blocking time)."""
    site: StackFrame | None
    """Innermost user-code frame seen most often while stalled; None when no user frame was seen."""
    stack: tuple[StackFrame, ...]
    """The loop thread's stack at a sample that showed ``site``, innermost first."""
    samples: int
    """Stack samples taken during the stall."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "started_s": self.started_s,
            "duration_s": self.duration_s,
            "site": self.site.to_dict() if self.site else None,
            "stack": [f.to_dict() for f in self.stack],
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopStall:
        """Inverse of :meth:`to_dict`."""
        site = data.get("site")
        return cls(
            started_s=float(data["started_s"]),
            duration_s=float(data["duration_s"]),
            site=StackFrame.from_dict(site) if site else None,
            stack=tuple(StackFrame.from_dict(f) for f in data.get("stack", ())),
            samples=int(data.get("samples", 0)),
        )


@dataclass(frozen=True)
class BusySample:
    """One busy probe: the loop had not run a callback posted ``probe_s`` earlier, and this code was running."""

    started_s: float
    """When, in seconds since the monitor started."""
    site: StackFrame | None
    """The running user site (the ``async def`` line when there is one); None when only library code ran."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"started_s": self.started_s, "site": self.site.to_dict() if self.site else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BusySample:
        """Inverse of :meth:`to_dict`."""
        site = data.get("site")
        return cls(float(data["started_s"]), StackFrame.from_dict(site) if site else None)


@dataclass(frozen=True)
class LoopLagEvidence:
    """What the monitor saw over its run."""

    interval_s: float
    """Period at which callbacks were posted."""
    stall_threshold_s: float
    """Lag at or above which a callback marked a stall."""
    observed_s: float
    """How long the monitor watched the loop."""
    beats: int
    """Callbacks that ran (lag samples taken)."""
    lag_p50_ms: float | None
    """Median lag over the kept samples; None without samples."""
    lag_p99_ms: float | None
    """99th percentile lag; None without samples."""
    lag_max_ms: float | None
    """Largest lag seen; None without samples."""
    blocked_s: float
    """Sum of all stall durations."""
    stall_count: int
    """Number of stalls (all of them, also those beyond the kept list)."""
    stalls: tuple[LoopStall, ...]
    """The first stalls, in order."""
    pid: int | None = None
    """Process the loop ran in."""
    started_unix: float | None = None
    """Wall-clock (Unix) time the monitor started; ``started_s`` of each stall counts from it."""
    probe_s: float | None = None
    """Delay of the busy probes (None: the monitor did not probe)."""
    probes: int = 0
    """Busy probes taken (one per posted callback)."""
    busy: tuple[BusySample, ...] = ()
    """The first busy probes, in order (the loop was running one piece of work at that instant)."""
    busy_count: int = 0
    """Busy probes (all of them, also those beyond the kept list)."""

    def since(self, unix_time: float) -> LoopLagEvidence:
        """The same evidence restricted to stalls and busy probes at or after ``unix_time`` (e.g. once serving).

        Totals (stall count, blocked time, observed time, probes) are recomputed from the kept records; lag
        percentiles are left as measured over the whole run.
        """
        if self.started_unix is None:
            return self
        offset = max(0.0, unix_time - self.started_unix)
        kept = tuple(s for s in self.stalls if s.started_s >= offset)
        busy = tuple(b for b in self.busy if b.started_s >= offset)
        observed = max(0.0, self.observed_s - offset)
        probes = round(self.probes * observed / self.observed_s) if self.observed_s > 0 else 0
        return replace(
            self,
            stalls=kept,
            stall_count=len(kept),
            blocked_s=sum(s.duration_s for s in kept),
            observed_s=observed,
            busy=busy,
            busy_count=len(busy),
            probes=probes,
        )

    @property
    def busy_user_share(self) -> float:
        """Share of busy probes that found user code holding the loop, over all probes (0-1)."""
        if not self.probes:
            return 0.0
        user = sum(1 for b in self.busy if b.site is not None)
        return min(1.0, user / self.probes)

    @property
    def blocked_fraction(self) -> float:
        """Share of the observed time the loop was stalled (0-1)."""
        return min(1.0, self.blocked_s / self.observed_s) if self.observed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "interval_s": self.interval_s,
            "stall_threshold_s": self.stall_threshold_s,
            "observed_s": self.observed_s,
            "beats": self.beats,
            "lag_p50_ms": self.lag_p50_ms,
            "lag_p99_ms": self.lag_p99_ms,
            "lag_max_ms": self.lag_max_ms,
            "blocked_s": self.blocked_s,
            "stall_count": self.stall_count,
            "stalls": [s.to_dict() for s in self.stalls],
            "pid": self.pid,
            "started_unix": self.started_unix,
            "probe_s": self.probe_s,
            "probes": self.probes,
            "busy": [b.to_dict() for b in self.busy],
            "busy_count": self.busy_count,
        }

    def summary_dict(self) -> dict[str, Any]:
        """JSON form for a result: the busy probes as counts (share and the sites they found), not one by one."""
        out = self.to_dict()
        user: collections.Counter[str] = collections.Counter(
            f"{b.site.file}:{b.site.line}" for b in self.busy if b.site is not None)
        out["busy"] = None
        out["busy_user_share"] = round(self.busy_user_share, 4)
        out["busy_sites"] = [{"site": site, "probes": n} for site, n in user.most_common(5)]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopLagEvidence:
        """Inverse of :meth:`to_dict`."""
        return cls(
            interval_s=float(data["interval_s"]),
            stall_threshold_s=float(data["stall_threshold_s"]),
            observed_s=float(data["observed_s"]),
            beats=int(data["beats"]),
            lag_p50_ms=data.get("lag_p50_ms"),
            lag_p99_ms=data.get("lag_p99_ms"),
            lag_max_ms=data.get("lag_max_ms"),
            blocked_s=float(data["blocked_s"]),
            stall_count=int(data["stall_count"]),
            stalls=tuple(LoopStall.from_dict(s) for s in data.get("stalls", ())),
            pid=data.get("pid"),
            started_unix=data.get("started_unix"),
            probe_s=data.get("probe_s"),
            probes=int(data.get("probes") or 0),
            busy=tuple(BusySample.from_dict(b) for b in data.get("busy") or ()),
            busy_count=int(data.get("busy_count") or 0),
        )


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(str(Path(__file__).resolve().parents[1]))  # infradoctor itself
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return tuple(sorted({os.path.realpath(r) + os.sep for r in roots}))


_LIBRARY_ROOTS = _library_roots()
_user_file_cache: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    """True for the user's code: not the standard library, an installed package, infradoctor or a frozen module."""
    known = _user_file_cache.get(filename)
    if known is None:
        if filename.startswith("<"):
            known = False
        else:
            real = os.path.realpath(filename)
            known = not real.startswith(_LIBRARY_ROOTS)
        if len(_user_file_cache) < 4096:
            _user_file_cache[filename] = known
    return known


def capture_stack(thread_id: int, *, limit: int = MAX_STACK_FRAMES) -> tuple[StackFrame, ...]:
    """The current stack of another thread, innermost first (empty when the thread is gone)."""
    frame = sys._current_frames().get(thread_id)
    frames: list[StackFrame] = []
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        frames.append(StackFrame(code.co_filename, frame.f_lineno or 0, code.co_name,
                                 bool(code.co_flags & _COROUTINE_FLAGS)))
        frame = frame.f_back
    return tuple(frames)


def user_site(stack: Sequence[StackFrame]) -> StackFrame | None:
    """Where the user's code holds the loop.

    The innermost user ``async def`` frame (its line is the call into the blocking work: a model forward,
    ``time.sleep``), else the innermost frame in user code.
    """
    user = [frame for frame in stack if is_user_file(frame.file)]
    return next((frame for frame in user if frame.coroutine), user[0] if user else None)


class _Beat:
    """The callback posted into the loop: notes when it ran and on which thread."""

    __slots__ = ("monitor", "ran", "ran_at")

    def __init__(self, monitor: LoopLagMonitor) -> None:
        self.monitor = monitor
        self.ran = threading.Event()
        self.ran_at: float | None = None

    def __call__(self) -> None:
        self.ran_at = self.monitor.clock()
        self.monitor._loop_thread_id = threading.get_ident()
        self.ran.set()


class LoopLagMonitor:
    """Watches one event loop from a daemon thread (see the module docstring)."""

    def __init__(
        self,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        stall_threshold_s: float = DEFAULT_STALL_THRESHOLD_S,
        sample_interval_s: float | None = None,
        probe_s: float | None = DEFAULT_PROBE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Configure; nothing runs until :meth:`start`.

        Args:
            interval_s: period of the posted callbacks.
            stall_threshold_s: lag that marks a stall.
            sample_interval_s: stack sampling period during a stall (default: a quarter of the threshold).
            probe_s: delay of the busy probe after each posted callback (None: no busy probes).
            clock: monotonic clock in seconds (shared by the watchdog and the loop callback).
        """
        if interval_s <= 0 or stall_threshold_s <= 0:
            raise ValueError("interval_s and stall_threshold_s must be positive")
        self.interval_s = interval_s
        self.stall_threshold_s = stall_threshold_s
        self.sample_interval_s = sample_interval_s or stall_threshold_s / 4
        self.probe_s = probe_s if probe_s is not None and 0 < probe_s < interval_s else None
        self.clock = clock
        self._probes = 0
        self._busy: list[BusySample] = []
        self._busy_count = 0
        self._lock = threading.Lock()
        self._lags_ms: collections.deque[float] = collections.deque(maxlen=MAX_LAG_SAMPLES)
        self._lag_max_ms: float | None = None
        self._beats = 0
        self._stalls: list[LoopStall] = []
        self._stall_count = 0
        self._blocked_s = 0.0
        self._started_at: float | None = None
        self._started_unix: float | None = None
        self._stopped_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None

    @property
    def running(self) -> bool:
        """True while the watchdog thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, loop: asyncio.AbstractEventLoop | None = None, *, thread_id: int | None = None) -> LoopLagMonitor:
        """Start watching ``loop`` (default: the running loop; then call this from inside it).

        ``thread_id`` is the loop's thread when known (else it is learnt from the first callback that runs).
        """
        if self.running:
            return self
        if loop is None:
            loop = asyncio.get_running_loop()
            thread_id = threading.get_ident()
        if thread_id is not None:
            self._loop_thread_id = thread_id
        self._loop = loop
        self._started_unix = time.time()
        self._stop.clear()
        self._started_at = self.clock()
        self._stopped_at = None
        self._thread = threading.Thread(target=self._watch, name="infradoctor-loop-lag", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> LoopLagEvidence:
        """Stop the watchdog (bounded wait) and return the evidence."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(1.0, 4 * self.interval_s))
        if self._started_at is not None and self._stopped_at is None:
            self._stopped_at = self.clock()
        return self.evidence()

    def evidence(self) -> LoopLagEvidence:
        """What was seen so far (the monitor may keep running)."""
        with self._lock:
            lags = sorted(self._lags_ms)
            end = self._stopped_at if self._stopped_at is not None else self.clock()
            observed = end - self._started_at if self._started_at is not None else 0.0
            return LoopLagEvidence(
                interval_s=self.interval_s,
                stall_threshold_s=self.stall_threshold_s,
                observed_s=observed,
                beats=self._beats,
                lag_p50_ms=quantile(lags, 0.50) if lags else None,
                lag_p99_ms=quantile(lags, 0.99) if lags else None,
                lag_max_ms=self._lag_max_ms,
                blocked_s=self._blocked_s,
                stall_count=self._stall_count,
                stalls=tuple(self._stalls),
                pid=os.getpid(),
                started_unix=self._started_unix,
                probe_s=self.probe_s,
                probes=self._probes,
                busy=tuple(self._busy),
                busy_count=self._busy_count,
            )

    def write_evidence(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`evidence` as JSON, atomically (a reader never sees half a file)."""
        target = Path(path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.evidence().to_dict()), encoding="utf-8")
        tmp.replace(target)

    # The watchdog thread.

    def _watch(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stop.is_set():
            if loop.is_closed():
                break
            beat = _Beat(self)
            sent = self.clock()
            try:
                loop.call_soon_threadsafe(beat)
            except RuntimeError:  # the loop was closed between the check and the call
                break
            # Two wake-ups per period while the loop keeps up (each costs the loop a GIL hand-off): a busy probe
            # shortly after posting, then the rest of the period; only a late callback is waited for.
            wait_s = self.interval_s
            if self.probe_s is not None:
                self._probe(beat, sent)
                wait_s = max(0.0, self.interval_s - (self.clock() - sent))
            stopping = self._stop.wait(wait_s)
            if beat.ran_at is None and not stopping:
                remaining = sent + self.stall_threshold_s - self.clock()
                if remaining <= 0 or not beat.ran.wait(remaining):
                    self._sample_stall(loop, beat, sent)
            if beat.ran_at is not None:
                self._record(sent, beat.ran_at)
        if self._stopped_at is None and self._started_at is not None:
            self._stopped_at = self.clock()

    def _probe(self, beat: _Beat, sent: float) -> None:
        """One busy probe: if the posted callback has not run after ``probe_s``, note what the loop is running."""
        assert self.probe_s is not None
        ran = beat.ran.wait(self.probe_s)
        thread_id = self._loop_thread_id
        with self._lock:
            self._probes += 1
        if ran or thread_id is None:
            return
        site = user_site(capture_stack(thread_id))
        with self._lock:
            self._busy_count += 1
            if len(self._busy) < MAX_BUSY_SAMPLES:
                self._busy.append(BusySample(sent - (self._started_at or sent), site))

    def _sample_stall(self, loop: asyncio.AbstractEventLoop, beat: _Beat, sent: float) -> None:
        """Sample the loop thread's stack until the posted callback runs, then record the stall."""
        counts: collections.Counter[StackFrame | None] = collections.Counter()
        example: dict[StackFrame | None, tuple[StackFrame, ...]] = {}
        samples = 0
        ran = beat.ran
        while not ran.is_set() and not self._stop.is_set():
            thread_id = self._loop_thread_id
            if thread_id is not None:
                stack = capture_stack(thread_id)
                site = user_site(stack)
                counts[site] += 1
                example.setdefault(site, stack)
                samples += 1
            if ran.wait(self.sample_interval_s):
                break
            if not loop.is_running():
                break
        if beat.ran_at is None:
            return
        duration = beat.ran_at - sent
        with_site = [(n, s) for s, n in counts.items() if s is not None]
        site = max(with_site, key=lambda item: item[0])[1] if with_site else None
        stall = LoopStall(
            started_s=sent - (self._started_at or sent),
            duration_s=duration,
            site=site,
            stack=example.get(site, ()),
            samples=samples,
        )
        with self._lock:
            self._stall_count += 1
            self._blocked_s += duration
            if len(self._stalls) < MAX_STALLS:
                self._stalls.append(stall)

    def _record(self, sent: float, ran: float) -> None:
        lag_ms = max(0.0, (ran - sent) * 1000.0)
        with self._lock:
            self._beats += 1
            self._lags_ms.append(lag_ms)
            if self._lag_max_ms is None or lag_ms > self._lag_max_ms:
                self._lag_max_ms = lag_ms
