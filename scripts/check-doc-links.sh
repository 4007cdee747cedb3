#!/usr/bin/env bash
# Fails naming every relative link in the repository's Markdown files whose
# target file does not exist (a page moved or renamed without its links).
#   scripts/check-doc-links.sh [SOURCE_DIR]
set -euo pipefail
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
cd "$root"
bad=0
checked=0
while IFS= read -r md; do
  dir=$(dirname "$md")
  # Link targets: ](target) or ](target#anchor), not URLs or absolute paths.
  while IFS= read -r target; do
    case "$target" in
      *://* | mailto:* | /* | '#'*) continue ;;
    esac
    path=${target%%#*}
    checked=$((checked + 1))
    if [ ! -e "$dir/$path" ]; then
      echo "$md: broken link ($target)" >&2
      bad=$((bad + 1))
    fi
  done < <(grep -o '](\([^)[:space:]]*\))' "$md" | sed 's/^](\(.*\))$/\1/')
done < <(git ls-files '*.md')
if [ "$checked" -eq 0 ]; then
  echo "no links found: is $root a sluice checkout?" >&2
  exit 1
fi
if [ "$bad" -ne 0 ]; then
  echo "$bad broken link(s) of $checked" >&2
  exit 1
fi
echo "doc links: $checked checked, all resolve"
