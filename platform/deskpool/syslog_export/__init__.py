"""Audit events streamed to a SIEM as syslog (RFC 5424 over TCP, RFC 6587 octet counting).

The worker reads the audit trail from a cursor kept in the database and writes it to a syslog
server, moving the cursor only past what the server had time to take (:mod:`.streamer`); the
messages are formatted by :mod:`.model`. See docs/operators/syslog.md.
"""
