"""The registry: the frozen records that `generated/registry.py` is made of (the contract between
generation and the call side), and loading a generated registry with its expressions parsed."""
