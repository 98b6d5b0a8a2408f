"""N012 gpu-not-visible: this machine should have a GPU, but none can be seen.

What it detects:
    A GPU that should be usable is not. From ``infradoctor node``: signs that a GPU is expected
    (``CUDA_VISIBLE_DEVICES`` set to devices, ``/dev/nvidia[0-9]*`` device nodes, the ``nvidia`` kernel module
    loaded) while neither NVML nor nvidia-smi shows any GPU; GPUs the driver counts but cannot open (NVML "GPU is
    lost" and similar), one finding each; and a report that lists fewer GPUs than the driver says are attached
    (nvidia-smi's ``attached_gpus``), at ``medium``: the missing ones could not be read. From logs
    (``infradoctor logs``): the NVIDIA driver failing to initialise a GPU (``RmInitAdapter failed``,
    ``rm_init_adapter failed``) in a kernel log, one finding for all of them with the GPUs named.

Why it matters:
    Work that should run on the GPU silently falls back to the CPU (100x slower) or fails at start-up with "no CUDA
    GPUs are available", and the node reports fewer GPUs than it has. Typical causes: a container started without
    the GPU runtime or device mounts, a driver / library version mismatch after an upgrade, a GPU that fell off the
    bus (see N001, Xid 79) or that the driver cannot initialise.

How it is measured:
    The GPU probe's result (NVML, then nvidia-smi) against the signs above. Recorded evidence (``--smi-xml``,
    ``--nvml-record``) is judged the same way.

    From logs (`infradoctor logs`): the signature catalog's ``gpu_init_failed`` lines merged into incidents per GPU.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor node``'s GPU probe or its recording) or ``logs``.

    The GPU probe and the kernel log see different things (what the driver lists, what it failed to start), so they
    share no number. From the probe: ``gpu``, ``reason`` and ``backend`` (a GPU that cannot be opened);
    ``attached_gpus``, ``listed_gpus``, ``backend``, ``gpu_source`` (GPUs missing from the report);
    ``expected_because``, ``backend``, ``probe_result``, ``cuda_visible_devices``, ``device_nodes``,
    ``driver_loaded``, ``driver_version`` (none visible). From logs: the incidents' summary: ``kinds``, ``count``
    (log lines), ``failures``, ``incidents``, ``files``, ``subjects`` (the GPUs), ``first``, ``last``, ``windows``,
    ``example``.

Fix:
    Run ``nvidia-smi``: "NVML: Driver/library version mismatch" -> reboot or reload the driver; "No devices were
    found" -> check the kernel log for Xid 79 and the PCI bus (``lspci | grep -i nvidia``). In containers, start
    with the NVIDIA runtime (``--gpus all`` / the device plugin) and check ``CUDA_VISIBLE_DEVICES``. A GPU that
    fails to initialise: reset it or reboot, check driver/firmware versions and its power; drain the node and RMA
    the GPU if it keeps failing.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import NodeOptions

RULE = Rule(
    "N012",
    "gpu-not-visible",
    Severity.HIGH,
    "A GPU is expected but not visible",
    fix="Check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES, container runtime device mounts.",
    risk="None.",
    commands=("node", "logs"),
)


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding when a GPU is expected and none is visible, and one per GPU the driver cannot open."""
    findings = [
        RULE.finding(
            f"GPU {d.index} is counted by the driver but cannot be opened: {d.unavailable['device']}",
            {"source": "probe", "gpu": d.index, "reason": d.unavailable["device"], "backend": evidence.gpu.backend},
            location=Location(file=f"GPU {d.index}"),
        )
        for d in evidence.gpu.devices
        if "device" in d.unavailable
    ]
    attached = evidence.gpu.attached_gpus
    listed = len(evidence.gpu.devices)
    if evidence.gpu.available and attached is not None and attached > listed:
        findings.append(RULE.finding(
            f"The driver counts {attached} GPUs but the report lists {listed}: {attached - listed} could not be read",
            {"source": "probe", "attached_gpus": attached, "listed_gpus": listed, "backend": evidence.gpu.backend,
             "gpu_source": evidence.gpu.source},
            severity=Severity.MEDIUM,
            location=Location(file=evidence.gpu.source),
        ))
    reasons = evidence.expectation.reasons
    if not reasons or (evidence.gpu.available and evidence.gpu.devices):
        return findings
    why_not = evidence.gpu.source if not evidence.gpu.available else "the driver lists no GPUs"
    return [
        *findings,
        RULE.finding(
            f"GPU expected ({'; '.join(reasons)}) but none visible: {why_not}",
            {
                "source": "probe",
                "expected_because": list(reasons),
                "backend": evidence.gpu.backend,
                "probe_result": why_not,
                "cuda_visible_devices": evidence.expectation.cuda_visible_devices,
                "device_nodes": list(evidence.expectation.device_nodes),
                "driver_loaded": evidence.expectation.driver_loaded,
                "driver_version": evidence.expectation.driver_version_file,
            },
        )
    ]


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every GPU-initialisation failure of the kernel log."""
    return signature_findings(evidence, RULE, ("gpu_init_failed",), "GPU failed to initialise")
