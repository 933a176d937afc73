"""The training loop's parts (see DESIGN.md)."""
