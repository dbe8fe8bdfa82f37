/**
 * The client policy part of the pool form: what may cross between the pool's desktops and the
 * browser (clipboard per direction, files, sound, microphone, printing, the watermark).
 * The gateway and guacd enforce it; a change reaches open sessions within 2 s.
 */
import type { ReactNode } from "react";
import type { Schemas } from "../api/client";
import { SelectField, TextField } from "../components/Field";

type ClientPolicy = Schemas["ClientPolicy"];

export interface ClientDraft {
  paste: "off" | "text";
  paste_bytes: string;
  copy: "off" | "text";
  copy_bytes: string;
  upload: boolean;
  download: boolean;
  max_file_bytes: string;
  audio_out: boolean;
  microphone: boolean;
  printing: boolean;
  watermark: boolean;
  watermark_text: string;
  watermark_opacity: string;
  watermark_angle: string;
  watermark_spacing: string;
}

/** The defaults: deskpool's behaviour before client policies (as the API's default). */
const DEFAULTS: ClientDraft = {
  paste: "text",
  paste_bytes: "262144",
  copy: "text",
  copy_bytes: "262144",
  upload: false,
  download: false,
  max_file_bytes: "104857600",
  audio_out: true,
  microphone: false,
  printing: false,
  watermark: false,
  watermark_text: "{name} · {session_id} · {client_address} · {time}",
  watermark_opacity: "0.15",
  watermark_angle: "-30",
  watermark_spacing: "240",
};

export function clientDraftOf(policy?: ClientPolicy): ClientDraft {
  if (!policy) return { ...DEFAULTS };
  return {
    paste: policy.clipboard.to_desktop.mode,
    paste_bytes: String(policy.clipboard.to_desktop.max_bytes),
    copy: policy.clipboard.to_browser.mode,
    copy_bytes: String(policy.clipboard.to_browser.max_bytes),
    upload: policy.file_transfer.upload,
    download: policy.file_transfer.download,
    max_file_bytes: String(policy.file_transfer.max_file_bytes),
    audio_out: policy.audio.output,
    microphone: policy.audio.microphone,
    printing: policy.printing,
    watermark: policy.watermark.enabled,
    watermark_text: policy.watermark.text,
    watermark_opacity: String(policy.watermark.opacity),
    watermark_angle: String(policy.watermark.angle),
    watermark_spacing: String(policy.watermark.spacing),
  };
}

export function clientBodyOf(draft: ClientDraft): ClientPolicy {
  return {
    clipboard: {
      to_desktop: { mode: draft.paste, max_bytes: Number(draft.paste_bytes) },
      to_browser: { mode: draft.copy, max_bytes: Number(draft.copy_bytes) },
    },
    file_transfer: { upload: draft.upload, download: draft.download, max_file_bytes: Number(draft.max_file_bytes) },
    audio: { output: draft.audio_out, microphone: draft.microphone },
    printing: draft.printing,
    watermark: {
      enabled: draft.watermark,
      text: draft.watermark_text,
      opacity: Number(draft.watermark_opacity),
      angle: Number(draft.watermark_angle),
      spacing: Number(draft.watermark_spacing),
    },
  };
}

function Check({ label, checked, onChange, hint }: { label: string; checked: boolean; onChange: (value: boolean) => void; hint?: ReactNode }) {
  return (
    <label>
      <input type="checkbox" role="switch" checked={checked} onChange={(event) => onChange(event.target.checked)} />
      {label}
      {hint ? <small>{hint}</small> : null}
    </label>
  );
}

export function ClientPolicyFields({
  draft,
  onChange,
  errors,
}: {
  draft: ClientDraft;
  onChange: (draft: ClientDraft) => void;
  errors: Record<string, string>;
}) {
  const e = (path: string) => errors[`session_policy.client.${path}`];
  const text = (field: keyof ClientDraft) => (event: { target: { value: string } }) =>
    onChange({ ...draft, [field]: event.target.value });
  const flag = (field: keyof ClientDraft) => (value: boolean) => onChange({ ...draft, [field]: value });
  return (
    <fieldset aria-label="Client policy">
      <legend>Client policy</legend>
      <small>What may cross between the desktop and the browser. Enforced by the gateway; changes reach open sessions within 2 s.</small>
      <div className="grid">
        <SelectField label="Clipboard to the desktop (paste)" value={draft.paste} onChange={text("paste")} error={e("clipboard.to_desktop.mode")}>
          <option value="text">Text</option>
          <option value="off">Off</option>
        </SelectField>
        <TextField label="Paste limit (bytes)" type="number" min={1} value={draft.paste_bytes} onChange={text("paste_bytes")} error={e("clipboard.to_desktop.max_bytes")} />
        <SelectField label="Clipboard to the browser (copy out)" value={draft.copy} onChange={text("copy")} error={e("clipboard.to_browser.mode")}>
          <option value="text">Text</option>
          <option value="off">Off</option>
        </SelectField>
        <TextField label="Copy limit (bytes)" type="number" min={1} value={draft.copy_bytes} onChange={text("copy_bytes")} error={e("clipboard.to_browser.max_bytes")} />
      </div>
      <div className="grid">
        <Check label="File upload" checked={draft.upload} onChange={flag("upload")} />
        <Check label="File download" checked={draft.download} onChange={flag("download")} />
        <TextField label="Largest file (bytes)" type="number" min={1} value={draft.max_file_bytes} onChange={text("max_file_bytes")} error={e("file_transfer.max_file_bytes")} />
      </div>
      <div className="grid">
        <Check label="Sound" checked={draft.audio_out} onChange={flag("audio_out")} />
        <Check label="Microphone" checked={draft.microphone} onChange={flag("microphone")} hint="RDP only." />
        <Check label="Printing" checked={draft.printing} onChange={flag("printing")} hint="RDP only: the browser gets a PDF." />
      </div>
      <Check label="Watermark" checked={draft.watermark} onChange={flag("watermark")} />
      <TextField
        label="Watermark text"
        value={draft.watermark_text}
        onChange={text("watermark_text")}
        error={e("watermark.text")}
        hint="May name {name}, {email}, {session_id}, {client_address} and {time}."
      />
      <div className="grid">
        <TextField label="Opacity" type="number" step="0.05" min={0.05} max={1} value={draft.watermark_opacity} onChange={text("watermark_opacity")} error={e("watermark.opacity")} />
        <TextField label="Angle (degrees)" type="number" min={-90} max={90} value={draft.watermark_angle} onChange={text("watermark_angle")} error={e("watermark.angle")} />
        <TextField label="Spacing (pixels)" type="number" min={40} max={2000} value={draft.watermark_spacing} onChange={text("watermark_spacing")} error={e("watermark.spacing")} />
      </div>
    </fieldset>
  );
}
