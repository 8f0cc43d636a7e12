"""The vocabulary every stage shares: element types, tensor layouts, device targets, checked
identifiers, the expression language of guards and launch sizes, located YAML, the diagnostics
collector, a tree's folders, and the atomic file writer. Nothing here imports another stage."""
