-- Messages from administrators to desktop users (deskpool.messages): to one session, to a
-- user's sessions, or to a pool's, kept until valid_until so that users who connect meanwhile
-- see them; each recipient's dismissal is kept apart.
CREATE TABLE user_messages (
    id           uuid PRIMARY KEY,
    target_kind  text NOT NULL CHECK (target_kind IN ('session', 'user', 'pool')),
    target_id    uuid NOT NULL,
    severity     text NOT NULL CHECK (severity IN ('info', 'warning', 'urgent')),
    body         text NOT NULL CHECK (length(body) BETWEEN 1 AND 2000),
    sender       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    valid_until  timestamptz NOT NULL
);
CREATE INDEX user_messages_target ON user_messages (target_kind, target_id, valid_until);
CREATE INDEX user_messages_created ON user_messages (created_at DESC, id DESC);

CREATE TABLE user_message_dismissals (
    message_id   uuid NOT NULL REFERENCES user_messages (id) ON DELETE CASCADE,
    user_id      uuid NOT NULL,
    dismissed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, user_id)
);
