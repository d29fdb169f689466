"""``python -m eagle3scope``: the same CLI as the ``eagle3scope`` command."""

from eagle3scope.cli import main

main()
