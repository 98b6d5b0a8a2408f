"""Rules over service evidence: one module per rule (S002 event-loop-blocked, S004 model-copy-per-worker)."""
