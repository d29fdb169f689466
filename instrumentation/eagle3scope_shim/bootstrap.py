"""Environment-gated activation for SGLang releases without general plugins (before 0.5.11).

``python -m eagle3scope_shim.bootstrap install`` writes ``eagle3scope_shim.pth`` into the
interpreter's site-packages. At interpreter start that line imports this module only when
``EAGLE3SCOPE_ENDPOINT`` or ``EAGLE3SCOPE`` is set; :func:`activate` then patches SGLang's modules
lazily, as they are imported (never importing SGLang itself), unless the release has the plugin
mechanism, which then does the job.
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig

from eagle3scope.wire import env
from eagle3scope_shim.instrumentor import INSTRUMENTOR

PTH_NAME = "eagle3scope_shim.pth"
PTH_LINE = (
    f"import os; (os.environ.get({env.ENDPOINT!r}) or os.environ.get({env.ENABLE!r})) "
    "and __import__('eagle3scope_shim.bootstrap').bootstrap.activate()\n"
)


def activate() -> None:
    try:
        INSTRUMENTOR.activate()
    except Exception as exc:  # must never break interpreter start-up
        logging.getLogger("eagle3scope").warning("eagle3scope: bootstrap failed: %s: %s", type(exc).__name__, exc)


def install_pth(site_dir: str | None = None) -> str:
    path = os.path.join(site_dir or sysconfig.get_paths()["purelib"], PTH_NAME)
    with open(path, "w") as fh:
        fh.write(PTH_LINE)
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["install"]:
        print(install_pth())
    else:
        sys.exit("usage: python -m eagle3scope_shim.bootstrap install")
