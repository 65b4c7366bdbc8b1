"""Rules for the clonestage e2e workspace.

`tree_artifact` writes a directory output (a tree artifact, returned to Bazel
as an REAPI `Tree`) next to the outputs of other targets in its package, from
inputs that sit in that same output directory.
"""

def _tree_artifact_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    ctx.actions.run_shell(
        inputs = ctx.files.srcs,
        outputs = [out],
        command = """
set -eu
out="$1"
shift
mkdir -p "$out/sub/deeper"
n=0
for f in "$@"; do
  n=$((n + 1))
  cp "$f" "$out/copy$n.txt"
done
echo "$n input(s)" > "$out/sub/count.txt"
: > "$out/sub/deeper/empty.txt"
ln -s ../copy1.txt "$out/sub/link-to-copy1"
""",
        arguments = [out.path] + [f.path for f in ctx.files.srcs],
        mnemonic = "TreeArtifact",
        progress_message = "Writing tree artifact %s" % out.short_path,
    )
    return [DefaultInfo(files = depset([out]))]

tree_artifact = rule(
    implementation = _tree_artifact_impl,
    doc = """A directory output holding a copy of each input, a count, an empty
file and a relative symlink inside the tree.""",
    attrs = {
        "srcs": attr.label_list(
            allow_files = True,
            doc = "Files copied into the tree as copy1.txt, copy2.txt, ...",
        ),
    },
)
