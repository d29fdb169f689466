"""The ``eagle3scope`` command: a click group whose sub-commands load lazily.

Each sub-command lives in ``eagle3scope/commands/<name>.py`` as a click command named
``command``; importing them lazily keeps ``eagle3scope --help`` fast and lets the viewer-only
install run ``record`` without Textual, torch or SGLang.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import click

#: set to 1 to let an unexpected exception show its traceback instead of one line
ENV_DEBUG = "EAGLE3SCOPE_DEBUG"


class InternalError(click.ClickException):
    """An exception no command anticipated, shown as one line (exit 70, EX_SOFTWARE)."""

    exit_code = 70

#: name -> (module, one-line help shown by ``eagle3scope --help``)
COMMANDS = {
    "demo": ("eagle3scope.commands.demo", "Run the real SGLang EAGLE-3 engine on CPU with the shim and watch it."),
    "watch": ("eagle3scope.commands.watch", "Open the live TUI on one or more running servers."),
    "record": ("eagle3scope.commands.record", "Record a live server's events to a session file (headless)."),
    "replay": ("eagle3scope.commands.replay", "Replay a session file in the TUI or headless."),
    "export": ("eagle3scope.commands.export", "Export a session file as jsonl, csv or parquet."),
    "salvage": ("eagle3scope.commands.salvage", "Recover the intact batches of a damaged or truncated recording."),
    "check": ("eagle3scope.commands.check", "Run the contract rules over a recording; non-zero exit on errors."),
    "doctor": ("eagle3scope.commands.doctor", "Inspect a draft checkpoint before serving it."),
    "fix": ("eagle3scope.commands.fix", "Write a corrected copy of a draft checkpoint."),
    "launch": ("eagle3scope.commands.launch", "Launch an SGLang server with the shim switched on."),
    "aux": ("eagle3scope.commands.aux", "List, set or cycle a live server's aux-layer config; write it to a draft."),
    "exporter": ("eagle3scope.commands.exporter", "Serve Prometheus metrics for one or more servers (fleet sidecar)."),
    "gate": ("eagle3scope.commands.gate", "CI / canary gate: collect N steps from a live server, pass or fail."),
    "report": ("eagle3scope.commands.report", "Write a shareable markdown or HTML report of a recording."),
    "advise": ("eagle3scope.commands.advise", "Predict accept length and tok/s for other num_steps; recommend one."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (module, _) in COMMANDS.items() if importlib.util.find_spec(module) is not None]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, short = COMMANDS[name]
        if importlib.util.find_spec(module) is None:
            return None
        command = importlib.import_module(module).command
        command.short_help = command.short_help or short
        return command

    def invoke(self, ctx: click.Context):
        """Run the command; an exception it did not turn into an error message becomes one line
        and a non-zero exit instead of a traceback (``EAGLE3SCOPE_DEBUG=1`` shows it)."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit,
                KeyboardInterrupt):
            raise
        except OSError as exc:
            if os.environ.get(ENV_DEBUG):
                raise
            raise click.ClickException(str(exc)) from None
        except Exception as exc:
            if os.environ.get(ENV_DEBUG):
                raise
            raise InternalError(f"internal error: {type(exc).__name__}: {exc} (set {ENV_DEBUG}=1 for the"
                                " traceback)") from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="eagle3scope")
def main() -> None:
    """eagle3scope: make every silent EAGLE-3 break in SGLang visible."""


if __name__ == "__main__":
    main()
