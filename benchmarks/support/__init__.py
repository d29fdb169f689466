"""What benchmarks share, and what they share with the tests: synthetic streams and frame bodies,
damaged drafts, hostile strings, a second local user, the TUI driven headless, a model of the CUDA
runtime, per-process CPU time, py-spy attribution and the in-server hook toggle. Tests import these
as ``benchmarks.support.x``; benchmarks never import from tests/."""
