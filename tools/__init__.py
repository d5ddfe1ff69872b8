"""Developer tools: benchmarks and helpers run by hand (`python -m tools.NAME` from the
repository root). Not part of the installed package."""
