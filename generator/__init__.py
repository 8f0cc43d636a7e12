"""clforge: YAML op specs → Jinja templates → OpenCL kernels, a registry and a dispatcher."""

__version__ = "0.1.0"
