#!/usr/bin/env bash
# Undo .ci/mount-cow.sh: unmount /mnt/clonestage-{xfs,btrfs,ext4} and detach their loop
# devices. With --delete, also remove the images under ${CLONESTAGE_IMG_DIR:-/var/tmp/clonestage-img}.
# Idempotent: what is not mounted or attached is skipped. Fails loudly (exit 1) if a
# filesystem is busy or a loop device cannot be detached.
set -euo pipefail

IMG_DIR=${CLONESTAGE_IMG_DIR:-/var/tmp/clonestage-img}
delete=0
case "${1:-}" in
    --delete) delete=1 ;;
    "") ;;
    *) echo "usage: $0 [--delete]" >&2; exit 2 ;;
esac

die() { echo "umount-cow: error: $*" >&2; exit 1; }
log() { echo "umount-cow: $*" >&2; }

[ "$(id -u)" = 0 ] || die "must run as root; try: sudo $0"

for fs in xfs btrfs ext4; do
    img="$IMG_DIR/$fs.img" mnt="/mnt/clonestage-$fs"
    while findmnt -rn --mountpoint "$mnt" >/dev/null 2>&1; do
        umount "$mnt" || die "cannot unmount $mnt (busy? see: fuser -vm $mnt)"
        log "$mnt: unmounted"
    done
    if [ -f "$img" ]; then
        for dev in $(losetup -j "$img" -O NAME -n 2>/dev/null); do
            losetup -d "$dev" || die "cannot detach $dev ($img)"
            log "$img: detached $dev"
        done
        if [ "$delete" = 1 ]; then
            rm -f "$img"
            log "$img: deleted"
        fi
    fi
    if [ -d "$mnt" ]; then rmdir "$mnt" 2>/dev/null || true; fi
done
