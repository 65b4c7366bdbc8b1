"""The prebuilt helpers of this release: where each platform's archive is, and its checksum.

tools/release.sh writes this file into the release's source archive (never into the git tree),
the way rules_rust generates crate_universe/private/urls.bzl for each release
(bazelbuild/rules_rust 0.70.0, .github/workflows/release.yaml, "Create the rules archive":
urls_generator rewrites the file, then the tree is archived). In the git tree the tables are
empty: a checkout or an archive of a plain commit has no release, and
`bazel run @clonestage//:install` builds the helper from source (private/binaries.bzl).
tests/module/check.py fails when the committed tables are not empty, or when filled ones name
another version than MODULE.bazel.
"""

# The version these archives were built for (MODULE.bazel's module version); "" without a release.
CLONESTAGE_BINARIES_VERSION = ""

# Rust target triple -> the archive's URL. Example:
# {"aarch64-apple-darwin": "https://github.com/OWNER/clonestage/releases/download/v0.1.0/clonestage-v0.1.0-aarch64-apple-darwin.tar.gz"}
CLONESTAGE_BINARY_URLS = {}

# Rust target triple -> the archive's sha256 (hex, as in the release's SHA256SUMS).
CLONESTAGE_BINARY_SHA256S = {}
