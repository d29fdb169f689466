"""The one base both sides stand on: the frame schema and codec (:mod:`schema`), the typed bodies
(:mod:`bodies`), endpoints
(:mod:`endpoints`), aux-layer id semantics (:mod:`aux_layers`), the control channel's protocol
(:mod:`control_protocol`) and token file (:mod:`token`), and the boundary between untrusted strings and
every output (:mod:`untrusted`). Imports nothing else of the project."""

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
    frame_of_packed,
    frame_packer,
    is_decode_step,
)
