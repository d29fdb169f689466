"""Where a viewer looks for a publisher when the user names none.

One constant shared by ``watch``, ``record``, ``launch`` and the shim's launcher so that
``eagle3scope launch`` and a bare ``eagle3scope watch`` meet without flags.
"""

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"
