"""``eagle3scope launch [--endpoint E] [--control [ENDPOINT]] -- python -m sglang.launch_server ...``
(or ``-- python -m vllm.entrypoints.openai.api_server ...``)

Runs the server command with the shim switched on (``EAGLE3SCOPE_ENDPOINT``: by default this
user's private ipc socket; a ``tcp://`` one gets the CURVE key file made first, unless
``EAGLE3SCOPE_TRUSTED_NETWORK=1``; where ``VLLM_PLUGINS`` narrows vLLM's plugins, the shim's is
added to it) and, with
``--control``, the aux-layer control channel: a fresh token in a 0600 file inside a private 0700
directory, ``EAGLE3SCOPE_CONTROL`` and ``EAGLE3SCOPE_CONTROL_TOKEN_FILE`` for the server, and the
commands to connect printed on stderr. The server runs in its own process group; SIGINT, SIGTERM
and SIGHUP are forwarded to that group, the launcher exits with the server's code and removes the
token it created.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import click

from eagle3scope.wire.control_protocol import ENV_CONTROL, ENV_TOKEN_FILE
from eagle3scope.wire.curve import KeyFileError, load_keys
from eagle3scope.wire.endpoints import DEFAULT_ENDPOINT, ENV_ENDPOINT, EndpointError, free_port, guard, is_loopback, resolve_bind_endpoint
from eagle3scope.wire.token import TokenError, create_token_file
from eagle3scope.wire.untrusted import terminal

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The shim's name in vLLM's ``vllm.general_plugins`` entry-point group (pyproject.toml).
VLLM_PLUGIN_NAME = "eagle3scope"


def vllm_plugins_env(environ: dict) -> dict:
    """vLLM loads only the plugins ``VLLM_PLUGINS`` names when it is set (unset: all): name the shim too."""
    named = environ.get("VLLM_PLUGINS")
    if named is None:
        return {}
    plugins = [name.strip() for name in named.split(",") if name.strip()]
    if VLLM_PLUGIN_NAME in plugins:
        return {}
    return {"VLLM_PLUGINS": ",".join([*plugins, VLLM_PLUGIN_NAME])}


def control_env(control: str, token_dir: str | None) -> tuple[dict, str]:
    """(environment additions, token path) for a control channel on ``control`` ("auto": a free port)."""
    endpoint = f"tcp://127.0.0.1:{free_port()}" if control == "auto" else resolve_bind_endpoint(control)
    if not is_loopback(endpoint):
        raise click.BadParameter(terminal(f"{endpoint} is not a loopback endpoint; use an SSH tunnel to reach it remotely"),
                                 param_hint="--control")
    try:
        token = create_token_file(token_dir)
    except TokenError as exc:
        raise click.BadParameter(terminal(str(exc)), param_hint="--token-dir") from None
    return {ENV_CONTROL: endpoint, ENV_TOKEN_FILE: str(token)}, str(token)


@click.command(name="launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--endpoint", default=None, metavar="E",
              help=f"Where the shim publishes its events (default {DEFAULT_ENDPOINT}, private to this user; "
                   "tcp:// needs the CURVE key file, made here if missing, or EAGLE3SCOPE_TRUSTED_NETWORK=1).")
@click.option("--control", is_flag=False, flag_value="auto", default=None, metavar="[ENDPOINT]",
              help="Open the aux-layer control channel (loopback; a free port when no ENDPOINT is given).")
@click.option("--token-dir", type=click.Path(file_okay=False), default=None,
              help="Directory for the control token (default: a private temp dir, removed on exit; "
                   "e.g. ~/.config/eagle3scope/tokens to keep it).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, required=True)
def command(endpoint: str | None, control: str | None, token_dir: str | None, cmd: tuple[str, ...]) -> None:
    """Run an SGLang or vLLM server command with the eagle3scope shim (and optionally the control channel) on."""
    say = lambda text: click.echo(terminal(f"eagle3scope: {text}"), err=True)  # noqa: E731
    try:
        endpoint = resolve_bind_endpoint(endpoint or "")
        if guard(endpoint, bind=False) == "curve":
            say(f"CURVE key file {load_keys(create=True).path} (viewers on other hosts need a copy)")
    except (EndpointError, KeyFileError) as exc:
        raise click.BadParameter(terminal(str(exc)), param_hint="--endpoint") from None
    env = {**os.environ, ENV_ENDPOINT: endpoint}
    env.update(vllm_plugins_env(env))
    token_path = None
    if control is not None:
        extra, token_path = control_env(control, token_dir)
        env.update(extra)
        ctl = extra[ENV_CONTROL]
        say(f"control channel {ctl}, token file {token_path}")
        say(f"  eagle3scope aux list --control {ctl} --token-file {token_path}")
        say(f"  eagle3scope watch -c {endpoint} --control {ctl} --token-file {token_path}")
    say(f"events on {endpoint} (eagle3scope watch -c {endpoint})")
    try:
        code = run_forwarding(list(cmd), env)
    finally:
        if token_path is not None and token_dir is None:
            shutil.rmtree(os.path.dirname(token_path), ignore_errors=True)
        elif token_path is not None:
            os.unlink(token_path)
    sys.exit(128 - code if code < 0 else code)  # killed by a signal: the shell's 128+N


def run_forwarding(cmd: list[str], env: dict) -> int:
    """Run ``cmd`` in its own process group, forwarding termination signals to the group."""
    try:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    except OSError as exc:
        raise click.ClickException(terminal(f"cannot run {cmd[0]}: {exc}")) from None

    def forward(signum, frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        while True:
            try:
                return proc.wait()
            except InterruptedError:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
