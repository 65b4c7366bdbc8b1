#!/usr/bin/env bash
# tests/module/cargo_bazel_probe.sh: replays what rules_rust 0.63.0's crate extension
# (crate_universe/extensions.bzl, _generate_hub_and_spokes) does for clonestage when it is NOT
# the root module, without Bazel: `cargo-bazel splice` then `cargo-bazel generate --repin`,
# with the module's files (git archive of REV) in an "external" directory and the root module
# (a consumer with only a MODULE.bazel) elsewhere, then reads the lock JSON it renders.
#
# Contract: CB=/path/to/cargo-bazel bash tests/module/cargo_bazel_probe.sh [CHECKOUT]
# (REV=<commit> to probe another commit; default HEAD). Manual, NOT part of tests/run.sh:
# it needs cargo-bazel 0.17.0, the generator of rules_rust 0.63.0, built from that tag's
# crate_universe/ (`cargo build --release --locked --bin cargo-bazel`, ~40 min on 2 busy cores)
# and crates.io's index. Exits 0 when every crate outside the workspace is an http_archive and
# h2's carries the module's patch label, 1 otherwise (a Path entry is what broke consumers:
# it points into the consumer's directory). The config JSON mirrors generate_config_file and the
# annotation struct of crate.bzl by hand, so it can drift from a real Bazel run.
set -euo pipefail
CB=${CB:?set CB to a cargo-bazel 0.17.0 binary}
SRC=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
P=$(mktemp -d /var/tmp/cargo-bazel-probe.XXXXXX)
trap 'rm -rf "$P"' EXIT
mkdir -p "$P/external/clonestage+" "$P/consumer" "$P/ext/clonestage_crates"
git -C "$SRC" archive "${REV:-HEAD}" | tar -x -C "$P/external/clonestage+"
MOD="$P/external/clonestage+"
echo 'bazel_dep(name = "clonestage", version = "0.1.0")' > "$P/consumer/MODULE.bazel"
T="$P/ext/clonestage_crates"
python3 - "$MOD" "$T" <<'PY'
import json, sys, tomllib
mod, t = sys.argv[1], sys.argv[2]
import ast
src = open(f"{mod}/MODULE.bazel").read()
calls = {}
for node in ast.walk(ast.parse(src)):
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("from_cargo", "annotation"):
        calls[node.func.attr] = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
fc, ann = calls["from_cargo"], calls.get("annotation")
def lab(l):  # a label of this module, as str(Label) gives it for a non-root module
    return "@@clonestage+" + l
def path(l):
    pkg, name = l[2:].split(":")
    return f"{mod}/{pkg}/{name}"
manifests = {path(m): lab(m) for m in fc["manifests"]}
json.dump({"resolver_version": "2", "cargo_config": None, "direct_packages": {}, "manifests": manifests},
          open(f"{t}/splicing_manifest.json", "w"), indent=4)
annotations = {}
if ann:
    fields = "additive_build_file additive_build_file_content alias_rule build_script_compile_data build_script_data build_script_tools build_script_data_glob build_script_deps build_script_env build_script_link_deps build_script_proc_macro_deps build_script_rundir build_script_rustc_env build_script_toolchains build_script_use_default_shell_env compile_data compile_data_glob compile_data_glob_excludes crate_features data data_glob deps extra_aliased_targets gen_binaries gen_build_script patch_tool proc_macro_deps rustc_env rustc_env_files rustc_flags shallow_since override_targets".split()
    data = {f: None for f in fields}
    data.update(disable_pipelining=False, override_targets={},
                patches=[lab(p) for p in ann.get("patches", [])], patch_args=ann.get("patch_args"))
    annotations[f"{ann['crate']} {ann.get('version', '*')}"] = data
config = {
    "generate_binaries": False, "generate_build_scripts": True, "annotations": annotations,
    "cargo_config": None,
    "rendering": {
        "build_file_template": "@clonestage_crates//clonestage_crates:BUILD.{name}-{version}.bazel",
        "crate_alias_template": "@{repository}//:{name}-{version}",
        "crate_label_template": "@{repository}__{name}-{version}//:{target}",
        "crate_repository_template": "{repository}__{name}-{version}",
        "crates_module_template": "@clonestage_crates//clonestage_crates:{file}",
        "default_alias_rule": "alias", "default_package_name": None,
        "generate_cargo_toml_env_vars": True, "generate_rules_license_metadata": False,
        "generate_target_compatible_with": True,
        "platforms_template": "@rules_rust//rust/platform:{triple}",
        "regen_command": "bazel mod show_repo clonestage_crates", "vendor_mode": "remote",
        "repository_name": "clonestage_crates"},
    "supported_platform_triples": ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu", "aarch64-apple-darwin", "x86_64-apple-darwin"],
}
json.dump(config, open(f"{t}/config.json", "w"), indent=4)
print(path(fc["cargo_lockfile"]))
PY
LOCK=$(python3 -c 'import ast,sys; src=open(sys.argv[1]).read()
for n in ast.walk(ast.parse(src)):
    if isinstance(n, ast.Call) and getattr(n.func,"attr",None)=="from_cargo":
        l=[ast.literal_eval(k.value) for k in n.keywords if k.arg=="cargo_lockfile"][0]; p,f=l[2:].split(":"); print(sys.argv[2]+"/"+p+"/"+f)' "$MOD/MODULE.bazel" "$MOD")
SKIP=(); grep -q "skip_cargo_lockfile_overwrite = True" "$MOD/MODULE.bazel" && SKIP=(--skip-cargo-lockfile-overwrite)
cp "$LOCK" "$P/lock.before"
"$CB" splice --splicing-manifest "$T/splicing_manifest.json" --cargo-lockfile "$LOCK" \
  --workspace-dir "$T/splicing-workspace" --output-dir "$T/splicing-output" --config "$T/config.json" \
  --cargo "$(command -v cargo)" --rustc "$(command -v rustc)" --repository-name clonestage_crates
: > "$T/cargo-bazel-lock.json"
CARGO="$(command -v cargo)" RUSTC="$(command -v rustc)" "$CB" generate --cargo-lockfile "$LOCK" --config "$T/config.json" \
  --splicing-manifest "$T/splicing_manifest.json" --repository-dir "$T" \
  --nonhermetic-root-bazel-workspace-dir "$P/consumer" --paths-to-track "$T/paths_to_track.json" \
  --warnings-output-path "$T/warnings.json" --lockfile "$T/cargo-bazel-lock.json" "${SKIP[@]}" \
  --repin --metadata "$T/splicing-output/metadata.json"
cmp -s "$LOCK" "$P/lock.before" && echo "cargo_lockfile unchanged" || echo "cargo_lockfile REWRITTEN"
rc=0
python3 - "$T/cargo-bazel-lock.json" <<'PY' || rc=1
import json, sys
d = json.load(open(sys.argv[1]))
for cid, c in sorted(d["crates"].items()):
    repo = c.get("repository")
    if c["name"] == "h2" or (repo and "Http" not in repo):
        print(cid, json.dumps(repo))
bad = sum(1 for c in d["crates"].values() if c.get("repository") and "Http" not in c["repository"])
h2 = [c for c in d["crates"].values() if c["name"] == "h2"]
patched = bool(h2) and all((c.get("repository") or {}).get("Http", {}).get("patches") for c in h2)
print("crates:", len(d["crates"]), "non-Http, non-member:", bad, "h2 patched:", patched)
sys.exit(0 if bad == 0 and patched else 1)
PY
echo "warnings: $(cat "$T/warnings.json")"
echo "paths to track: $(cat "$T/paths_to_track.json")"
exit "$rc"
