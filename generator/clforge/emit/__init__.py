"""Stage 2, expansion and emission: spec models → kernel instances → OpenCL C (rendered from
templates/), the registry and eager-ops modules and the operator table, written atomically."""
