"""The module's registry files, parsed and held to what the Bazel Central Registry reads.

Contract: `problems(root)` returns one line per problem with .bcr/presubmit.yml,
.bcr/metadata.template.json and .bcr/source.template.json under ROOT (an empty list when
they pass); tests/module/check.py runs it. Offline; reads files only.

What each rule stands for (read 2026-11-27 at bazelbuild/continuous-integration 47d5ff0 and
bazelbuild/bazel-central-registry 51181a8):
- presubmit.yml is YAML: bcr_presubmit.py reads it with `yaml.safe_load` (get_test_module_task_config,
  prepare_test_module_repo) and bazelci.py's load_config the same way. Top-level keys are
  `matrix`, `tasks` and `bcr_test_module` (bcr_validation.py validate_presubmit_tasks);
  every task names `bazel` (check_if_bazel_version_is_set) and a `platform` (get_platform_for_task
  falls back to the task's name, which is no platform here); at least one task in all.
- matrix: a map of names to lists or dicts, each `${{ name }}` a task uses defined there
  (bazelci.py expand_task_config and get_combinations: "is not defined in `matrix` section"),
  at most 128 tasks once expanded (MAX_TASK_NUMBER).
- platforms are names bazelci.py's PLATFORMS knows (the ones this module can use listed below).
- `build_targets`/`test_targets` are lists of strings (bazelci.py: list(task_config.get(...)));
  `build_flags`/`test_flags` too; `environment` a map of strings.
- bcr_test_module has a `module_path` naming a directory of the source archive with a
  MODULE.bazel (bcr_presubmit.py: "The test module directory does not exist in the source
  archive") and its own matrix and tasks, held to the same rules.
- metadata.template.json against metadata.schema.json: required homepage, maintainers (at least
  one), repository (at least one), versions; no other keys but yanked_versions, deprecated and
  $schema; a maintainer's `github` matches ^[-a-zA-Z0-9]*$, `github_user_id` is an integer.
- source.template.json: an archive source (no `type` but "archive", docs/README.md), with a
  string url ending in an archive name and a strip_prefix; only the keys registry.py writes.
"""

import json
import os
import re

import yaml

# bazelci.py PLATFORMS: the ones a module like this one runs on.
KNOWN_PLATFORMS = {
    "debian10", "debian11", "debian12", "ubuntu2004", "ubuntu2004_arm64", "ubuntu2204",
    "ubuntu2204_arm64", "ubuntu2404", "ubuntu2404_arm64", "rockylinux8", "rockylinux8_arm64",
    "fedora39", "fedora40", "macos", "macos_arm64", "windows", "windows_arm64",
}
MAX_TASK_NUMBER = 128
MATRIX_REF = re.compile(r"\${{\s*(\w+)\s*}}")
TOP_KEYS = {"matrix", "tasks", "bcr_test_module"}
TEST_MODULE_KEYS = {"module_path", "matrix", "tasks"}
LIST_KEYS = ("build_targets", "test_targets", "build_flags", "test_flags")
METADATA_KEYS = {"$schema", "homepage", "maintainers", "repository", "versions",
                 "yanked_versions", "deprecated"}
METADATA_REQUIRED = ("homepage", "versions", "maintainers", "repository")
MAINTAINER_KEYS = {"github", "github_user_id", "email", "name", "do_not_notify"}
SOURCE_KEYS = {"url", "integrity", "strip_prefix", "patches", "patch_strip", "overlay",
               "docs_url", "mirror_urls", "type", "archive_type"}


def _refs(value):
    if isinstance(value, str):
        yield from MATRIX_REF.findall(value)
    elif isinstance(value, list):
        for v in value:
            yield from _refs(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _refs(v)


def _tasks(where, node, out):
    """Problems of one tasks/matrix pair; returns the number of tasks it expands to."""
    matrix = node.get("matrix", {}) or {}
    tasks = node.get("tasks", {}) or {}
    if not isinstance(matrix, dict):
        out.append(f"{where}: matrix is a {type(matrix).__name__}, want a map of name -> list")
        matrix = {}
    for name, values in matrix.items():
        if name == "exclude":
            continue
        if not isinstance(name, str) or not isinstance(values, (list, dict)):
            out.append(f"{where}: matrix.{name} is a {type(values).__name__}, want a list "
                       "(a stray '- x' line nests a list where none belongs)")
    if not isinstance(tasks, dict):
        out.append(f"{where}: tasks is a {type(tasks).__name__}, want a map of task name -> task")
        return 0
    count = 0
    for task_name, task in tasks.items():
        at = f"{where}: task {task_name}"
        if not isinstance(task, dict):
            out.append(f"{at} is a {type(task).__name__}, want a map")
            continue
        if "bazel" not in task:
            out.append(f"{at} names no bazel version (bcr_validation.py: check_if_bazel_version_is_set)")
        if "platform" not in task:
            out.append(f"{at} names no platform")
        refs = sorted(set(_refs(task)))
        combos = 1
        for ref in refs:
            if ref not in matrix:
                out.append(f"{at} uses ${{{{ {ref} }}}}, which matrix does not define")
            elif isinstance(matrix[ref], (list, dict)):
                combos *= len(matrix[ref])
        count += combos
        platforms = [task.get("platform")]
        m = MATRIX_REF.fullmatch(str(task.get("platform", "")).strip())
        if m and isinstance(matrix.get(m.group(1)), list):
            platforms = matrix[m.group(1)]
        for p in platforms:
            if isinstance(p, str) and not MATRIX_REF.search(p) and p not in KNOWN_PLATFORMS:
                out.append(f"{at}: platform {p!r} is not one of Bazel CI's")
        for key in LIST_KEYS:
            if key in task and not (isinstance(task[key], list)
                                    and all(isinstance(x, str) for x in task[key])):
                out.append(f"{at}: {key} must be a list of strings")
        env = task.get("environment", {})
        if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            out.append(f"{at}: environment must map names to strings")
    return count


def presubmit_problems(root):
    path = os.path.join(root, ".bcr", "presubmit.yml")
    where = ".bcr/presubmit.yml"
    if not os.path.isfile(path):
        return [f"{where}: missing (the registry runs nothing without it)"]
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except yaml.YAMLError as e:
        return [f"{where}: not YAML the registry can read (yaml.safe_load): {e}".replace("\n", " ")]
    if not isinstance(doc, dict):
        return [f"{where}: a {type(doc).__name__}, want a map"]
    out = []
    for key in sorted(set(doc) - TOP_KEYS):
        out.append(f"{where}: unknown top-level key {key!r} (want {sorted(TOP_KEYS)})")
    count = _tasks(where, doc, out)
    test_module = doc.get("bcr_test_module")
    if test_module is not None:
        tw = f"{where}: bcr_test_module"
        if not isinstance(test_module, dict):
            out.append(f"{tw} is a {type(test_module).__name__}, want a map")
        else:
            for key in sorted(set(test_module) - TEST_MODULE_KEYS):
                out.append(f"{tw}: unknown key {key!r}")
            module_path = test_module.get("module_path")
            if not isinstance(module_path, str):
                out.append(f"{tw} has no module_path")
            elif not os.path.isfile(os.path.join(root, module_path, "MODULE.bazel")):
                out.append(f"{tw}: module_path {module_path!r} has no MODULE.bazel in the tree")
            test_count = _tasks(tw, test_module, out)
            if test_count > MAX_TASK_NUMBER:
                out.append(f"{tw}: {test_count} tasks once expanded, over {MAX_TASK_NUMBER}")
            count += test_count
    if count == 0:
        out.append(f"{where}: no task (bcr_validation.py: at least one task should be specified)")
    return out


def _load_object(root, name, out):
    """The JSON object .bcr/NAME holds, or None after adding the reason to out."""
    path = os.path.join(root, ".bcr", name)
    if not os.path.isfile(path):
        out.append(f".bcr/{name}: missing")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        out.append(f".bcr/{name}: not JSON: {e}")
        return None
    if not isinstance(doc, dict):
        out.append(f".bcr/{name}: a {type(doc).__name__}, want an object")
        return None
    return doc


def metadata_problems(root):
    out = []
    where = ".bcr/metadata.template.json"
    doc = _load_object(root, "metadata.template.json", out)
    if doc is None:
        return out
    for key in METADATA_REQUIRED:
        if key not in doc:
            out.append(f"{where}: lacks {key!r} (metadata.schema.json requires it)")
    for key in sorted(set(doc) - METADATA_KEYS):
        out.append(f"{where}: key {key!r} is not in metadata.schema.json (additionalProperties: false)")
    if not isinstance(doc.get("homepage", ""), str):
        out.append(f"{where}: homepage must be a string")
    for key in ("maintainers", "repository"):
        if key in doc and not (isinstance(doc[key], list) and doc[key]):
            out.append(f"{where}: {key} must be a list of at least one")
    for i, m in enumerate(doc.get("maintainers", []) if isinstance(doc.get("maintainers"), list) else []):
        if not isinstance(m, dict):
            out.append(f"{where}: maintainers[{i}] must be an object")
            continue
        for key in sorted(set(m) - MAINTAINER_KEYS):
            out.append(f"{where}: maintainers[{i}] has unknown key {key!r}")
        if not re.fullmatch(r"[-a-zA-Z0-9]*", str(m.get("github", ""))):
            out.append(f"{where}: maintainers[{i}].github {m.get('github')!r} is not a GitHub "
                       "user name (pattern ^[-a-zA-Z0-9]*$)")
        if "github_user_id" in m and not isinstance(m["github_user_id"], int):
            out.append(f"{where}: maintainers[{i}].github_user_id must be an integer")
    if not all(isinstance(r, str) for r in doc.get("repository", []) or []):
        out.append(f"{where}: repository entries must be strings")
    if not isinstance(doc.get("versions", []), list):
        out.append(f"{where}: versions must be a list")
    if not isinstance(doc.get("yanked_versions", {}), dict):
        out.append(f"{where}: yanked_versions must be an object")
    return out


def source_problems(root):
    out = []
    where = ".bcr/source.template.json"
    doc = _load_object(root, "source.template.json", out)
    if doc is None:
        return out
    for key in sorted(set(doc) - SOURCE_KEYS):
        out.append(f"{where}: unknown key {key!r}")
    if doc.get("type", "archive") != "archive":
        out.append(f"{where}: type {doc['type']!r}: the registry takes archives only")
    url = doc.get("url")
    if not isinstance(url, str) or not re.search(r"\.(tar\.gz|tgz|tar\.xz|tar\.zst|zip)$", url):
        out.append(f"{where}: url {url!r} is not an archive's URL")
    if not isinstance(doc.get("strip_prefix", ""), str):
        out.append(f"{where}: strip_prefix must be a string")
    if not isinstance(doc.get("integrity", ""), str):
        out.append(f"{where}: integrity must be a string")
    return out


def problems(root):
    return presubmit_problems(root) + metadata_problems(root) + source_problems(root)
