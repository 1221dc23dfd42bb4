"""proxy/protocol."""
