"""bzlmod module extension declaring the example's generated SDK trees.

MODULE.bazel: `use_repo(use_extension("//swift_like:extensions.bzl", "swiftlike_sdk"),
"swiftlike_sdk_ci", "swiftlike_sdk_full")`. WORKSPACE builds use
repositories.bzl; Bazel 4.2.3 never loads this file.
"""

load("//swift_like/private:sdk_repository.bzl", _swiftlike_sdk_repo = "swiftlike_sdk")

def _swiftlike_sdk_extension_impl(_module_ctx):
    _swiftlike_sdk_repo(name = "swiftlike_sdk_full", scale = "full")
    _swiftlike_sdk_repo(name = "swiftlike_sdk_ci", scale = "ci")

swiftlike_sdk = module_extension(
    implementation = _swiftlike_sdk_extension_impl,
    doc = "Declares @swiftlike_sdk_full and @swiftlike_sdk_ci (see private/sdk_repository.bzl).",
)
