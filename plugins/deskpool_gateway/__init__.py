"""deskpool gateway plugin (placeholder while it is being built)."""
