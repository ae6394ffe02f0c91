"""Errors that mean "the caller asked for something wrong", as opposed to bugs.

Entry points (the demo, experiment scripts) turn a `TreespecError` into a one-line message and exit
status 2; library callers can catch it like the builtin it also derives from.
"""


class TreespecError(Exception):
    """Base class: a problem with the caller's input, configuration or environment."""


class ConfigError(TreespecError, ValueError):
    """An argument or configuration value is invalid."""


class MissingAssetError(TreespecError, FileNotFoundError):
    """A model, data file or asset package is not on this machine; the message says how to get it."""
