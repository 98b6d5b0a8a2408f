"""P007 memory-growth: memory grows steadily, step after step.

What it detects:
    Live memory (CUDA allocator on GPU; glibc heap, which holds CPU tensor storage, otherwise) that rises linearly
    over the steady-state steps, and the line whose tensors are kept alive.

    The commonest leak in evaluation code is read directly: outputs of a model called in grad mode whose autograd
    graphs no backward uses and that stay alive across later calls (``outputs.append(model(x))``,
    ``total += loss`` without ``no_grad``) hold every batch's activations until the loop ends, a rise the step
    trend misses because it is freed after each evaluation.

Why it matters:
    Steady growth ends in an out-of-memory crash or swapping; the usual cause is a list that keeps tensors with
    their autograd graph (``losses.append(loss)``, ``outputs.append(model(x))``), which holds every step's
    activations.

How it is measured:
    Per step (at most 20 reads/s) ``/proc/self/statm`` and glibc ``mallinfo2`` (or
    ``torch.cuda.memory_allocated``) are read; a least-squares line is fitted over steady steps. Fires when the
    slope is at least ``MIN_SLOPE_BYTES`` per step, the fitted growth at least ``MIN_GROWTH_BYTES`` and the fit
    ``MIN_R2``, and the growth is at least ``MIN_GROWTH_FRACTION`` of what the program's data took at the first
    steady reading, in the trend's own measure (CUDA allocator or heap; RSS only where neither was read, since it
    also counts the ~500 MB of library pages a CUDA build of torch keeps resident): a server that builds a model
    per request moves its heap around by a few KB per request without a leak. The growth must also go on: the
    line through the later half of the readings must rise at least ``LATE_SLOPE_SHARE`` as fast as the whole line
    (growth that levels off is caches and the allocator warming up, not a leak). The leak site, two ways: once
    the heap has risen by 2 MB over 5 readings, one step's tensor
    allocations are followed (a TorchDispatchMode with a weak-reference finalizer per allocation of at least
    4 KB, noting the user line), paused so that it takes at most 2% of run time; the line whose sampled
    allocations stay alive (``RETAINED_SHARE``, at least ``MIN_RETAINED_BYTES``) is the leak site. Failing that,
    outputs of top-level model calls sampled every 50 ms: a call site whose outputs stay alive.

    The readings must also rise at ``RISING_SHARE`` of the steps (a staircase of a few jumps is the allocator
    taking new arenas, not a leak).

    Kept graphs: each grad-mode call marks its output's autograd nodes (see P003); a graph that no backward used
    and that outlived at least 3 later calls from its line was kept. Fires for a call site with ``MIN_KEPT_GRAPHS``
    such graphs (and ``KEPT_SHARE`` of its unused ones), at least ``MIN_KEPT_PEAK`` of them alive at once,
    when the memory they held at their peak (read at 8, 16, 32, ... alive) is at least ``MIN_HELD_BYTES`` (or
    could not be read). The line named is the one that keeps them: in the loop around the
    call, the first statement after it that accumulates a value derived from the call's result (a static read of
    the source; the call's line when none is found). High from ``HIGH_HELD_SHARE`` of the program's data (CUDA
    allocator or heap at the first steady reading).

Fix:
    Keep ``.detach().cpu()`` copies or ``.item()`` values instead of the tensors themselves, and run inference
    under ``torch.inference_mode()``.
"""

from __future__ import annotations

from collections.abc import Sequence

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import MEMORY_READINGS, ProfileAnalysis, memory_trend, warmup_count
from infradoctor.profile.evidence import StepRecord
from infradoctor.profile.keepline import keep_line
from infradoctor.profile.rules._common import RuleOptions, location, module_location, site_location, sites_of

RULE = Rule(
    "P007",
    "memory-growth",
    Severity.HIGH,
    "Memory grows every step",
    fix="Store .detach().cpu() or .item() of outputs/losses instead of tensors that keep their graph.",
    risk="Detached values can no longer be backpropagated through.",
    commands=("profile",),
)
MIN_SLOPE_BYTES = 32 * 1024
"""Growth per step at which the rule fires."""
MIN_GROWTH_BYTES = 8 * 1024 * 1024
"""Total fitted growth needed."""
MIN_R2 = 0.8
"""The growth must be steady (fit quality)."""
MIN_GROWTH_FRACTION = 0.10
"""The fitted growth must be at least this share of what the program's data took at the start (the trend's own
measure: CUDA allocator or heap; allocator noise is not growth)."""
LATE_SLOPE_SHARE = 0.5
"""The later half of the readings must grow at least this share of the overall slope."""
RETAINED_SHARE = 0.5
"""A call site is the leak site when at least this share of its sampled outputs stayed alive."""
MIN_RETAINED = 3
"""... and at least this many."""
MIN_RETAINED_BYTES = 64 * 1024
"""A sampled allocation site must keep at least this much alive."""


MIN_KEPT_GRAPHS = 10
"""Unused graphs kept across later calls at one call site."""
KEPT_SHARE = 0.25
"""... making at least this share of the site's unused graphs (a server's concurrent requests outlive each other's
calls now and then; a list that keeps every output keeps most of them)."""
MIN_KEPT_PEAK = 8
"""Kept graphs alive at once needed (fewer hold a bounded amount: not a growth)."""
RISING_SHARE = 0.5
"""Share of step-to-step changes of the fitted readings that must be rises: a leak grows at most steps; an
allocator that grabs a new arena now and then grows in a few jumps (a staircase) and is not a leak."""
MIN_HELD_BYTES = 8 * 1024 * 1024
"""Memory those graphs held at their peak."""
HIGH_HELD_SHARE = 0.25
"""Held memory, as a share of what the program's data took (CUDA allocator or heap), from which a kept-graph finding
is high."""


def process_size(analysis: ProfileAnalysis) -> int | None:
    """The process's RSS at the first steady reading (else at the start of the run)."""
    first = next((s.rss_bytes for s in analysis.steady if s.rss_bytes), None)
    return first or analysis.evidence.memory.get("first_rss") or None


def data_size(analysis: ProfileAnalysis, source: str | None = None) -> int | None:
    """What the program's data took at the first steady reading, in ``source``'s own measure.

    That is the CUDA allocator's bytes or the glibc heap that holds CPU tensors (without ``source``, the first of
    those that was read), else the RSS.

    RSS also counts the resident pages of loaded libraries: a CUDA build of torch holds ~500 MB of them even on a
    CPU-only run (757 against 251 MB for the CPU build at the same step), so growth judged against RSS went unseen
    with the build most users have.
    """
    for name in (source,) if source else ("cuda", "heap"):
        first = next((v for s in analysis.steady if (v := getattr(s, MEMORY_READINGS[name]))), None)
        if first:
            return int(first)
    return process_size(analysis)


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Graphs kept by the program, and steady memory growth with the site that keeps its tensors."""
    graph_findings = _kept_graphs(analysis, options)
    if graph_findings:
        return graph_findings
    trend = analysis.memory
    if trend is None or len(analysis.steady) < options.min_steps:
        return []
    if trend.slope_bytes_per_step < MIN_SLOPE_BYTES or trend.growth_bytes < MIN_GROWTH_BYTES or trend.r2 < MIN_R2:
        return []
    size = data_size(analysis, trend.source)
    if size is not None and trend.growth_bytes < MIN_GROWTH_FRACTION * size:
        return []
    fitted = analysis.steps[warmup_count(len(analysis.steps)):]  # the steps the trend was fitted over
    late = memory_trend(fitted[len(fitted) // 2:], analysis.evidence.cuda)
    if late is not None and late.source == trend.source \
            and late.slope_bytes_per_step < LATE_SLOPE_SHARE * trend.slope_bytes_per_step:
        return []
    if _rising_share(fitted, trend.source) < RISING_SHARE:
        return []  # a staircase of a few jumps: the allocator, not a leak
    alloc = [
        a for a in analysis.evidence.alloc_sites
        if int(a.get("alive_bytes") or 0) >= MIN_RETAINED_BYTES
        and int(a.get("alive") or 0) >= RETAINED_SHARE * int(a.get("sampled") or 1)
    ]
    top_alloc = max(alloc, key=lambda a: int(a.get("alive_bytes") or 0), default=None)
    kept = [
        m for m in analysis.evidence.modules
        if m.retained_alive >= MIN_RETAINED and m.retained_alive >= RETAINED_SHARE * m.retained_sampled
    ]
    leak = max(kept, key=lambda m: (m.params, m.retained_alive), default=None)
    evidence = {
        "growth_kb_per_step": round(trend.slope_bytes_per_step / 1024, 1),
        "growth_mb": round(trend.growth_bytes / 1e6, 2),
        "r2": round(trend.r2, 3),
        "source": trend.source,
        "readings": trend.readings,
        "steps": len(analysis.steady),
    }
    loc = None
    if top_alloc is not None:
        loc = location(str(top_alloc.get("file")), int(top_alloc.get("line") or 0), options)
        evidence |= {"sampled_allocations": top_alloc.get("sampled"), "still_alive": top_alloc.get("alive"),
                     "still_alive_mb": round(int(top_alloc.get("alive_bytes") or 0) / 1e6, 2)}
        site = f"tensors allocated at {loc} stay alive"
    elif leak is not None:
        loc = module_location(leak, options)
        evidence |= {"kept_outputs_of": leak.cls, "sampled_outputs": leak.retained_sampled,
                     "still_alive": leak.retained_alive}
        site = f"the outputs of {leak.cls} called at {loc} stay alive"
    else:
        site = "no single call site was identified"
    return [
        RULE.finding(
            f"Memory grows {trend.slope_bytes_per_step / 1024:.0f} KB per step "
            f"({trend.growth_bytes / 1e6:.1f} MB over {len(analysis.steady)} steps); {site}",
            evidence,
            fix=(f"The tensors made at {loc} are kept (with their autograd graph, if any): store "
                 "out.detach().cpu() or .item() instead, bound the list, and run inference under "
                 "torch.inference_mode()." if loc else None),
            location=loc,
            impact=None,
        )
    ]


def _kept_graphs(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Call sites whose unused autograd graphs the program keeps alive."""
    findings = []
    size = data_size(analysis) or analysis.evidence.peak_rss_bytes
    for module in analysis.evidence.modules:
        for site in sites_of(module):
            held = site.kept_held_bytes
            if site.kept_graphs < max(MIN_KEPT_GRAPHS, KEPT_SHARE * site.unused_grad_calls):
                continue
            if site.kept_peak < MIN_KEPT_PEAK or (held is not None and held < MIN_HELD_BYTES):
                continue
            call = site_location(site, options)
            line = keep_line(analysis.evidence.source_path(site.file), site.line) if site.file else None
            loc = location(site.file, line, options, site.function or None) if line else call
            held_text = f", {held / 1e6:.0f} MB at their peak" if held is not None else ""
            kept_at = f"; kept at {loc}" if line else ""
            high = held is not None and size is not None and held >= HIGH_HELD_SHARE * size
            findings.append(
                RULE.finding(
                    f"{site.kept_graphs} outputs of {module.cls} called at {call} stay alive with their autograd "
                    f"graph and no backward (up to {site.kept_peak} at once{held_text}){kept_at}",
                    {
                        "kept_graphs": site.kept_graphs,
                        "calls": site.calls,
                        "kept_peak": site.kept_peak,
                        "kept_span_calls": site.kept_span_calls,
                        "held_mb": round(held / 1e6, 1) if held is not None else None,
                        "call_site": str(call) if call else None,
                        "process_mb": round(size / 1e6, 1) if size else None,
                    },
                    severity=Severity.HIGH if high else Severity.MEDIUM,
                    fix=(f"At {loc}: keep `.detach()` copies or `.item()` values instead of the outputs with their "
                         f"graph, and run the inference at {call} under `torch.inference_mode()`."),
                    location=loc,
                    impact=None,
                )
            )
    return findings


def _rising_share(steps: Sequence[StepRecord], source: str) -> float:
    """Share of changes between consecutive memory readings that are rises (1.0 without enough readings)."""
    attr = MEMORY_READINGS[source]
    points = [(s.index, v) for s in steps if (v := getattr(s, attr)) is not None]
    if len(points) < 5:
        return 1.0
    pairs = list(zip(points, points[1:], strict=False))
    total = points[-1][1] - points[0][1]
    per_step = total / max(1, points[-1][0] - points[0][0])
    # a rise counts when it is at least a quarter of what steady growth would add over those steps
    rises = sum(1 for (i, a), (j, b) in pairs if b - a > 0 and b - a >= 0.25 * per_step * (j - i))
    return rises / len(pairs)
