"""Where a viewer looks for a publisher when the user names none.

One constant shared by ``watch``, ``record``, ``launch`` and the shim's launcher so that
``eagle3scope launch`` and a bare ``eagle3scope watch`` meet without flags.
"""

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"


def fresh_ipc_endpoint(name: str = "events") -> str:
    """A new private ipc:// endpoint. Tests and the demo use it instead of a tcp port picked in
    advance, which SGLang could hand to one of its own sockets before the shim binds it."""
    import tempfile

    return f"ipc://{tempfile.mkdtemp(prefix='e3s-')}/{name}"
