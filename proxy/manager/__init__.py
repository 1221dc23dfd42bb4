"""The manager port (9066): its commands and their parser."""
