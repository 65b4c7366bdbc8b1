"""exec_tools: tools built in the configuration actions run them in.

tests/perf/modcache.sh builds `//compiler:for_actions` untimed before each timed
build, so every strategy times the same SwiftCompile-like actions and none of the
compiler's own C++ build.
"""

def _exec_tools_impl(ctx):
    return [DefaultInfo(files = depset(transitive = [t[DefaultInfo].files for t in ctx.attr.tools]))]

exec_tools = rule(
    implementation = _exec_tools_impl,
    doc = "The `tools`, built with `cfg = \"exec\"` as swift_like_library's are.",
    attrs = {
        "tools": attr.label_list(
            doc = "Executables the actions run.",
            cfg = "exec",
        ),
    },
)
