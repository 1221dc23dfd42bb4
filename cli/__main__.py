"""`python -m cli` is the `pydble` command."""

from cli.main import main

raise SystemExit(main())
