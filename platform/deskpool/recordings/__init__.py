"""Session recordings: what the gateway records of a session, where it is kept, who reads it.

- :mod:`~deskpool.recordings.model`: the pool's recording policy, the recording record, the
  Guacamole form of a recorded key event and the chunk arithmetic of a byte range (pure);
- :mod:`~deskpool.recordings.stores`: the recording store contract (``RECORDING_STORE`` chooses
  one among those ``deskpool_register_recording_stores`` registers);
- :mod:`~deskpool.recordings.store`: the SQL of the ``session_recordings`` table;
- :mod:`~deskpool.recordings.service`: listing, reading (audited) and retention.
"""
