"""The MySQL wire: the sans-I/O protocol codec and the encoding of answers (no I/O, no SQL)."""
