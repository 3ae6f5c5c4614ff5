"""``python -m crawler``: the same as the ``crawler`` command."""

from .cli.command import run

if __name__ == "__main__":
    run()
