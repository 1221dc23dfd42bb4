"""Statements to plans: the SQL tokenizer and parser, the analyzer, the router and merge plans."""
