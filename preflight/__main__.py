"""``python -m preflight --config <file> [--write]``; see ``preflight.cli``."""

from preflight.cli import main

raise SystemExit(main())
