"""One module per CLI sub-command; each defines a click command named ``command``."""
