"""Bundled sick workloads and their fixed versions, written the way users write them."""
