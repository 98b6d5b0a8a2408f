"""Rules that only ``infradoctor logs`` emits today: S014 model-server-failure.

Why here and not with its group (``serve/rules`` or ``load/rules``): a rule module imports the evidence it judges,
and S014 judges :class:`~infradoctor.logs.evidence.LogsEvidence` alone, so it lives in the package that owns it and
adds no import edge between packages. When ``fleet`` or ``telemetry`` add a check from Prometheus evidence
(model-server health), it goes into the same module (one code, one module): ``logs`` then imports that evidence,
which stays cycle-free as long as those packages do not import ``logs``. (N014 container-restarts, which fleet
emits from kube-state-metrics, lives in ``node/rules``; its logs check is there.)
"""
