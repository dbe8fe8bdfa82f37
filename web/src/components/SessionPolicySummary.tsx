/** The session policy in force on a pool, in one line (issue 37: recording was never shown). */
import type { Schemas } from "../api/client";

const AFTER: Record<Schemas["SessionPolicy"]["after_disconnect"], (delay: number) => string> = {
  logoff_immediately: () => "logged off when the session ends",
  logoff_after_delay: (delay) => `logged off ${delay} s after the session ends`,
  never: () => "kept signed in after the session ends",
};

export function sessionPolicyWords(policy: Schemas["SessionPolicy"]): string[] {
  const protocol = policy.protocol === "auto" ? "protocol automatic" : policy.protocol.toUpperCase();
  const recording = policy.recording?.enabled
    ? `recorded (${policy.recording.include_keys ? "with" : "without"} keystrokes)`
    : "not recorded";
  return [
    protocol,
    AFTER[policy.after_disconnect](policy.logoff_delay),
    policy.idle_timeout ? `disconnected after ${policy.idle_timeout} s idle` : "no idle timeout",
    policy.max_session_duration ? `sessions last at most ${policy.max_session_duration} s` : "no session limit",
    recording,
  ];
}

export function SessionPolicySummary({ policy }: { policy: Schemas["SessionPolicy"] }) {
  return (
    <p className="meta" data-testid="pool-session-policy">
      Sessions: {sessionPolicyWords(policy).join(" · ")}
    </p>
  );
}
