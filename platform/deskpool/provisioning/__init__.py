"""Desktop job execution: the steps on the driver, the handlers, their fenced writes."""
