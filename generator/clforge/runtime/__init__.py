"""The runtime: one OpenCL context and queue, the program cache (memory and disk), the buffer
pool, and the one launch path (a launch plan, bound and enqueued)."""
