"""The training loop's parts."""
