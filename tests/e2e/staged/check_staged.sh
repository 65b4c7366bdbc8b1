#!/bin/bash
# check_staged.sh [--out FILE]... [--] INPUT...
#
# With CLONESTAGE_EXPECT_STAGED=1 (--config=staged), fails unless every INPUT
# is what clonestage promises an action: a regular file, not a symlink, with
# no write bit for anyone (checked on the mode bits with stat, because root
# passes `[ -w ]` on anything), reached from the working directory through
# real directories only; and unless the parent directory of every --out FILE
# is a real directory its owner may write. Without the variable it only lists
# the inputs (under --spawn_strategy=local they are symlinks into the source
# tree, so the checks would fail there on purpose).
#
# Prints one line per path: "<kind> <mode> <path>". Exit 1 naming every
# offending path.
set -u

outs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out)
      outs+=("$2")
      shift 2
      ;;
    --)
      shift
      break
      ;;
    *) break ;;
  esac
done

strict=0
[ "${CLONESTAGE_EXPECT_STAGED:-0}" = 1 ] && strict=1
bad=()

# Every directory on the way from the working directory to $1 (exclusive).
symlinked_parent() {
  local p="$1" dir
  dir="${p%/*}"
  [ "$dir" = "$p" ] && return 1
  while [ -n "$dir" ] && [ "$dir" != . ] && [ "$dir" != / ]; do
    if [ -L "$dir" ]; then
      echo "$dir"
      return 0
    fi
    case "$dir" in
      */*) dir="${dir%/*}" ;;
      *) dir="" ;;
    esac
  done
  return 1
}

for f in "$@"; do
  if [ -L "$f" ]; then
    kind=symlink
  elif [ -f "$f" ]; then
    kind="file"
  elif [ -d "$f" ]; then
    kind=directory
  else
    kind=missing
  fi
  mode="$(stat -L -c %a "$f" 2>/dev/null || echo '?')"
  echo "input $kind $mode $f"
  [ "$strict" = 1 ] || continue
  if [ "$kind" != file ]; then
    bad+=("$f: $kind, not a regular file")
    continue
  fi
  if [ $((8#$mode & 8#222)) -ne 0 ]; then
    bad+=("$f: mode $mode has a write bit")
  fi
  if p="$(symlinked_parent "$f")"; then
    bad+=("$f: reached through the symlink $p")
  fi
done

for o in "${outs[@]}"; do
  d="${o%/*}"
  [ "$d" = "$o" ] && d=.
  if [ -L "$d" ]; then
    dkind=symlink
  elif [ -d "$d" ]; then
    dkind=directory
  else
    dkind=missing
  fi
  dmode="$(stat -c %a "$d" 2>/dev/null || echo '?')"
  echo "output-dir $dkind $dmode $d"
  [ "$strict" = 1 ] || continue
  if [ "$dkind" != directory ]; then
    bad+=("$d (output directory): $dkind")
  elif [ $((8#$dmode & 8#200)) -eq 0 ]; then
    bad+=("$d (output directory): mode $dmode is not writable by its owner")
  fi
done

if [ "${#bad[@]}" -gt 0 ]; then
  echo "check_staged: CLONESTAGE_EXPECT_STAGED=1 but ${#bad[@]} path(s) are not staged as clonestage promises:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
if [ "$strict" = 1 ]; then
  echo "staged: $# input(s) checked"
else
  echo "not checked (CLONESTAGE_EXPECT_STAGED is not 1)"
fi
