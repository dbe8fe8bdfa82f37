"""The REST API: the route table, validation, problem+json errors and the OpenAPI document."""
