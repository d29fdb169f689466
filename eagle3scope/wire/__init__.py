"""Wire format shared by the shim (inside SGLang) and the viewer: one schema, one codec."""

from eagle3scope.wire.schema import (  # noqa: F401
    KINDS,
    SCHEMA_MAJOR,
    SCHEMA_MINOR,
    FEATURE_CARRYING_MODES,
    Frame,
    FrameError,
    SchemaVersionError,
    decode_frame,
    encode_frame,
)
