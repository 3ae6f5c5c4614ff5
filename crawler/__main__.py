"""``python -m crawler``: the same as the ``crawler`` command."""

from .cli.entry import run

if __name__ == "__main__":
    run()
