"""Identity and access: principals from OIDC tokens, groups, roles, grants and bindings.

deskpool issues and stores no passwords and no API keys (SPEC.md §5.1 rule 3): a user exists
because an access token from the configured issuer named them, and what they may do comes from
grants of roles or permissions to them or to their groups.
"""
