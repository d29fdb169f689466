"""eagle3scope's shim inside SGLang: streams per-step EAGLE-3 facts to the viewer.

Activation: SGLang's general plugin (:mod:`eagle3scope_shim.plugin`), the ``.pth`` bootstrap of
older releases (:mod:`eagle3scope_shim.bootstrap`), or :func:`install` for ``sglang.Engine``
users; all three go through the one :class:`~eagle3scope_shim.instrumentor.Instrumentor`. Nothing is
patched unless asked. Never imports the viewer side (Textual).
"""

from __future__ import annotations

from eagle3scope_shim.instrumentor import INSTRUMENTOR, Instrumentor  # noqa: F401
from eagle3scope_shim.version import __version__  # noqa: F401

#: ``install(endpoint=None) -> bool``: :meth:`Instrumentor.instrument` of the process's instrumentor
install = INSTRUMENTOR.instrument
#: ``uninstall()``: :meth:`Instrumentor.uninstrument`
uninstall = INSTRUMENTOR.uninstrument
