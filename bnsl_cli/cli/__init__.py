"""The command-line layer: option parsing, rendering with rich, exit codes. Thin by design."""
