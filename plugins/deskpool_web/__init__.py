"""deskpool web plugin (placeholder while it is being built)."""
