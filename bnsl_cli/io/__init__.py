"""Readers and writers shared by every subcommand."""
