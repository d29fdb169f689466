"""The viewer's side of live aux-layer control: the client, ``aux cycle``, ``aux write`` and the
per-draft profiles. What the shim shares with it (id semantics, the protocol, the token file)
lives in :mod:`eagle3scope.wire`."""
