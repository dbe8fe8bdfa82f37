"""Pool reconciliation: the pure planner, the service that applies a pass, its store."""
