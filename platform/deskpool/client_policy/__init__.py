"""What may leave a desktop, and enter it: a pool's client policy (issue 36).

:mod:`deskpool.client_policy.model` holds the policy (clipboard per direction, file transfer,
audio, microphone, printing, watermark), its validation, the connection arguments guacd is given
for it, and the record of one transfer the gateway audits. The gateway enforces it
(``deskpool_gateway.transfers``); the session broker audits each transfer.
"""
