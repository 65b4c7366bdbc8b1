"""swift_like_manifest: what the module checker expects of each library.

Collects the `lib ...` lines of every library in the transitive closure of
`libs` into one file (sorted, so it does not depend on the order of `libs`),
and carries every module file in its runfiles, so a test that takes it as
`data` can read them all.
"""

load(":providers.bzl", "SwiftLikeInfo")

def _swift_like_manifest_impl(ctx):
    infos = [lib[SwiftLikeInfo] for lib in ctx.attr.libs]
    lines = depset(transitive = [info.manifest_lines for info in infos]).to_list()
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, "\n".join(sorted(lines)) + "\n")
    modules = depset(
        direct = [info.module for info in infos],
        transitive = [info.transitive_modules for info in infos],
    )
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out], transitive_files = modules),
    )]

swift_like_manifest = rule(
    implementation = _swift_like_manifest_impl,
    doc = "Writes NAME.txt, the module checker's expectations for `libs` and their deps.",
    attrs = {
        "libs": attr.label_list(
            doc = "Top libraries; their transitive dependencies are included.",
            providers = [SwiftLikeInfo],
            mandatory = True,
        ),
    },
)
