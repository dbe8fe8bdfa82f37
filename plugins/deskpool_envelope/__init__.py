"""deskpool envelope plugin (placeholder while it is being built)."""
