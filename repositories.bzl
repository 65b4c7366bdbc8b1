"""WORKSPACE setup of the clonestage module: the repository its install target takes binaries from.

    load("@clonestage//:repositories.bzl", "clonestage_binaries")

    clonestage_binaries()

Under bzlmod the module's own extension (private/extensions.bzl, used in MODULE.bazel) makes
the same repository; a MODULE.bazel user adds nothing.
"""

load("//private:binaries.bzl", "clonestage_binaries_repository")
load(
    "//private:binaries_table.bzl",
    "CLONESTAGE_BINARIES_VERSION",
    "CLONESTAGE_BINARY_SHA256S",
    "CLONESTAGE_BINARY_URLS",
)

def _absolute(label):
    # str() of a main-repository label is "//pkg:name" before Bazel 6, which a BUILD file in
    # another repository would read as its own package; "@//" names the main repository.
    s = str(label)
    return "@" + s if s.startswith("//") else s

def clonestage_binaries(name = "clonestage_binaries"):
    """`@clonestage_binaries`: this release's prebuilt helpers for the host, checksummed.

    Without a release for this version or an archive for the host, the repository says so and
    `bazel run @clonestage//:install` builds the helper from source. CLONESTAGE_BINARIES_URL
    (a base URL or file:///dir of the archives) moves where they come from, not their checksums.

    Args:
      name: the repository's name; @clonestage//:install expects the default.
    """
    clonestage_binaries_repository(
        name = name,
        version = CLONESTAGE_BINARIES_VERSION,
        urls = CLONESTAGE_BINARY_URLS,
        sha256s = CLONESTAGE_BINARY_SHA256S,
        spawn_source = _absolute(Label("//cc:clonestage-spawn")),
    )
