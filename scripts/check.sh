#!/usr/bin/env bash
# check.sh [--no-self-test] [ROOT] -- the source checks `make test` runs before any test
# (a few seconds, no build needed; python3 from scripts/deps.sh):
#   1. layering: a file of src/<module> includes only headers of the modules its module may use
#      (DESIGN.md section 2, docs/ARCHITECTURE.md "Layers"; the table is LAYERS below);
#   2. log ids: every SHL_LOG_* call site has its own id (tests excepted: they log anything);
#   3. whole libraries: each module's unit-test binary links its module's libraries whole
#      ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>), so an object calling upward fails to link even when
#      no test calls into it.
# Then it checks itself: on a scratch copy of the tree it adds a bad include, a reused log id
# and a test binary linked without WHOLE_ARCHIVE, and each must make it fail.
set -euo pipefail

self_test=1
if [ "${1:-}" = "--no-self-test" ]; then
    self_test=0
    shift
fi
top=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-$top}

run_checks() {
    python3 - "$1" <<'EOF'
import os, re, sys

root = sys.argv[1]
src = os.path.join(root, "src")

# The modules each module may include, itself first: a module depends only on the modules
# below it (docs/ARCHITECTURE.md "Layers"), and not on every one of them: sharding never uses
# storage, db or query, so the router links without storage; router, shard and config are
# siblings (nothing depends on router); main sits on top. The one place this table lives.
LAYERS = {
    "base":     "base",
    "bson":     "bson base",
    "net":      "net bson base",
    "auth":     "auth net bson base",
    "session":  "session net bson base",
    "storage":  "storage bson base",
    "query":    "query bson base",
    "sharding": "sharding session net bson base",
    "db":       "db storage query session net bson base",
    "repl":     "repl db storage query session net bson base",
    "router":   "router sharding query session net bson base",
    "shard":    "shard db sharding storage query session net bson base",
    "config":   "config db sharding storage query session net bson base",
    "main":     "main config shard router repl db sharding storage query session auth net bson base",
}

errors = []
modules = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
for m in modules:
    if m not in LAYERS:
        errors.append(f"src/{m}: a module missing from the layer table in scripts/check.sh")

def sources(m):
    for dirpath, _, names in os.walk(os.path.join(src, m)):
        for n in sorted(names):
            if n.endswith((".c", ".h", ".def")):
                yield os.path.join(dirpath, n)

# 1. layering
include_re = re.compile(r'^\s*#\s*include\s*"([a-z_]+)/', re.M)
for m in modules:
    allowed = set(LAYERS.get(m, m).split())
    for path in sources(m):
        text = open(path, encoding="utf-8", errors="replace").read()
        for hit in include_re.finditer(text):
            dep = hit.group(1)
            if dep not in allowed:
                line = text.count("\n", 0, hit.start()) + 1
                errors.append(f"{os.path.relpath(path, root)}:{line}: includes \"{dep}/...\"; "
                              f"src/{m} may include only {', '.join(sorted(allowed))}")

# 2. log ids: SHL_LOG_ERROR/WARNING/INFO(COMP, ID, ...) and SHL_LOG_DEBUG(LEVEL, COMP, ID, ...)
log_re = re.compile(r'\bSHL_LOG_(?:(?:ERROR|WARNING|INFO)\(\s*\w+|DEBUG\(\s*[^,()]+,\s*\w+)'
                    r'\s*,\s*(\w+)\s*,')
seen = {}
for m in modules:
    for path in sources(m):
        if path.endswith("_test.c") or path.endswith("base/log.h"):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        for hit in log_re.finditer(text):
            where = f"{os.path.relpath(path, root)}:{text.count(chr(10), 0, hit.start()) + 1}"
            ident = hit.group(1)
            if not ident.isdigit():
                errors.append(f"{where}: log id {ident} is not a number")
            elif ident in seen:
                errors.append(f"{where}: log id {ident} is already used at {seen[ident]}")
            else:
                seen[ident] = where

# 3. each *_test binary links its module's libraries whole
for m in modules:
    cml = os.path.join(src, m, "CMakeLists.txt")
    if not os.path.exists(cml):
        continue
    text = re.sub(r"#[^\n]*", "", open(cml).read())
    libs = [l for l in re.findall(r"add_library\(\s*(\w+)", text) if l != "shl_unit"]
    tests = re.findall(r"add_executable\(\s*(\w+_test)\b", text)
    links = {t: " ".join(re.findall(r"target_link_libraries\(\s*" + t + r"\b([^)]*)\)", text))
             for t in tests}
    for t in tests:
        whole = set(re.findall(r"\$<LINK_LIBRARY:WHOLE_ARCHIVE,(\w+)>", links[t]))
        if not whole & set(libs):
            errors.append(f"src/{m}/CMakeLists.txt: {t} does not link "
                          f"{' or '.join(libs)} whole ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>)")

for e in errors:
    print(e)
print(f"check: {len(seen)} log ids, {len(modules)} modules, {len(errors)} problems")
sys.exit(1 if errors else 0)
EOF
}

run_checks "$root"

if [ "$self_test" = 1 ]; then
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    expect_failure() { # what, then the tree is checked and must fail
        if run_checks "$scratch/t" >"$scratch/out" 2>&1; then
            echo "check.sh self-test: $1 was not caught" >&2
            exit 1
        fi
        grep -q "$2" "$scratch/out" || { echo "check.sh self-test: $1: wrong report" >&2; exit 1; }
    }
    fresh() {
        rm -rf "$scratch/t"
        mkdir -p "$scratch/t"
        cp -r "$root/src" "$scratch/t/src"
    }
    fresh
    printf '#include "router/router.h"\n' >>"$scratch/t/src/query/sort.c"
    expect_failure "an upward include" 'sort.c:.*includes "router/'
    fresh
    printf 'static void f(void) { SHL_LOG_DEBUG(2, SHARDING, 6872501, "again"); }\n' \
        >>"$scratch/t/src/shard/shard.c"
    expect_failure "a reused log id" 'log id 6872501 is already used'
    fresh
    sed -i 's/\$<LINK_LIBRARY:WHOLE_ARCHIVE,shl_query>/shl_query/' "$scratch/t/src/query/CMakeLists.txt"
    expect_failure "a test binary not linked whole" 'query_test does not link'
    echo "check: self-test passed (bad include, reused log id, partial link each caught)"
fi
