"""What several test modules share, one definition each, imported as ``support.x`` (pytest puts tests/
on sys.path): the engine venv (``engine``), real engine servers shared by a module (``servers``), the
CLI runner (``cli``), the synthetic publisher (``publisher``), recordings written from frames
(``recordings``). What the tests share with the benchmarks (synthetic streams and frame bodies, damaged
drafts, hostile strings, the TUI driven headless) is ``benchmarks.support``."""
