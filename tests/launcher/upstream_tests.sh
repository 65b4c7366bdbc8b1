# tests/launcher/upstream_tests.sh: the launcher's part of issue 14 (a team's REAPI cache
# as clonestage's upstream), sourced by tests/launcher/run.sh, which runs these functions
# with its fixtures (setup, launch, check, start_server, serve_env_is...). The real server
# is started with these settings: what it got is read from its /proc/<pid>/environ.
#
# Contract under test (rust/cli/src/launch/upstream.rs):
#   - the CLONESTAGE_UPSTREAM* variables of the environment reach the `serve` it starts;
#   - ${XDG_CONFIG_HOME:-$HOME/.config}/clonestage/upstream.env supplies them too
#     (KEY=value lines, `#` comments, only the CLONESTAGE_UPSTREAM* keys; the environment
#     wins over the file); other keys are ignored with a line saying so;
#   - an auth file inside the workspace (also through a symlink, or a relative path) is
#     refused with a line saying why, and the server starts without an upstream;
#   - a running server started with another upstream setting is not restarted: the
#     launcher says so once (per setting), and Bazel still gets the executor.

# shellcheck shell=bash disable=SC2034 # EXTRA_ENV and friends are run.sh's


test_upstream_env_reaches_serve() {
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://127.0.0.1:9 CLONESTAGE_UPSTREAM_WRITE=none)
  launch build //x
  check "exit 0" equals "$RC" 0
  check "the server got the upstream variables" serve_env_is \
    CLONESTAGE_UPSTREAM=grpc://127.0.0.1:9 CLONESTAGE_UPSTREAM_WRITE=none
  check "Bazel still gets the executor" args_are @RC build //x
  check "quiet" stderr_empty
}

test_upstream_config_file_outside_the_workspace() {
  mkdir -p "$T/home/.config/clonestage"
  cat >"$T/home/.config/clonestage/upstream.env" <<'EOF'
# the team's cache (CI writes, laptops read)
CLONESTAGE_UPSTREAM=grpcs://cache.example.com:443

  CLONESTAGE_UPSTREAM_INSTANCE="team"
export CLONESTAGE_UPSTREAM_WRITE='none'
CLONESTAGE_CACHE=/elsewhere
CLONESTAGE_UPSTREAM_BOGUS=1
EOF
  EXTRA_ENV=(CLONESTAGE_UPSTREAM_WRITE=all)
  launch build //x
  check "exit 0" equals "$RC" 0
  check "file values reach serve, the environment wins, other keys do not" serve_env_is \
    CLONESTAGE_UPSTREAM=grpcs://cache.example.com:443 CLONESTAGE_UPSTREAM_INSTANCE=team \
    CLONESTAGE_UPSTREAM_WRITE=all
  check "an ignored key is named" stderr_has "CLONESTAGE_CACHE"
  check "an unknown upstream key is named" stderr_has "CLONESTAGE_UPSTREAM_BOGUS"
  check "the cache is not moved by the file" test -n "$(server_pid)"
  check "Bazel still gets the executor" args_are @RC build //x

  # XDG_CONFIG_HOME names the config directory.
  stop_servers
  rm -rf "$T/cache"
  mkdir -p "$T/cache" "$T/xdg/clonestage"
  echo "CLONESTAGE_UPSTREAM=grpc://10.0.0.1:8980" >"$T/xdg/clonestage/upstream.env"
  EXTRA_ENV=(XDG_CONFIG_HOME="$T/xdg")
  launch build //x
  check "XDG_CONFIG_HOME's file is read" serve_env_is CLONESTAGE_UPSTREAM=grpc://10.0.0.1:8980
}

test_upstream_auth_file_inside_the_workspace_is_refused() {
  mkdir -p "$T/ws/secrets" "$T/private"
  printf 'Authorization: Bearer x\n' >"$T/ws/secrets/auth"
  printf 'Authorization: Bearer x\n' >"$T/private/auth"
  chmod 600 "$T/private/auth" # the server reads only a private auth file
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://127.0.0.1:9 CLONESTAGE_UPSTREAM_AUTH_FILE="$T/ws/secrets/auth")
  launch build //x
  check "exit 0" equals "$RC" 0
  check "says why" stderr_has "inside the workspace"
  check "names the file" stderr_has "$T/ws/secrets/auth"
  check "the server starts without an upstream" serve_env_is
  check "Bazel still gets the executor" args_are @RC build //x

  # A relative path (from the workspace) and a path through a symlink are inside too.
  stop_servers
  rm -rf "$T/cache"
  mkdir -p "$T/cache"
  ln -s "$T/ws" "$T/wslink"
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://127.0.0.1:9 CLONESTAGE_UPSTREAM_AUTH_FILE="$T/wslink/secrets/auth")
  launch build //x
  check "through a symlink: refused" stderr_has "inside the workspace"
  check "through a symlink: no upstream" serve_env_is
  stop_servers
  rm -rf "$T/cache"
  mkdir -p "$T/cache"
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://127.0.0.1:9 CLONESTAGE_UPSTREAM_AUTH_FILE=secrets/auth)
  launch build //x
  check "relative: refused" stderr_has "inside the workspace"
  check "relative: no upstream" serve_env_is

  # A file outside is passed on.
  stop_servers
  rm -rf "$T/cache"
  mkdir -p "$T/cache"
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://127.0.0.1:9 CLONESTAGE_UPSTREAM_AUTH_FILE="$T/private/auth")
  launch build //x
  check "outside: quiet" stderr_empty
  check "outside: passed on" serve_env_is CLONESTAGE_UPSTREAM=grpc://127.0.0.1:9 \
    CLONESTAGE_UPSTREAM_AUTH_FILE="$T/private/auth"
}

test_running_server_with_another_upstream_is_kept_and_named_once() {
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://a.example:1)
  launch build //x
  local first
  first="$(server_pid)"
  check "first: quiet" stderr_empty
  check "first: started with A" serve_env_is CLONESTAGE_UPSTREAM=grpc://a.example:1
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://b.example:2)
  launch build //x
  check "other setting: exit 0" equals "$RC" 0
  check "other setting: names the server's upstream" stderr_has "grpc://a.example:1"
  check "other setting: names the wanted upstream" stderr_has "grpc://b.example:2"
  check "other setting: says how to switch" stderr_has "stop"
  check "other setting: Bazel still gets the executor" args_are @RC build //x
  check "other setting: not restarted" equals "$(server_pid)" "$first"
  launch build //x
  check "said once" stderr_empty
  EXTRA_ENV=()
  launch build //x
  check "no setting at all vs a server with one: said" stderr_has "grpc://a.example:1"
  launch build //x
  check "no setting at all: said once" stderr_empty
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://a.example:1)
  launch build //x
  check "same setting again: quiet" stderr_empty
  check "never restarted" equals "$(server_pid)" "$first"
}

test_server_started_elsewhere_with_unknown_upstream_is_named_once() {
  start_server
  EXTRA_ENV=(CLONESTAGE_UPSTREAM=grpc://b.example:2)
  launch build //x
  check "exit 0" equals "$RC" 0
  check "says the server's setting is not known here" stderr_has "status\` shows it"
  check "Bazel still gets the executor" args_are @RC build //x
  launch build //x
  check "said once" stderr_empty
  EXTRA_ENV=()
  launch build //x
  check "no setting: quiet" stderr_empty
}
