"""N002 gpu-ecc: uncorrectable ECC errors, pending or failed row remaps, retired pages.

What it detects:
    Per GPU: uncorrectable ECC errors (volatile: since the driver loaded; aggregate: lifetime), a row remap or page
    retirement that waits for a GPU reset, a failed row remap, retired pages near the pre-Ampere limit, and a large
    number of corrected errors since the driver loaded.

Why it matters:
    An uncorrectable error kills (or silently corrupts) the work on that GPU. Ampere and later GPUs repair the
    memory by remapping a row, which takes effect only after a GPU reset: until then the bad row is still in use.
    A remap failure means the GPU has run out of spare rows and must be replaced. Pre-Ampere GPUs retire pages
    instead, up to a fixed limit.

How it is measured:
    NVML ``nvmlDeviceGetTotalEccErrors`` (volatile and aggregate, corrected and uncorrected),
    ``nvmlDeviceGetRemappedRows`` (pending, failure), ``nvmlDeviceGetRetiredPages`` and the pending status; or the
    same fields of ``nvidia-smi -q -x`` (``<ecc_errors>``, ``<remapped_rows>``, ``<retired_pages>``). Severity:
    ``critical`` for a remap failure or retired pages at :data:`RETIRED_PAGES_LIMIT`; ``high`` for uncorrectable
    errors since the driver loaded or a pending remap/retirement; ``medium`` for lifetime-only uncorrectable errors;
    ``low`` for more than :data:`CORRECTED_VOLATILE_WARN` corrected errors since the driver loaded.

Fix:
    Pending remap or retirement: drain the GPU and reset it (``nvidia-smi -r -i N``) or reboot. Remap failure, or
    retired pages at the limit: drain the node and RMA the GPU. Uncorrectable errors: restart the affected jobs
    from a checkpoint; if they recur on the same GPU, drain it.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import GpuDevice, NodeEvidence
from infradoctor.node.rules._common import NodeOptions, gpu_location

RULE = Rule(
    "N002",
    "gpu-ecc",
    Severity.HIGH,
    "GPU ECC errors or pending row remaps",
    fix="Pending remap: reset the GPU when idle. Remap failure or retired-page exhaustion: drain and RMA.",
    risk="Reset interrupts jobs on that GPU.",
    commands=("node",),
)

CORRECTED_VOLATILE_WARN = 1000
"""Corrected errors since the driver loaded above which a low-severity finding is raised."""
RETIRED_PAGES_LIMIT = 60
"""Retired pages (single + double bit) at which a pre-Ampere GPU is due for replacement (the hard limit is 64)."""


def _problems(device: GpuDevice, options: NodeOptions) -> tuple[Severity, list[str]] | None:
    ecc = device.ecc
    problems: list[tuple[Severity, str]] = []
    if device.remapped_rows_failure:
        problems.append((Severity.CRITICAL, "row remapping failed (no spare rows left)"))
    retired = (device.retired_pages_single_bit or 0) + (device.retired_pages_double_bit or 0)
    if retired >= options.threshold(RULE.code, "RETIRED_PAGES_LIMIT", RETIRED_PAGES_LIMIT):
        problems.append((Severity.CRITICAL, f"{retired} retired pages"))
    if device.remapped_rows_pending:
        problems.append((Severity.HIGH, "a row remap is pending (needs a GPU reset)"))
    if device.retired_pages_pending:
        problems.append((Severity.HIGH, "a page retirement is pending (needs a GPU reset)"))
    if ecc.volatile_uncorrected:
        problems.append((Severity.HIGH, f"{ecc.volatile_uncorrected} uncorrectable ECC errors since driver load"))
    elif ecc.aggregate_uncorrected:
        problems.append((Severity.MEDIUM, f"{ecc.aggregate_uncorrected} uncorrectable ECC errors (lifetime)"))
    if (ecc.volatile_corrected or 0) > options.threshold(RULE.code, "CORRECTED_VOLATILE_WARN", CORRECTED_VOLATILE_WARN):
        problems.append((Severity.LOW, f"{ecc.volatile_corrected} corrected ECC errors since driver load"))
    if not problems:
        return None
    worst = max((s for s, _ in problems), key=lambda s: s.rank)
    return worst, [text for _, text in problems]


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per GPU with ECC trouble."""
    findings = []
    for device in evidence.gpu.devices:
        found = _problems(device, options)
        if found is None:
            continue
        severity, problems = found
        ecc = device.ecc
        findings.append(
            RULE.finding(
            f"{device.label}: " + "; ".join(problems),
                {
                    "gpu": device.index,
                    "name": device.name,
                    "pci_bus_id": device.pci_bus_id,
                    "volatile_uncorrected": ecc.volatile_uncorrected,
                    "aggregate_uncorrected": ecc.aggregate_uncorrected,
                    "volatile_corrected": ecc.volatile_corrected,
                    "aggregate_corrected": ecc.aggregate_corrected,
                    "remapped_rows_pending": device.remapped_rows_pending,
                    "remapped_rows_failure": device.remapped_rows_failure,
                    "remapped_rows_uncorrectable": device.remapped_rows_uncorrectable,
                    "retired_pages_single_bit": device.retired_pages_single_bit,
                    "retired_pages_double_bit": device.retired_pages_double_bit,
                    "retired_pages_pending": device.retired_pages_pending,
                },
                severity=severity,
                location=gpu_location(device),
            )
        )
    return findings
