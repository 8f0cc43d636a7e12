"""Stage 1, spec loading and checking: YAML text → the typed spec model, with every problem
located at file:line:col (structure, names, guards, templates, coverage, ambiguity)."""
