/**
 * A session recording played in the browser with guacamole-common-js 1.6's
 * `Guacamole.SessionRecording` (loaded only here, as the desktop view's chunk is), fed the
 * recording as a Blob: the console downloads it with the bearer token first (one download,
 * audited by the API as `recording.download`), since the library's own HTTP source cannot carry
 * the token.
 *
 * The library plays at the recorded pace only; {@link PlaybackClock} keeps the position and this
 * module seeks the recording to it as it advances (a seek forward replays the frames in between;
 * a seek back restarts from the nearest keyframe), so the speeds and the timeline are one
 * mechanism. The display is scaled to fit its container.
 */
import type { SessionRecording } from "@glokon/guacamole-common-js";
import { fitScale } from "../desktop/guacamole";
import { PlaybackClock, type Speed } from "./player";

export interface PlaybackState {
  /** The whole recording is parsed (its duration is final). */
  loaded: boolean;
  playing: boolean;
  /** The display is still being brought to the position (frames are replayed). */
  seeking: boolean;
  /** Milliseconds from the first frame. */
  position: number;
  duration: number;
  speed: Speed;
  error?: string;
}

export interface PlaybackHandle {
  play: () => void;
  pause: () => void;
  seek: (position: number) => void;
  setSpeed: (speed: Speed) => void;
  destroy: () => void;
}

/** How often the clock moves the recording on, in milliseconds. */
const TICK = 40;

export async function openRecording(
  container: HTMLElement,
  blob: Blob,
  onState: (state: PlaybackState) => void,
): Promise<PlaybackHandle> {
  const Guacamole = await import("@glokon/guacamole-common-js");
  const recording: SessionRecording = new Guacamole.SessionRecording(blob, 0);
  const display = recording.getDisplay();
  const element = display.getElement();
  container.replaceChildren(element);

  const clock = new PlaybackClock();
  let loaded = false;
  let error: string | undefined;
  let framed = false; // a frame was parsed: the recording can be sought
  let seeking = false;
  let wanted: number | null = null; // where to go once the seek under way is done
  let shown = -1; // the position the display shows

  const emit = () => {
    const now = Date.now();
    onState({
      loaded,
      playing: clock.playing,
      seeking: seeking || wanted !== null,
      position: clock.position(now),
      duration: clock.duration,
      speed: clock.speed,
      error,
    });
  };
  const seekTo = (position: number) => {
    if (!framed) return;
    if (seeking) {
      wanted = position;
      return;
    }
    seeking = true;
    recording.seek(position, () => {
      // The frames are replayed; their images may still be drawing: done once the display is.
      display.flush(() => {
        seeking = false;
        shown = position;
        const next = wanted;
        wanted = null;
        if (next !== null && next !== shown) seekTo(next);
        else emit();
      });
    });
  };

  const fit = () => {
    const scale = fitScale(display.getWidth(), display.getHeight(), container.clientWidth, container.clientHeight);
    if (scale !== null) display.scale(scale);
  };
  display.onresize = fit;
  const observer = new ResizeObserver(fit);
  observer.observe(container);

  recording.onprogress = (duration: number) => {
    clock.setDuration(duration, Date.now());
    if (!framed) {
      framed = true;
      seekTo(0); // show the first frame while paused
    }
    emit();
  };
  recording.onload = () => {
    loaded = true;
    clock.setDuration(recording.getDuration(), Date.now());
    emit();
  };
  recording.onerror = (message: string) => {
    error = message;
    clock.pause(Date.now());
    emit();
  };

  const timer = window.setInterval(() => {
    if (!clock.playing) return;
    const now = Date.now();
    if (clock.ended(now)) clock.pause(now);
    const position = clock.position(now);
    if (position !== shown) seekTo(position);
    emit();
  }, TICK);

  return {
    play: () => {
      clock.play(Date.now());
      emit();
    },
    pause: () => {
      clock.pause(Date.now());
      emit();
    },
    seek: (position: number) => {
      const now = Date.now();
      clock.seek(position, now);
      seekTo(clock.position(now));
      emit();
    },
    setSpeed: (speed: Speed) => {
      clock.setSpeed(speed, Date.now());
      emit();
    },
    destroy: () => {
      window.clearInterval(timer);
      observer.disconnect();
      recording.abort();
      element.remove();
    },
  };
}
