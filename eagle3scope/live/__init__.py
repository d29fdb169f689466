"""Live side of the viewer: subscribing to running servers."""
