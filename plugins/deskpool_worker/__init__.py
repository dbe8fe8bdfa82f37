"""deskpool worker plugin (placeholder while it is being built)."""
