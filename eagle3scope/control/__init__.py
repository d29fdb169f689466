"""Live aux-layer control: what both sides share (id semantics, presets, the request protocol,
token files) plus the viewer's client. Imports only the standard library, msgpack and zmq, so the
shim inside SGLang can use :mod:`layers`, :mod:`protocol` and :mod:`token` too."""
