#!/usr/bin/env bash
# Create and loop-mount the three filesystems clonestage's tests and benchmarks need:
#   XFS with reflink (FICLONE per file)  -> /mnt/clonestage-xfs
#   btrfs (FICLONE + subvolume snapshots) -> /mnt/clonestage-btrfs
#   ext4 (no clones: hardlink / copy)     -> /mnt/clonestage-ext4
# Each is a sparse image (default 3 GiB) under ${CLONESTAGE_IMG_DIR:-/var/tmp/clonestage-img}.
#
# Idempotent: a filesystem already mounted where it belongs is left alone; an existing image of
# the right type is reused (not reformatted); an image already attached to a loop device reuses
# that device. On success it prints, on stdout only, lines for eval:
#   eval "$(sudo .ci/mount-cow.sh)"
#   export CLONESTAGE_TEST_XFS=/mnt/clonestage-xfs ...
# Progress goes to stderr. It fails loudly (exit 1, one clear message) when it cannot do the
# job: not root, a missing tool, no loop device, a mount that fails, or an XFS without reflink
# or a btrfs that cannot snapshot. CI requires these filesystems, so nothing here is skipped.
#
# Environment: CLONESTAGE_IMG_DIR (image directory), CLONESTAGE_IMG_SIZE (default 3G).
# Undo with .ci/umount-cow.sh.
set -euo pipefail

IMG_DIR=${CLONESTAGE_IMG_DIR:-/var/tmp/clonestage-img}
IMG_SIZE=${CLONESTAGE_IMG_SIZE:-3G}

die() { echo "mount-cow: error: $*" >&2; exit 1; }
log() { echo "mount-cow: $*" >&2; }

[ "$(id -u)" = 0 ] || die "must run as root (loop devices and mount need it); try: sudo $0"

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; install $2"; }
need losetup "util-linux (apt-get install util-linux)"
need mount "util-linux"
need findmnt "util-linux"
need blkid "util-linux"
need truncate "coreutils"
need mkfs.xfs "xfsprogs (apt-get install xfsprogs)"
need xfs_info "xfsprogs (apt-get install xfsprogs)"
need mkfs.btrfs "btrfs-progs (apt-get install btrfs-progs)"
need mkfs.ext4 "e2fsprogs (apt-get install e2fsprogs)"

for fs in xfs btrfs ext4; do
    grep -qw "$fs" /proc/filesystems || modprobe "$fs" 2>/dev/null || true
    grep -qw "$fs" /proc/filesystems || die "the kernel does not support $fs (not in /proc/filesystems, modprobe $fs failed)"
done
if [ ! -e /dev/loop-control ]; then
    modprobe loop 2>/dev/null || true
    [ -e /dev/loop-control ] || die "no /dev/loop-control: loop devices are unavailable (modprobe loop; in a container, run it --privileged)"
fi

mkdir -p "$IMG_DIR" || die "cannot create image directory $IMG_DIR"
# One runner at a time (two CI steps racing to attach the same image).
exec 9>"$IMG_DIR/.lock"
command -v flock >/dev/null 2>&1 && flock 9

# mkfs command for each filesystem.
mkfs_cmd() {
    case "$1" in
        xfs) echo "mkfs.xfs -q -f -m reflink=1" ;;
        btrfs) echo "mkfs.btrfs -q -f" ;;
        ext4) echo "mkfs.ext4 -q -F" ;;
    esac
}

# Check that an XFS mount (or image) has reflink on.
xfs_has_reflink() { xfs_info "$1" 2>/dev/null | grep -q 'reflink=1'; }

setup() {
    local fs=$1
    local img="$IMG_DIR/$fs.img" mnt="/mnt/clonestage-$fs"
    mkdir -p "$mnt" || die "cannot create mount point $mnt"

    if findmnt -rn --mountpoint "$mnt" >/dev/null 2>&1; then
        local have
        have=$(findmnt -rn -o FSTYPE --mountpoint "$mnt" | tail -n1)
        [ "$have" = "$fs" ] || die "$mnt is already mounted with $have, not $fs; unmount it first (.ci/umount-cow.sh)"
        log "$mnt: $fs already mounted"
    else
        local dev
        dev=$(losetup -j "$img" -O NAME -n 2>/dev/null | head -n1 || true)
        if [ -z "$dev" ]; then
            local type=""
            [ -f "$img" ] && type=$(blkid -p -o value -s TYPE "$img" 2>/dev/null || true)
            if [ "$type" = xfs ] && [ "$fs" = xfs ] && ! xfs_has_reflink "$img"; then
                log "$img: XFS without reflink; reformatting"
                type=""
            fi
            if [ "$type" != "$fs" ]; then
                log "$img: creating a $IMG_SIZE sparse $fs image"
                rm -f "$img"
                truncate -s "$IMG_SIZE" "$img" || die "cannot create $img"
                # shellcheck disable=SC2046
                $(mkfs_cmd "$fs") "$img" >&2 || die "$(mkfs_cmd "$fs") $img failed"
            else
                log "$img: reusing existing $fs image"
            fi
            dev=$(losetup --find --show "$img" 2>&1) || die "no free loop device for $img: $dev (is the loop module loaded? in a container, run --privileged with /dev/loop* available)"
        else
            log "$img: already attached to $dev"
        fi
        mount -t "$fs" "$dev" "$mnt" >&2 || { losetup -d "$dev" 2>/dev/null || true; die "mount -t $fs $dev $mnt failed"; }
        # Usable by tests that run as another user too.
        chmod 1777 "$mnt"
        log "$mnt: mounted $fs from $img ($dev)"
    fi

    # Prove the capability the tests rely on, so CI fails here rather than skipping later.
    local probe="$mnt/.mount-cow-probe.$$"
    case "$fs" in
        xfs)
            xfs_has_reflink "$mnt" || die "$mnt: XFS without reflink=1 (recreate it: .ci/umount-cow.sh --delete)"
            ;;
        btrfs)
            need btrfs "btrfs-progs (apt-get install btrfs-progs)"
            btrfs subvolume create "$probe.sv" >/dev/null || die "$mnt: cannot create a btrfs subvolume"
            btrfs subvolume snapshot "$probe.sv" "$probe.snap" >/dev/null || { btrfs subvolume delete "$probe.sv" >/dev/null 2>&1; die "$mnt: cannot snapshot a btrfs subvolume"; }
            btrfs subvolume delete "$probe.snap" "$probe.sv" >/dev/null 2>&1 || true
            ;;
    esac
    if [ "$fs" != ext4 ]; then
        echo probe >"$probe" || die "$mnt: cannot write"
        if ! cp --reflink=always "$probe" "$probe.clone" 2>/dev/null; then
            rm -f "$probe" "$probe.clone"
            die "$mnt: FICLONE (cp --reflink=always) fails on this $fs"
        fi
        rm -f "$probe" "$probe.clone"
    fi
}

for fs in xfs btrfs ext4; do
    setup "$fs"
done

echo "export CLONESTAGE_TEST_XFS=/mnt/clonestage-xfs"
echo "export CLONESTAGE_TEST_BTRFS=/mnt/clonestage-btrfs"
echo "export CLONESTAGE_TEST_EXT4=/mnt/clonestage-ext4"
