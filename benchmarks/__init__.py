"""trainwatch's benchmarks, run from the repository root: ``python -m benchmarks.<name>``
(benchmarks/README.md has the commands and the numbers)."""
