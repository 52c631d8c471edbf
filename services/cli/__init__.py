"""The `pykubelet` command: one subcommand per service, plus up, down, status and logs."""
