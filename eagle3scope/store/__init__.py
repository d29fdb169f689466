"""Session files: the recorder writes them, replay/export/check read them."""

from eagle3scope.store.session import (  # noqa: F401
    BatchInfo,
    CorruptBatchError,
    SessionReader,
    SessionWriter,
    StoreError,
)
