"""Errors that are the user's to fix: the CLI prints them as one line and exits with status 2."""


class UserError(Exception):
    """Bad input (an unknown name, an invalid file, a missing engine); the message names the problem."""
