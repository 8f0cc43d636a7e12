"""Compile-time parameters of kernel instances: the search space a variant's tunables and
constraints span (pruned by the device's limits), device fingerprints, the per-device tuning
database, and the lookup that says which parameters a call gets and where they came from."""
