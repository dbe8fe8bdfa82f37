-- A pool's client policy (issue 36): what may cross between a desktop and the browser (the
-- clipboard per direction, file transfer, audio, microphone, printing, the watermark), as the
-- JSON document of deskpool.client_policy.model.ClientPolicy.as_json. NULL: the default policy
-- (deskpool's behaviour before client policies).
ALTER TABLE pool_session_policies ADD COLUMN client_policy jsonb;
