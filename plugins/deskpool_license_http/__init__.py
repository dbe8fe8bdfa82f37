"""deskpool license_http plugin (placeholder while it is being built)."""
