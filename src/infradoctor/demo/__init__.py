"""The demo: the whole method (baseline, diagnose, fix, measure again, report) on bundled sick workloads."""
