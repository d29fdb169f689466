"""What several test modules share, one definition each: the engine venv (``engine``), the CLI
runner (``cli``), the synthetic publisher (``publisher``), recordings written from frames
(``recordings``). The wire-body factory is ``tests/support/synthetic.py`` (imported by most tests as
``synthetic``; left where it is while other branches add tests that import it)."""
