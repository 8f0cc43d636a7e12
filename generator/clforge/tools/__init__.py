"""The command-line tools: `clforge` (cli), the demo and the benchmarks."""
