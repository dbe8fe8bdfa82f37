# Sourced by scripts/dev-env.sh and `make run`: exports the settings of .run/dev.env (or the
# file given), except those the caller set already: DATABASE_URL=... make run uses that
# database, and says so on stderr, instead of the one .run/dev.env names.
# shellcheck shell=bash
_dev_env_file=${1:-.run/dev.env}
while IFS= read -r _dev_env_line || [ -n "$_dev_env_line" ]; do
  case "$_dev_env_line" in '' | '#'*) continue ;; esac
  _dev_env_name=${_dev_env_line%%=*}
  if [ -n "${!_dev_env_name+x}" ]; then
    _dev_env_value=$(eval "printf '%s' ${_dev_env_line#*=}")
    if [ "${!_dev_env_name}" != "$_dev_env_value" ]; then
      # The name only: a value may be a secret (a database password, the master key).
      echo "dev-env: $_dev_env_name is taken from the environment, not from $_dev_env_file" >&2
    fi
  else
    eval "export $_dev_env_line"
  fi
done <"$_dev_env_file"
unset _dev_env_file _dev_env_line _dev_env_name _dev_env_value
