-- A default partition of the audit trail. An event whose time falls in no monthly partition (the
-- clock of the process that recorded it months behind or ahead) is kept here instead of failing
-- the change it records; the worker's audit maintenance moves such rows into the partitions of
-- their months, creating those, so retention still drops whole months.
CREATE TABLE IF NOT EXISTS audit_events_default PARTITION OF audit_events DEFAULT;
