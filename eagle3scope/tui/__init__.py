"""The Textual app (:mod:`app`), its ingest thread (:mod:`feed`), one panel a module under
:mod:`panels`, the screens pushed over it under :mod:`screens`, themes and token decoding."""
