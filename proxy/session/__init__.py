"""One client session: login, commands, prepared statements, local answers over the plans."""
