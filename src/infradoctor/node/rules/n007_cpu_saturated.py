"""N007 cpu-saturated: the CPU is busy all the time, or more tasks wait to run than there are cores.

What it detects:
    CPU utilisation of at least :data:`BUSY_PCT` percent over the measurement window (or, with ``--watch``, on
    average over the watch), or a 1-minute load average of at least :data:`LOAD_PER_CORE` times the usable cores.

Why it matters:
    A saturated host starves the GPU's feeders: data loading, tokenisation, the Python process that launches
    kernels, and the server's event loop all wait for a core. GPU utilisation drops while nothing on the GPU is
    wrong. Oversubscribed thread pools (each worker running as many threads as there are cores) are a common cause.

How it is measured:
    psutil CPU times over the snapshot window (whole machine and per core), ``os.getloadavg()`` against the cores
    this process may use (its affinity mask), and, under ``--watch``, the mean of the sampled utilisation. The
    busiest processes over the same window are listed as evidence. Severity ``high`` when both signs are present.

Fix:
    Find the busy processes (evidence). Limit threads per process (``OMP_NUM_THREADS``, ``torch.set_num_threads``,
    ``MKL_NUM_THREADS``) so that workers x threads <= cores, lower DataLoader ``num_workers`` if they fight for
    cores, or move CPU-heavy preprocessing elsewhere.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import NodeOptions

RULE = Rule(
    "N007",
    "cpu-saturated",
    Severity.MEDIUM,
    "CPU is saturated",
    fix="Find the busy processes; reduce threads (OMP_NUM_THREADS, torch.set_num_threads) or move work.",
    risk="None.",
    commands=("node",),
)

BUSY_PCT = 95.0
"""CPU utilisation (percent of all cores) at or above which the CPU counts as saturated."""
LOAD_PER_CORE = 2.0
"""1-minute load average per usable core at or above which the run queue counts as saturated."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """At most one finding for the host."""
    host = evidence.host
    if host is None:
        return []
    cpu = host.cpu
    utilization = cpu.utilization_pct
    source = "snapshot"
    watched = evidence.watch.metrics.get("cpu_util_pct") if evidence.watch is not None else None
    if watched is not None and watched.count >= 3:
        utilization, source = watched.mean, "watch mean"
    busy = utilization is not None and utilization >= options.threshold(RULE.code, "BUSY_PCT", BUSY_PCT)
    cores = max(1, cpu.usable_cores)
    load_per_core = cpu.load_1m / cores if cpu.load_1m is not None else None
    loaded = load_per_core is not None and load_per_core >= options.threshold(RULE.code, "LOAD_PER_CORE", LOAD_PER_CORE)
    if not (busy or loaded):
        return []
    parts = []
    if busy:
        parts.append(f"CPU {utilization:.0f}% busy ({source})")
    if loaded:
        parts.append(f"load {cpu.load_1m:.1f} on {cores} cores")
    return [
        RULE.finding(
            "CPU saturated: " + ", ".join(parts),
            {
                "utilization_pct": utilization,
                "utilization_source": source,
                "load_1m": cpu.load_1m,
                "usable_cores": cores,
                "load_per_core": round(load_per_core, 2) if load_per_core is not None else None,
                "iowait_pct": cpu.iowait_pct,
                "top_cpu": [{"pid": p.pid, "name": p.name, "cpu_pct": p.cpu_pct} for p in host.top_cpu],
            },
            severity=Severity.HIGH if busy and loaded else None,
        )
    ]
