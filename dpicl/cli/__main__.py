"""`python -m dpicl.cli`: the `dpicl` command."""

from dpicl.cli import app

app()
