"""The clonestage module's own extension: `@clonestage_binaries` under bzlmod.

MODULE.bazel uses it, so a consumer's `bazel_dep(name = "clonestage", ...)` needs no other line;
WORKSPACE users call `clonestage_binaries()` from //:repositories.bzl instead, which makes the
same repository (private/binaries.bzl).
"""

load("//:repositories.bzl", "clonestage_binaries")

def _binaries_impl(_module_ctx):
    # No tags: one repository, the same for every module that depends on clonestage.
    clonestage_binaries()

binaries = module_extension(
    implementation = _binaries_impl,
    doc = "Makes @clonestage_binaries, the host's prebuilt clonestage helpers (private/binaries.bzl).",
)
