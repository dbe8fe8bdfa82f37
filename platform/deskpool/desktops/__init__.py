"""The desktop aggregate: its state machine, store, allocation and job kinds."""
