#!/usr/bin/env bash
# Makes sure libvirt's daemons run with the QEMU driver, for the libvirt driver's tests and
# `make run`. Uses running daemons when `virsh -c qemu:///system` answers; otherwise, as root on
# Debian/Ubuntu, installs QEMU, libvirt and the binding's build dependencies (libvirt-dev,
# pkg-config), prepares what libvirt expects of a host without systemd (the libvirt-qemu
# system user; as root, QEMU run as root without a security driver) and starts virtlogd and
# libvirtd in the background; otherwise stops with a message that says exactly what to install.
# Idempotent: a second run changes nothing.
set -euo pipefail

PACKAGES=(qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  libvirt-dev pkg-config sasl2-bin libsasl2-modules)
URI=qemu:///system
# The remote URI the tests also use: libvirtd's TCP listener on loopback with SASL
# (DIGEST-MD5: libvirt wants a SASL mechanism with a security layer over plain TCP) users in /etc/libvirt/passwd.db; the test user's password is in
# $SASL_SECRET (root only), so the suite tests credentials libvirt really checks.
TCP_URI=qemu+tcp://127.0.0.1:16509/system
SASL_USER=deskpool-test
SASL_SECRET=/etc/libvirt/deskpool-test-sasl

can_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1
}

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

answers() {
  timeout 10 virsh -q -c "$URI" version >/dev/null 2>&1
}

if command -v dpkg-query >/dev/null 2>&1; then
  missing=$(missing_packages)
else
  missing=""
fi
if [ -n "$missing" ]; then
  if can_install; then
    echo "ensure-libvirt: installing" $missing
    export DEBIAN_FRONTEND=noninteractive
    if [ ! -f /var/lib/apt/.deskpool-updated ]; then
      apt-get update -qq && touch /var/lib/apt/.deskpool-updated
    fi
    # shellcheck disable=SC2086
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "ensure-libvirt: these packages are missing:" $missing >&2
    echo "Install them (sudo apt-get install ${PACKAGES[*]}) and start libvirtd," >&2
    echo "or run this script as root on Debian/Ubuntu." >&2
    exit 1
  fi
fi

if [ "$(id -u)" = 0 ]; then
  # libvirt's QEMU driver wants its system user even when QEMU runs as root.
  getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
  getent passwd libvirt-qemu >/dev/null ||
    useradd --system --gid libvirt-qemu --home-dir /var/lib/libvirt --no-create-home \
      --shell /usr/sbin/nologin libvirt-qemu
  getent group kvm >/dev/null || groupadd --system kvm
  conf=/etc/libvirt/qemu.conf
  # Without systemd, logind and AppArmor profiles, QEMU runs as root with no security driver.
  if ! grep -q '^# deskpool-dev' "$conf" 2>/dev/null; then
    {
      echo '# deskpool-dev: QEMU as root without a security driver (set by ensure-libvirt.sh)'
      echo 'user = "root"'
      echo 'group = "root"'
      echo 'security_driver = "none"'
    } >>"$conf"
  fi
  mkdir -p /var/lib/libvirt/images /var/log/libvirt/qemu /run/libvirt
  daemon_conf=/etc/libvirt/libvirtd.conf
  if ! grep -q '^# deskpool-dev' "$daemon_conf" 2>/dev/null; then
    {
      echo '# deskpool-dev: TCP on loopback only, SASL authentication (set by ensure-libvirt.sh)'
      echo 'listen_tls = 0'
      echo 'listen_tcp = 1'
      echo 'listen_addr = "127.0.0.1"'
      echo 'tcp_port = "16509"'
      echo 'auth_tcp = "sasl"'
    } >>"$daemon_conf"
  fi
  mkdir -p /etc/sasl2
  if ! grep -q '^# deskpool-dev' /etc/sasl2/libvirt.conf 2>/dev/null; then
    printf '%s\n' '# deskpool-dev (set by ensure-libvirt.sh)' 'mech_list: digest-md5' \
      'sasldb_path: /etc/libvirt/passwd.db' >/etc/sasl2/libvirt.conf
  fi
  if [ ! -s "$SASL_SECRET" ]; then
    (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$SASL_SECRET")
  fi
  if ! sasldblistusers2 -f /etc/libvirt/passwd.db 2>/dev/null | grep -q "^$SASL_USER@"; then
    saslpasswd2 -p -a libvirt -f /etc/libvirt/passwd.db "$SASL_USER" <"$SASL_SECRET"
  fi
fi

if ! answers; then
  if [ "$(id -u)" != 0 ]; then
    echo "ensure-libvirt: libvirt does not answer at $URI." >&2
    echo "Start it (sudo virtlogd -d && sudo libvirtd -d), or run this script as root." >&2
    exit 1
  fi
  pgrep -x virtlogd >/dev/null || virtlogd -d
  pgrep -x libvirtd >/dev/null || libvirtd -d --listen
  for _ in $(seq 1 60); do
    answers && break
    sleep 0.5
  done
  if ! answers; then
    echo "ensure-libvirt: libvirtd did not answer at $URI (see /var/log/libvirt/)" >&2
    exit 1
  fi
fi
if grep -q -E 'vmx|svm' /proc/cpuinfo; then accel="KVM"; else accel="TCG (software emulation)"; fi
if ! (exec 3<>/dev/tcp/127.0.0.1/16509) 2>/dev/null; then
  echo "ensure-libvirt: libvirtd does not listen on 127.0.0.1:16509 ($TCP_URI): it was" >&2
  echo "started without --listen; stop it and rerun this script (or start it with" >&2
  echo "'libvirtd -d --listen' after this script configured it)." >&2
  exit 1
fi
echo "ensure-libvirt: libvirt answers at $URI and $TCP_URI; guests run with $accel"
