"""The library entry of ``infradoctor node``: :func:`run` (a :class:`~.snapshot.NodeRequest` in, a result out).

No printing, no argv, no exit: the CLI turns argv into a request, calls :func:`run`, and renders what comes back.
A watch reports each sample through ``on_sample`` (the CLI's live view); Ctrl-C ends a watch early and still gives
a result. Input files the user named are checked before anything is measured: one that cannot be read, or holds
no GPU evidence at all, is a :class:`~infradoctor.errors.TargetError` (exit 3), with nothing probed and nothing
stored.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from infradoctor.errors import TargetError, UsageError
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.gpu import GpuBackend, GpuProbe
from infradoctor.node.gpu.none import NoGpuBackend
from infradoctor.node.gpu.nvml import record_live_nvml
from infradoctor.node.snapshot import NodeRequest, build_result, collect_evidence, open_backend
from infradoctor.node.watch import (
    MIN_INTERVAL_S,
    NodeSampler,
    WatchSample,
    distributions,
    gpu_windows,
    summarize,
    watch,
    write_record_line,
)
from infradoctor.result import Result, utc_now_iso

SampleCallback = Callable[[WatchSample, Sequence[WatchSample]], None]
"""Called with each watch sample and all samples so far."""


def check_request(request: NodeRequest) -> None:
    """Refuse contradictory options and input files that cannot be opened, before anything is measured."""
    if request.smi_xml is not None and request.nvml_record is not None:
        raise UsageError("give either --smi-xml or --nvml-record, not both")
    if request.interval_s < MIN_INTERVAL_S:
        raise UsageError(f"--interval must be at least {MIN_INTERVAL_S} s")
    if request.duration_s is not None and request.duration_s < 0:
        raise UsageError("--duration must not be negative")
    if not request.watch and (request.record is not None or request.duration_s is not None):
        raise UsageError("--record and --duration need --watch")
    for option, path in (("--smi-xml", request.smi_xml), ("--nvml-record", request.nvml_record),
                         ("--kernel-log", request.kernel_log)):
        if path is not None:
            _readable(option, path)


def _readable(option: str, path: Path) -> None:
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise TargetError(f"cannot read {option} {path}: {exc.strerror or exc}") from None


def _recorded_probe(request: NodeRequest) -> GpuProbe | None:
    """The GPU evidence of a recorded file, read first; a file that holds none is refused.

    An NVML record of a machine where NVML failed is evidence (of that failure); a record that is not one, or an
    nvidia-smi report with no GPU in it, is not.
    """
    if not request.recorded:
        return None
    option = "--smi-xml" if request.smi_xml is not None else "--nvml-record"
    backend, _ = open_backend(request)
    if isinstance(backend, NoGpuBackend):  # the record could not be used at all
        raise TargetError(f"{option}: {backend.reason}")
    try:
        probe = backend.probe()
    finally:
        backend.close()
    if request.smi_xml is not None and not probe.snapshot.available:
        raise TargetError(f"{option}: {probe.snapshot.source}")
    return probe


def run(
    request: NodeRequest,
    *,
    on_sample: SampleCallback | None = None,
    backend: GpuBackend | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Result:
    """Probe (or read the recorded evidence), watch if asked, run the rules; the result of ``infradoctor node``.

    ``backend`` replaces the GPU backend the request names (a test's, or a caller's own); ``sleep`` and ``clock``
    drive the watch.
    """
    check_request(request)
    started_at = utc_now_iso()
    start = time.perf_counter()
    probe = _recorded_probe(request) if backend is None else None
    if request.save_nvml_record is not None:
        try:
            record_live_nvml(request.save_nvml_record)
        except OSError as exc:
            raise UsageError(f"cannot write --save-nvml-record {request.save_nvml_record}: {exc}") from exc
    if not request.watch:
        evidence = collect_evidence(request, backend=backend, probe=probe, sleep=sleep)
        return build_result(request, evidence, started_at=started_at, duration_s=time.perf_counter() - start)
    evidence, samples = _watch(request, backend, probe, on_sample, sleep, clock)
    return build_result(request, evidence, started_at=started_at, duration_s=time.perf_counter() - start,
                        distributions=distributions(samples))


def _watch(
    request: NodeRequest,
    given: GpuBackend | None,
    probe: GpuProbe | None,
    on_sample: SampleCallback | None,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> tuple[NodeEvidence, list[WatchSample]]:
    backend, selection_notes = (given, ()) if given is not None else open_backend(request)
    sampler = NodeSampler(backend)
    samples: list[WatchSample] = []
    interrupted = False
    record: TextIO | None = None
    try:
        if request.record is not None:
            try:
                record = request.record.open("w", encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write --record {request.record}: {exc.strerror or exc}") from exc
        try:
            for sample in watch(sampler, interval_s=request.interval_s, duration_s=request.duration_s, clock=clock,
                                sleep=sleep, wall_clock=utc_now_iso):
                if record is not None:  # written before it counts, so the file holds every sample
                    write_record_line(record, sample)
                samples.append(sample)
                if on_sample is not None:
                    on_sample(sample, samples)
        except KeyboardInterrupt:
            interrupted = True
        summary = summarize(samples, interval_s=request.interval_s, interrupted=interrupted)
        evidence = collect_evidence(request, backend=backend, probe=probe, watch=summary, sleep=sleep)
    finally:
        if record is not None:
            record.close()
        backend.close()
    windows = gpu_windows(samples)
    if windows:
        devices = tuple(dataclasses.replace(d, window=windows.get(d.index, d.window)) for d in evidence.gpu.devices)
        evidence = dataclasses.replace(evidence, gpu=dataclasses.replace(evidence.gpu, devices=devices))
    if selection_notes:
        evidence = dataclasses.replace(evidence, notes=(*selection_notes, *evidence.notes))
    return evidence, samples
