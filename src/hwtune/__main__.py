"""``python -m hwtune``: the ``hwtune`` command."""

from hwtune.cli.main import main

main()
