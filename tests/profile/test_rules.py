"""Each profile rule on hand-built evidence: fires at its threshold, stays quiet below it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infradoctor.findings import Severity, catalog, run_rules
from infradoctor.profile.analyze import ProfileAnalysis, analyze
from infradoctor.profile.evidence import SystemSample
from infradoctor.profile.rules import RuleOptions

from .builders import Construction, LoadEvent, SyncSite, evidence, loader, module, steps

OPTS = RuleOptions(cwd="/work/app")


def codes(ev) -> list[str]:
    return [f.code for f in run_rules(analyze(ev), OPTS)]


def only(code: str, ev):
    found = [f for f in run_rules(analyze(ev), OPTS) if f.code == code]
    assert len(found) <= 1
    return found[0] if found else None


def test_every_profile_code_has_exactly_one_rule_module() -> None:
    codes = sorted(code for code, rule in catalog().items() if any(c.evidence is ProfileAnalysis for c in rule.checks))
    assert codes == ["N011", *(f"P{i:03d}" for i in range(1, 16))]
    assert all(catalog()[code].module.startswith("infradoctor.profile.rules.") for code in codes)


def test_healthy_training_has_no_findings() -> None:
    assert codes(evidence()) == []


def test_p001_data_starvation_threshold_severity_and_concrete_fix() -> None:
    starving = evidence(steps=steps(100, data_wait_s=0.006, forward_s=0.002, backward_s=0.001),
                        dataloaders=(loader(wait_s=0.6),), fetch={"calls": 100, "items": 3200, "time_s": 0.58})
    finding = only("P001", starving)
    assert finding is not None and finding.severity is Severity.HIGH
    assert finding.evidence["data_wait_fraction"] == pytest.approx(0.6)
    assert str(finding.location) == "train.py:30"
    assert "num_workers=1 (now 0; this machine has 2 cores)" in finding.fix and "ImageFiles.__getitem__" in finding.fix
    assert "pin_memory" not in finding.fix  # no GPU in use: pinned memory only speeds host-to-device copies
    assert finding.impact == pytest.approx(0.6)
    medium = only("P001", evidence(steps=steps(100, data_wait_s=0.0035, forward_s=0.006)))
    assert medium is not None and medium.severity is Severity.MEDIUM
    assert only("P001", evidence(steps=steps(100, data_wait_s=0.0025, forward_s=0.007))) is None


def test_p001_waiting_items_get_enough_workers_to_keep_ahead_of_compute() -> None:
    """Items that sleep on I/O overlap in workers: as many as a batch's fetch time over a step's compute, +50%."""
    # a step: 39 ms waiting for a batch of 64 items that take 0.61 ms each (93% off the CPU), 8 ms computing
    waiting = evidence(steps=steps(100, duration=0.047, data_wait_s=0.039, forward_s=0.008),
                       dataloaders=(loader(wait_s=3.9, batch_size=64, dataset="DecodedRecords"),),
                       fetch={"calls": 100, "items": 6400, "time_s": 3.9, "cpu_s": 0.27})
    finding = only("P001", waiting)
    assert finding is not None
    # 64 x 0.61 ms = 39 ms per batch over 8 ms of compute: 4.9 workers keep up, 1.5x that is 8 (not the 4 of a
    # fixed rule, which left the demo's loop still waiting 35% of each step)
    assert "num_workers=8 (now 0; items spend 93% of their time waiting" in finding.fix, finding.fix
    assert "a batch takes 39.0 ms to fetch and a step 8.0 ms to compute" in finding.fix
    slow_compute = replace(waiting, steps=steps(100, duration=0.079, data_wait_s=0.039, forward_s=0.040))
    finding = only("P001", slow_compute)
    assert finding is not None and "num_workers=2 (now 0;" in finding.fix  # 1.5 x 39 / 40: two are plenty
    cpu_bound = replace(waiting, fetch={"calls": 100, "items": 6400, "time_s": 3.9, "cpu_s": 3.8})
    finding = only("P001", cpu_bound)
    assert finding is not None and "num_workers=1 (now 0; this machine has 2 cores)" in finding.fix


def test_p002_unbatched_inference_needs_batch1_calls_without_backward() -> None:
    per_sample = module(calls=500, batch_sizes={"1": 500}, grad_calls=0, train_mode_calls=0, time_s=2.0)
    ev = evidence(modules=(per_sample,), backward_calls=0, optimizer_steps=0, step_mode="forward",
                  steps=steps(500, duration=0.005, forward_s=0.004))
    finding = only("P002", ev)
    assert finding is not None and finding.evidence["batch1_calls"] == 500
    assert finding.impact == pytest.approx(0.8)
    # a training run does not hide batch-1 inference at another line; training calls themselves are not inference
    training = replace(per_sample, grad_calls=500, unused_grad_calls=0)
    assert only("P002", replace(ev, backward_calls=500, modules=(training,))) is None
    assert only("P002", replace(ev, modules=(replace(per_sample, batch_sizes={"1": 300, "64": 200}),))) is None


def test_p003_grad_in_inference_counts_unused_grad_calls() -> None:
    ev = evidence(modules=(module(unused_grad_calls=100, train_mode_calls=0),), backward_calls=0,
                  optimizer_steps=0, step_mode="dataloader")
    finding = only("P003", ev)
    assert finding is not None and finding.evidence["unused_grad_calls"] == 100
    assert "inference_mode" in finding.fix and str(finding.location) == "train.py:42"
    assert only("P003", evidence(modules=(module(unused_grad_calls=9),))) is None
    frozen = module(unused_grad_calls=100, trainable=False)
    assert only("P003", evidence(modules=(frozen,))) is None


def test_p004_train_mode_inference_needs_mode_dependent_layers() -> None:
    bn = module(mode_layers=("BatchNorm1d", "Dropout"), grad_calls=0, train_mode_inference_calls=100)
    finding = only("P004", evidence(modules=(bn,), backward_calls=0))
    assert finding is not None and "BatchNorm1d" in finding.title
    plain = module(mode_layers=(), grad_calls=0, train_mode_inference_calls=100)
    assert only("P004", evidence(modules=(plain,), backward_calls=0)) is None


def test_p005_host_sync_per_step_and_gpu_share() -> None:
    site = SyncSite("item", "/work/app/eval.py", 19, "<module>", calls=51200, time_s=0.05, span_s=0.6,
                    elements=0, steps=100)
    finding = only("P005", evidence(syncs=(site,), cuda=True, cuda_used=True))
    assert finding is not None and finding.evidence["calls_per_step"] == pytest.approx(512)
    assert str(finding.location) == "eval.py:19" and finding.severity is Severity.HIGH
    logging = replace(site, calls=100, span_s=0.0001, time_s=0.0001)
    assert only("P005", evidence(syncs=(logging,), cuda=True, cuda_used=True)) is None
    gpu = evidence(cuda=True, cuda_used=True, syncs=(logging,), steps=steps(100, forward_s=0.005, sync_s=0.002))
    assert only("P005", gpu) is not None


def test_p005_is_silent_without_a_device_in_use() -> None:
    # on the CPU a host read waits for nothing: a per-element .item() loop is slow Python, not a device sync
    site = SyncSite("item", "/work/app/eval.py", 19, "<module>", calls=51200, time_s=0.05, span_s=0.6,
                    elements=0, steps=100)
    cpu_only = evidence(syncs=(site,), modules=(module(device="cpu"),), cuda=False, cuda_used=False)
    assert only("P005", cpu_only) is None
    available_not_used = replace(cpu_only, cuda=True)
    assert only("P005", available_not_used) is None


SERVING = RuleOptions(cwd="/work/app", serving=True, requests=644)


def serving_only(code: str, ev):
    found = [f for f in run_rules(analyze(ev), SERVING) if f.code == code]
    return found[0] if found else None


def test_p005_serving_counts_per_request_and_one_read_per_response_is_normal() -> None:
    # a handler that builds its JSON with .tolist(): one read per request, no training steps at all
    response = SyncSite("tolist", "/work/app/serve.py", 35, "predict", calls=644, time_s=0.005, span_s=0.005,
                        elements=0, steps=0)
    idle = evidence(steps=(), step_mode=None, modules=(module(calls=644, device="cuda"),), backward_calls=0,
                    optimizer_steps=0, syncs=(response,), cuda=True, cuda_used=True)
    assert serving_only("P005", idle) is None
    assert serving_only("P005", replace(idle, modules=())) is None  # requests alone are the denominator
    twice = replace(response, calls=2 * 644)
    assert serving_only("P005", replace(idle, syncs=(twice,))) is None
    per_element = replace(response, kind="item", calls=64 * 644, span_s=2.0)
    finding = serving_only("P005", replace(idle, syncs=(per_element,)))
    assert finding is not None and finding.evidence["calls_per_request"] == pytest.approx(64)
    assert "per request" in finding.title


def test_p013_serving_idle_time_between_requests_is_not_other_python() -> None:
    # forward-bounded steps of 10 ms with 1 ms of model work: the rest is waiting for the next request
    ev = evidence(steps=steps(100, forward_s=0.001), step_mode="forward", backward_calls=0, optimizer_steps=0)
    assert only("P013", ev) is not None  # a batch job: Python outside the model
    assert serving_only("P013", ev) is None
    syncing = evidence(steps=steps(100, forward_s=0.001, sync_s=0.002), step_mode="forward")
    finding = serving_only("P013", syncing)
    assert finding is not None and finding.evidence["stage"] == "sync"
    assert finding.evidence["ms_per_step"] == pytest.approx(2.0)


def _with_memory(records, rss: int, heap: int):
    """The steps with their RSS and heap readings moved to start at ``rss`` and ``heap`` (growth kept)."""
    return tuple(replace(s, rss_bytes=rss + s.rss_bytes - 300_000_000, heap_bytes=heap + s.heap_bytes - 50_000_000)
                 for s in records)


def test_p007_growth_small_next_to_the_programs_data_is_not_reported() -> None:
    # 100 KB per step over 100 steps (10 MB, a perfect line) next to a 300 MB heap: allocator noise, not a leak
    small = evidence(steps=_with_memory(steps(100, forward_s=0.008, heap_growth=100 * 1024), 600_000_000,
                                        300_000_000))
    assert only("P007", small) is None
    big = evidence(steps=_with_memory(steps(100, forward_s=0.008, heap_growth=400 * 1024), 600_000_000,
                                      300_000_000))
    assert only("P007", big) is not None


def test_p007_judges_growth_against_the_heap_not_the_rss_of_a_cuda_build() -> None:
    """torch's CUDA build keeps ~500 MB of library pages resident even on a CPU-only run: the same 240 KB per step
    kept in a list (68 MB over the run) was found with the CPU build (RSS 251 MB) and missed with the CUDA build
    (RSS 757 MB), against a heap of 137 MB in both (tests/profile/test_memory.py's embeddings, Python 3.10)."""
    records = steps(300, forward_s=0.008, heap_growth=240 * 1024)
    cpu_build = evidence(steps=_with_memory(records, 251_000_000, 137_000_000))
    cuda_build = evidence(steps=_with_memory(records, 757_000_000, 137_000_000))
    assert only("P007", cpu_build) is not None
    finding = only("P007", cuda_build)
    assert finding is not None and finding.evidence["source"] == "heap"


def test_p007_growth_that_levels_off_is_not_a_leak() -> None:
    # 1 MB per step for 60 steps, then flat: r2 of the whole line is high, but the later half does not grow
    rising = steps(100, forward_s=0.008, heap_growth=1024 * 1024)
    plateau = tuple(replace(s, heap_bytes=min(s.heap_bytes or 0, rising[60].heap_bytes or 0),
                            rss_bytes=min(s.rss_bytes or 0, rising[60].rss_bytes or 0)) for s in rising)
    ev = evidence(steps=plateau)
    trend = analyze(ev).memory
    assert trend is not None and trend.r2 >= 0.8 and trend.growth_bytes > 30e6  # it would pass the other gates
    assert only("P007", ev) is None
    assert only("P007", evidence(steps=rising)) is not None


def test_n011_gpu_oom_from_the_exception_that_ended_the_run() -> None:
    crash = {"type": "OutOfMemoryError", "module": "torch", "message": "CUDA out of memory. Tried to allocate 20 MiB",
             "file": "/work/app/train.py", "line": 57, "function": "step"}
    finding = only("N011", evidence(exit_status=1, exception=crash))
    assert finding is not None and str(finding.location) == "train.py:57"
    assert finding.evidence["exception"] == "OutOfMemoryError" and finding.severity is Severity.HIGH
    by_message = dict(crash, type="RuntimeError", message="CUDA error: out of memory")
    assert only("N011", evidence(exit_status=1, exception=by_message)) is not None
    other = dict(crash, type="ValueError", message="bad shape")
    assert only("N011", evidence(exit_status=1, exception=other)) is None
    assert only("N011", evidence()) is None


def test_p006_repeated_loads_and_constructions() -> None:
    loads = (LoadEvent("torch.load", "/work/app/serve.py", 23, calls=40, time_s=0.4),)
    finding = only("P006", evidence(loads=loads))
    assert finding is not None and finding.evidence["load_time_ms"] == pytest.approx(400)
    assert finding.impact == pytest.approx(0.4) and str(finding.location) == "serve.py:23"
    builds = (Construction("/work/app/serve.py", 21, count=40, cls="Net", params=500_000),)
    assert only("P006", evidence(constructions=builds)) is not None
    once = (LoadEvent("torch.load", "/work/app/serve.py", 23, calls=1, time_s=0.4),)
    loss_fns = (Construction("/work/app/serve.py", 25, count=40, cls="CrossEntropyLoss", params=0),)
    assert only("P006", evidence(loads=once, constructions=loss_fns)) is None


def test_p007_memory_growth_with_leak_site() -> None:
    leaking = module(retained_sampled=20, retained_alive=20)
    ev = evidence(steps=steps(100, forward_s=0.008, heap_growth=512 * 1024), modules=(leaking,))
    finding = only("P007", ev)
    assert finding is not None and finding.evidence["growth_kb_per_step"] == pytest.approx(512, rel=0.01)
    assert finding.evidence["still_alive"] == 20 and str(finding.location) == "train.py:42"
    assert only("P007", evidence(steps=steps(100, forward_s=0.008, heap_growth=1024))) is None
    no_site = only("P007", replace(ev, modules=(module(retained_sampled=20, retained_alive=1),)))
    assert no_site is not None and no_site.location is None


def test_p008_cold_start() -> None:
    finding = only("P008", evidence(steps=steps(100, first=0.5, forward_s=0.008)))
    assert finding is not None and finding.evidence["ratio"] == pytest.approx(50)
    assert only("P008", evidence(steps=steps(100, first=0.03, forward_s=0.008))) is None


# What an A100 (compute capability 8.0) reports for the precision settings; hand-built, not recorded here.
A100_PRECISION = {"float32_matmul_precision": "highest", "allow_tf32": False, "bf16_supported": True,
                  "capability": [8, 0], "device_name": "NVIDIA A100-SXM4-80GB"}


def gpu_evidence(**kw):
    base = {"cuda": True, "precision": A100_PRECISION, "modules": (module(device="cuda"),),
            "steps": steps(100, forward_s=0.004, backward_s=0.004, optimizer_s=0.001, gpu_busy_s=0.008)}
    base.update(kw)
    return evidence(**base)


def test_p009_fp32_on_bf16_capable_gpu() -> None:
    finding = only("P009", gpu_evidence())
    assert finding is not None and "A100" in finding.title and "autocast" in finding.fix
    assert only("P009", gpu_evidence(modules=(module(device="cuda", autocast_calls=100),))) is None
    assert only("P009", gpu_evidence(precision={**A100_PRECISION, "allow_tf32": True})) is None
    assert only("P009", evidence()) is None


def test_p010_pageable_h2d() -> None:
    h2d = {"copies": 200, "bytes": 400_000_000, "pageable_copies": 200, "pageable_bytes": 400_000_000,
           "time_s": 0.3, "non_blocking_copies": 0, "pageable_sites": {"/work/app/train.py:47": 200}}
    ev = gpu_evidence(h2d=h2d, steps=steps(100, h2d_s=0.003, forward_s=0.004))
    finding = only("P010", ev)
    assert finding is not None and finding.evidence["pageable_copies"] == 200
    assert str(finding.location) == "train.py:47"
    assert "pin_memory=True in the DataLoader at train.py:30" in finding.fix and "at train.py:47" in finding.fix
    no_sites = only("P010", replace(ev, h2d={**h2d, "pageable_sites": {}}))
    assert no_sites is not None and str(no_sites.location) == "train.py:30"
    assert only("P010", replace(ev, h2d={**h2d, "pageable_copies": 10})) is None


def test_p011_dataloader_config() -> None:
    finding = only("P011", evidence(steps=steps(100, data_wait_s=0.0015, forward_s=0.008)))
    assert finding is not None and "num_workers=" in finding.fix and finding.severity is Severity.LOW
    restarting = loader(num_workers=4, iterators=3, batches=300, wait_s=3.3, first_batch_waits=(1.0, 1.0, 1.0))
    finding = only("P011", evidence(dataloaders=(restarting,)))
    assert finding is not None and "persistent_workers=True" in finding.fix
    assert only("P011", evidence()) is None


def test_p012_python_loop_over_tensor() -> None:
    site = SyncSite("iter", "/work/app/post.py", 7, "decode", calls=100, time_s=0.001, span_s=0.001,
                    elements=25600, steps=100)
    finding = only("P012", evidence(syncs=(site,)))
    assert finding is not None and finding.evidence["elements_per_step"] == pytest.approx(256)
    assert only("P012", evidence(syncs=(replace(site, elements=100),))) is None


def test_p013_slow_stage_other_python_not_explained_by_sync_loops() -> None:
    ev = evidence(steps=steps(100, forward_s=0.003))  # 7 ms of 10 ms outside the model
    finding = only("P013", ev)
    assert finding is not None and finding.evidence["stage"] == "other"
    loop = SyncSite("item", "/work/app/eval.py", 19, "<module>", calls=100, time_s=0.01, span_s=0.6,
                    elements=0, steps=100)
    assert only("P013", replace(ev, syncs=(loop,))) is None


def test_p014_gpu_underutilized_from_nvml_and_events() -> None:
    samples = tuple(SystemSample(t=100.0 + 0.1 * i, cpu_percent=(90.0,), process_cpu_percent=100.0,
                                 rss_bytes=1, gpu_util_percent=(20.0,)) for i in range(10))
    finding = only("P014", gpu_evidence(system=samples))
    assert finding is not None and finding.evidence["gpu_util_mean"] == pytest.approx(20.0)
    busy = tuple(replace(s, gpu_util_percent=(95.0,)) for s in samples)
    assert only("P014", gpu_evidence(system=busy)) is None
    idle_events = gpu_evidence(steps=steps(100, forward_s=0.004, gpu_busy_s=0.001))
    assert only("P014", idle_events) is not None


def test_p015_small_batch() -> None:
    finding = only("P015", evidence(modules=(module(batch_sizes={"4": 100}),)))
    assert finding is not None and finding.evidence["median_batch"] == 4
    assert only("P015", evidence(modules=(module(batch_sizes={"1": 100}),))) is None


def test_findings_rank_by_severity_then_impact() -> None:
    ev = evidence(steps=steps(100, data_wait_s=0.006, forward_s=0.002), loads=(
        LoadEvent("torch.load", "/work/app/train.py", 50, calls=10, time_s=0.1),))
    ranked = codes(ev)
    assert ranked[:2] == ["P001", "P006"]  # both high: data wait explains 60%, loads 10%


def test_p001_must_hold_across_the_run() -> None:
    # a spell of slow loading in one fifth of the run (background load) is not the run's bottleneck
    spell = steps(20, data_wait_s=0.009, forward_s=0.001) + steps(80, start=100.2, forward_s=0.008,
                                                                   data_wait_s=0.001)
    assert only("P001", evidence(steps=tuple(replace(s, index=i) for i, s in enumerate(spell)))) is None
    # over the threshold in 3 of 5 parts: said, at low, as uncertain
    mixed = steps(60, data_wait_s=0.006, forward_s=0.004) + steps(40, start=100.6, forward_s=0.008,
                                                                   data_wait_s=0.002)
    finding = only("P001", evidence(steps=tuple(replace(s, index=i) for i, s in enumerate(mixed))))
    assert finding is not None and finding.severity is Severity.LOW and "uncertain" in finding.title
    steady = only("P001", evidence(steps=steps(100, data_wait_s=0.006, forward_s=0.004)))
    assert steady is not None and steady.severity is Severity.HIGH and steady.evidence["parts_over_threshold"] == "5 of 5"
