"""Session files: the recorder writes them, replay/export/check read them."""

from eagle3scope.store.format import BatchInfo, CorruptBatchError, StoreError  # noqa: F401
from eagle3scope.store.reader import SessionReader  # noqa: F401
from eagle3scope.store.writer import SessionWriter  # noqa: F401
