#!/usr/bin/env bash
# Makes sure the X and VNC programs of the VNC bridge tests are installed: Xvfb, x11vnc, xterm, xclip,
# xwd, xsetroot and xwininfo (deskpool.testing.x11 starts them itself; nothing runs as a service),
# and tesseract, which reads the text of remote screens in the browser tests (deskpool.testing.ocr).
# Uses them when they are there; otherwise, as root on Debian/Ubuntu, installs their packages;
# otherwise stops with a message that says exactly what to install.
set -euo pipefail

declare -A PACKAGE=(
  [Xvfb]=xvfb [x11vnc]=x11vnc [xterm]=xterm [xwd]=x11-apps [xsetroot]=x11-xserver-utils
  [xwininfo]=x11-utils [xclip]=xclip [tesseract]="tesseract-ocr tesseract-ocr-eng"
)
missing=()
for program in "${!PACKAGE[@]}"; do
  command -v "$program" >/dev/null 2>&1 || missing+=("${PACKAGE[$program]}")
done
# The font the browser test's xterm uses (tesseract reads it without mistakes).
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf ] || missing+=(fonts-dejavu-core)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -f /var/lib/apt/.deskpool-updated ]; then
    apt-get update -qq && touch /var/lib/apt/.deskpool-updated
  fi
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $packages >/dev/null
  echo "ensure-x11: installed $packages"
  exit 0
fi

echo "ensure-x11: missing $packages; install them: sudo apt-get install $packages" >&2
exit 1
