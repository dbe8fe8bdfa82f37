"""deskpool oidc plugin (placeholder while it is being built)."""
