"""The offline repositories of the test workspaces under tests/ (cc, e2e, teamrc).

Each is a workspace of its own for Bazel 4.2.3 in WORKSPACE mode, offline (what CI runs), two
directories below the checkout. Its WORKSPACE declares this directory as a repository and
calls the macro:

    new_local_repository(
        name = "clonestage_tests_lib",
        build_file_content = 'exports_files(["report.sh"])',
        path = "../lib",
    )

    load("@clonestage_tests_lib//:workspace.bzl", "offline_test_repositories")

    offline_test_repositories()
"""

# Offline stand-ins for repositories Bazel 4.2.3 would download (third_party/bazel_compat).
_COMPAT = ["rules_cc", "rules_java", "remote_coverage_tools"]

# A WORKSPACE macro declaring fixed repository names: no `name` to take.
# buildifier: disable=unnamed-macro
def offline_test_repositories(debian_skylib_and_platforms = True):
    """Declares the repositories every test workspace here needs, offline.

    Args:
      debian_skylib_and_platforms: also Debian's packaged bazel-skylib and platforms
        (/usr/share/bazel/tools), as bazel_skylib and platforms.
    """
    if debian_skylib_and_platforms:
        native.local_repository(
            name = "bazel_skylib",
            path = "/usr/share/bazel/tools/skylib",
        )
        native.local_repository(
            name = "platforms",
            path = "/usr/share/bazel/tools/platforms",
        )

    # A relative path is the main workspace's: tests/<suite>, two below the checkout.
    for name in _COMPAT:
        native.local_repository(
            name = name,
            path = "../../third_party/bazel_compat/" + name,
        )
