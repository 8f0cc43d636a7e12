"""The spec linter: every check of loading and emission, plus rendering, freshness and an
optional compile, reported as located findings with rule ids (text, JSON, GitHub annotations)."""
