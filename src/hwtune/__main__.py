"""``python -m hwtune``: the ``hwtune`` command."""

from hwtune.cli.main import main

if __name__ == "__main__":
    main()
