"""Errors that are the user's to fix: the CLI prints them as one line and exits with status 2."""


class UserError(Exception):
    """Bad input (an unknown name, an invalid file, a missing engine); the message names the problem."""


def did_you_mean(word: str, candidates, *, sep: str = "; ") -> str:
    """``"; did you mean 'lr'?"`` naming the candidates closest to ``word`` (spelling, or one holding the
    other's words: ``learning_rate`` -> ``lr``), or ``""`` when none is close."""
    import difflib

    names = sorted({str(c) for c in candidates})
    word = str(word)
    close = difflib.get_close_matches(word, names, n=3, cutoff=0.6)
    if not close:
        initials = "".join(part[:1] for part in word.replace("-", "_").split("_") if part)
        close = [n for n in names if len(initials) > 1 and n == initials]
    if not close:
        close = [n for n in names if len(n) > 2 and (n in word or word in n)][:3]
    if not close:
        return ""
    return f"{sep}did you mean {' or '.join(repr(c) for c in close)}?"


def checkout() -> bool:
    """Whether sao_env runs from a source checkout (an editable install, ``make install``): its package
    folder has the project's pyproject.toml beside it."""
    from pathlib import Path

    return (Path(__file__).resolve().parent.parent / "pyproject.toml").is_file()


def install_command(extra: str) -> str:
    """The command that installs an optional extra, in the form that works here: in a checkout
    ``pip install -e '.[ray]'`` (or ``make install-all``, every extra at once), else ``pip install 'sao-env[ray]'``."""
    if checkout():
        return f"pip install -e '.[{extra}]' in the checkout (or make install-all: every extra)"
    return f"pip install 'sao-env[{extra}]'"
