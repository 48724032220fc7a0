#!/usr/bin/env bash
# Make this cluster's Ray auth token when it does not exist yet (mode 0600) and print its path; the
# token itself is never printed. start_head.sh does the same on its own; run this first when the
# token must exist before the head starts (a container that mounts it, a copy to the other nodes).
#
# Usage: bash scripts/cluster/make_token.sh            # RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token
#        RAY_AUTH_TOKEN_PATH=/shared/me/ray_token bash scripts/cluster/make_token.sh
set -euo pipefail
# shellcheck source=scripts/cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
case "${1:-}" in -h | --help) usage_from_header "$0"; exit 0 ;; "") ;; *) die "unknown argument '$1' (see --help)" ;; esac
[ -z "${RAY_AUTH_TOKEN:-}" ] || die "RAY_AUTH_TOKEN is set: that value is the token; unset it to use a token file"
use_cluster_token head
cluster_token_path
