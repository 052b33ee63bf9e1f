"""The `selfplay` command line. Subcommands live in their own modules and import heavy
dependencies only when they run."""
