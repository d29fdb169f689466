"""The environment variables that configure the shim and its streams, named once: the shim reads
them, ``launch``, the demo server, the tests and the benchmarks set them. Standard library only."""

#: switches the shim on and names where it publishes ("" or unset with :data:`ENABLE`: the default)
ENDPOINT = "EAGLE3SCOPE_ENDPOINT"
#: "1" switches the shim on at the default endpoint
ENABLE = "EAGLE3SCOPE"
#: plain TCP (no CURVE) and ipc sockets outside private directories, at the user's word
TRUSTED = "EAGLE3SCOPE_TRUSTED_NETWORK"
#: the CURVE key pair's file (default ``~/.config/eagle3scope/curve.key``)
KEY_FILE = "EAGLE3SCOPE_CURVE_KEY_FILE"
#: the aux-layer control channel's loopback endpoint, and its token file
CONTROL = "EAGLE3SCOPE_CONTROL"
TOKEN_FILE = "EAGLE3SCOPE_CONTROL_TOKEN_FILE"
#: "0" keeps the shim's verdict (contracts broken, or none) out of the server's log
VERDICT_LOG = "EAGLE3SCOPE_VERDICT_LOG"
#: test support: the name of a seam whose hook body raises
FAULT = "EAGLE3SCOPE_FAULT"
#: test support: fail on host-device syncs in hook bodies (needs torch)
SYNC_GUARD = "EAGLE3SCOPE_SYNC_GUARD"
#: test support: CPU tensors go through the host ring as device tensors do (no pinning, no event), so
#: the CPU engine exercises the ring's sizing and reuse
RING_ON_CPU = "EAGLE3SCOPE_RING_ON_CPU"
