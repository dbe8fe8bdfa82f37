/**
 * The banner that tells the user their session on a desktop ends: the administrator's message
 * and a countdown to the log-off. It reads the desktop's notice from `GET /api/v1/me/desktops`,
 * which the live events (`desktop.notice`) refresh the moment a warning is given.
 */
import { useQuery } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { unwrap } from "../api/client";
import { useSession } from "../session";

/** "4:05" for 245 seconds; never negative. */
export function countdown(seconds: number): string {
  const left = Math.max(0, Math.ceil(seconds));
  const minutes = Math.floor(left / 60);
  return `${minutes}:${String(left % 60).padStart(2, "0")}`;
}

export const WHY: Record<string, string> = {
  image_rollout: "This desktop is being updated to a new image.",
  capacity_schedule: "Fewer desktops are kept running at this hour (the pool's capacity schedule).",
};

export function NoticeBanner({ desktopId }: { desktopId: string }) {
  const { api } = useSession();
  const mine = useQuery({
    queryKey: ["my-desktops"],
    queryFn: () => unwrap(api.GET("/api/v1/me/desktops")),
  });
  const notice = mine.data?.items.find((item) => item.id === desktopId)?.notice ?? null;
  const endsAt = notice?.ends_at ?? null;
  // Ticks once a second while a notice is shown (refetches must not restart the clock).
  const [, setTick] = useState(0);
  useEffect(() => {
    if (!endsAt) return;
    const timer = setInterval(() => setTick((tick) => tick + 1), 1000);
    return () => clearInterval(timer);
  }, [endsAt]);
  if (!notice) return null;
  const left = (new Date(notice.ends_at).getTime() - Date.now()) / 1000;
  return (
    <div className="notice-banner" role="alert" data-testid="notice-banner">
      <strong>{WHY[notice.reason] ?? "Your session on this desktop ends soon."}</strong>{" "}
      {notice.message ? <span data-testid="notice-message">{notice.message}</span> : null}{" "}
      <span>
        {left > 0 ? (
          <>
            You are logged off in <time data-testid="notice-countdown">{countdown(left)}</time>: save your work.
          </>
        ) : (
          "You are being logged off."
        )}
      </span>
    </div>
  );
}
