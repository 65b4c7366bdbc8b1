"""Repository rules of the e2e workspace.

`big_file_repository` writes one large file as a source file of an external
repository, so that Bazel uploads it to clonestage through ByteStream.Write
(it is larger than any batch the server accepts) before an action reads it.
"""

def _big_file_repository_impl(rctx):
    size = rctx.attr.size
    r = rctx.execute([
        "/bin/sh",
        "-c",
        "yes '%s' | head -c %d > big.bin" % (rctx.attr.line, size),
    ])
    if r.return_code != 0:
        fail("cannot write big.bin: " + r.stderr)
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    rctx.file(
        "BUILD.bazel",
        "exports_files([\"big.bin\"], visibility = [\"//visibility:public\"])\n",
    )

big_file_repository = repository_rule(
    implementation = _big_file_repository_impl,
    doc = "A repository holding big.bin: `yes LINE | head -c SIZE`.",
    attrs = {
        "line": attr.string(
            default = "clonestage e2e source blob",
            doc = "The line repeated to fill the file.",
        ),
        "size": attr.int(
            default = 24 * 1024 * 1024,
            doc = "Size of big.bin in bytes.",
        ),
    },
)
