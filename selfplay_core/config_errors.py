"""ConfigError on its own (a leaf module), so that code `config` imports — a method's `setup`
finding that the world does not fit its configuration — can raise it without an import cycle.
`selfplay_core.config.ConfigError` is this class."""


class ConfigError(ValueError):
    """A bad configuration; the message names the file and key."""
