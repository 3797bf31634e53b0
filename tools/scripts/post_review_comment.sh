#!/usr/bin/env bash
# Post the review comment on a pull request, or update the one this workflow posted before.
#
# Usage: post_review_comment.sh <pull request number> <comment file>
# Environment: GITHUB_REPOSITORY (owner/name), GH_TOKEN (pull-requests: write); runs the GitHub CLI
# (gh, on GitHub's runners). The earlier comment is the first one by github-actions[bot] whose body
# starts with the review's marker line (operator_tools/review_comment.py MARKER).
set -euo pipefail

pull_request="$1"
body_file="$2"
marker='<!-- trainium-review -->'
comments="repos/${GITHUB_REPOSITORY}/issues/${pull_request}/comments"

existing=$(gh api --paginate "$comments" \
  --jq ".[] | select(.user.login == \"github-actions[bot]\" and (.body | startswith(\"${marker}\"))) | .id" |
  head -n 1)
if [[ -n "$existing" ]]; then
  gh api --method PATCH "repos/${GITHUB_REPOSITORY}/issues/comments/${existing}" -F "body=@${body_file}" >/dev/null
  echo "updated review comment ${existing} on #${pull_request}"
else
  gh api --method POST "$comments" -F "body=@${body_file}" >/dev/null
  echo "posted the review comment on #${pull_request}"
fi
