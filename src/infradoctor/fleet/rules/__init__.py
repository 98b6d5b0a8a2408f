"""The fleet-only rules: one module per code (N013 gpu-straggler, N015 fleet-onset, N016 gpu-pods-pending)."""
