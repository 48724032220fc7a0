#!/usr/bin/env bash
# Shared helpers for scripts/cluster/*.sh. Sourced, never run: it only defines functions and defaults.
# shellcheck shell=bash

# Repository root (scripts/cluster/.. /..), whatever the caller's working directory.
COPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export COPO_ROOT

# The environment variables a job's config reads (paths and cluster shape: the ${oc.env:...} of
# recipe/copo/config/*.yaml; tests/scripts/test_static_cluster.py checks the two agree). submit.sh
# forwards them to the job when set; launch_ray keeps them out of the Ray daemons, so a job sees only
# the values that were validated at submission, never a node's own.
COPO_JOB_ENV_VARS="MODEL_PATH DATA_DIR CKPT_DIR NNODES GPUS_PER_NODE"


# Token authentication: every cluster script runs Ray with RAY_AUTH_MODE=token. A `ray start --head`
# without it (Ray 2.60 turns tokens on by itself only for ray.init's local clusters, or when a token
# already exists) accepts jobs, i.e. code to run on every node, from anyone who reaches its ports.
# The token is a file readable by its owner alone: RAY_AUTH_TOKEN_PATH, else Ray's own default
# ~/.ray/auth_token (or the value of RAY_AUTH_TOKEN, which Ray reads first). No script prints it.

# cluster_token_path: the token file this node uses.
cluster_token_path() {
  echo "${RAY_AUTH_TOKEN_PATH:-${HOME:?HOME is not set; set RAY_AUTH_TOKEN_PATH}/.ray/auth_token}"
}

# make_cluster_token PATH: write a new random token (256 bits, hex) to PATH, mode 0600, atomically
# (a temporary file in the same folder, renamed; an existing file is never overwritten).
make_cluster_token() {
  local path=$1 dir tmp
  dir="$(dirname "$path")"
  (umask 077 && mkdir -p "$dir") || die "cannot create the token's folder $dir"
  tmp="$(umask 077 && mktemp "$dir/.auth_token.XXXXXX")" || die "cannot write in $dir"
  od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp"
  chmod 600 "$tmp"
  if ! mv -n "$tmp" "$path" || [ -f "$tmp" ]; then
    rm -f "$tmp"
  fi
  [ -s "$path" ] || die "could not create the Ray auth token at $path"
}

# use_cluster_token ROLE: turn on token authentication for ROLE's Ray commands (head, worker, client).
# The head makes a token when none exists and says where; a worker or a client needs the head's
# token already in place (see docs/CLUSTER.md, "Who may use the cluster"). Refuses RAY_AUTH_MODE other than
# token, and a token file that others may read.
use_cluster_token() {
  local role=$1 path mode
  case "${RAY_AUTH_MODE:-token}" in
    token) ;;
    *) die "RAY_AUTH_MODE=$RAY_AUTH_MODE: the copo-verl cluster scripts always run Ray with token \
authentication (without it anyone who reaches the head's ports can run code on every node); unset RAY_AUTH_MODE" ;;
  esac
  export RAY_AUTH_MODE=token
  if [ -n "${RAY_AUTH_TOKEN:-}" ]; then
    log "Ray token authentication: the token comes from RAY_AUTH_TOKEN"
    return 0
  fi
  path="$(cluster_token_path)"
  if [ ! -e "$path" ]; then
    [ "$role" = head ] || die "no Ray auth token at $path. Token authentication is on: copy the head's \
token file to this path (mode 0600; e.g. \`scp -p HEAD:.ray/auth_token $path\`), or set RAY_AUTH_TOKEN_PATH to \
where it is (a shared filesystem works); never paste it into a command line or a committed file"
    make_cluster_token "$path"
    log "created a new Ray auth token at $path (mode 0600; the token itself is not shown). Every other \
node and every client needs this same file: see docs/CLUSTER.md, \"Who may use the cluster\""
  fi
  [ -f "$path" ] && [ -s "$path" ] || die "the Ray auth token $path is not a non-empty file"
  mode="$(stat -c '%a' "$path")"
  if (( 8#$mode & 8#077 )); then
    die "the Ray auth token $path has mode $mode: others on this machine could read it and run code on \
the cluster. Run: chmod 600 $path"
  fi
  export RAY_AUTH_TOKEN_PATH=$path
  log "Ray token authentication: token file $path"
}

# job_status ADDRESS ID: the Ray job's status word (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED),
# empty when it cannot be read right now. Ray 2.60's CLI says it on stderr, in words for the end states
# ("Job 'ID' succeeded", "... was stopped", "... failed") and as "Status for job 'ID': RUNNING" otherwise.
job_status() {
  local out
  out="$("$(ray_bin)" job status --address="$1" "$2" 2>&1)" || true
  case "$out" in
    *"'$2' succeeded"*) echo SUCCEEDED ;;
    *"'$2' was stopped"*) echo STOPPED ;;
    *"'$2' failed"*) echo FAILED ;;
    *) grep -Eo "(PENDING|RUNNING|SUCCEEDED|FAILED|STOPPED)" <<<"$out" | tail -n 1 || true ;;
  esac
}

# follow_job ADDRESS ID: stream the job's logs until it ends; return 0 if it SUCCEEDED, 1 otherwise.
# A log stream that drops (network blip, head busy, client exits non-zero) is NOT the job's end: the
# job's status decides, and the stream is reopened while it runs. (Under Slurm, the allocation lives
# exactly as long as this function.)
follow_job() {
  local address=$1 id=$2 status rc
  while :; do
    rc=0
    "$(ray_bin)" job logs --address="$address" --follow "$id" || rc=$?
    status="$(job_status "$address" "$id")"
    case "$status" in
      SUCCEEDED) log "job $id SUCCEEDED"; return 0 ;;
      FAILED | STOPPED) log "job $id $status"; return 1 ;;
    esac
    log "log stream of job $id ended (exit $rc) while its status is '${status:-unknown}'; reopening in ${FOLLOW_RETRY_S:-30} s"
    sleep "${FOLLOW_RETRY_S:-30}"
  done
}

# Where start_*.sh record what they started, so stop.sh stops exactly that and nothing else.
COPO_RAY_STATE_DIR="${COPO_RAY_STATE_DIR:-${HOME:-/tmp}/.cache/copo-verl/ray}"

die() {
  echo "[cluster] ERROR: $*" >&2
  exit 1
}

log() {
  echo "[cluster] $*" >&2
}

# usage_from_header FILE: print the comment block at the top of FILE (after the shebang) as help text.
usage_from_header() {
  sed -n '2,/^[^#]/p' "$1" | sed -e '/^[^#]/d' -e 's/^# \{0,1\}//'
}

# load_env_file PATH: export every assignment in PATH (KEY=VALUE lines, shell syntax). Variables
# already set in the caller's environment win, so `GPUS_PER_NODE=4 bash start_head.sh` still works.
load_env_file() {
  local file=$1
  [ -f "$file" ] || die "env file '$file' does not exist (set ENV_FILE or --env-file to an existing file; \
template: scripts/cluster/cluster.env.example)"
  local line key
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line#"${line%%[![:space:]]*}"}"
    case "$line" in '' | '#'*) continue ;; esac
    line="${line#export }"
    key="${line%%=*}"
    [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "env file '$file': bad line '$line' (expected KEY=VALUE)"
    if [ -z "${!key+x}" ]; then
      # eval so quoting in the file behaves as in a shell script; the file is the user's own config.
      eval "export $line"
    fi
  done <"$file"
}

# require_cmd NAME HINT: fail with HINT when NAME is not on PATH.
# Arguments shared by start_head.sh and start_worker.sh: --help, --env-file FILE (loaded here),
# --dry-run (sets DRY_RUN=1), and everything after `--` into the EXTRA array (extra `ray start` args).
# shellcheck disable=SC2034  # EXTRA and DRY_RUN are read by the calling script
parse_start_args() {
  EXTRA=()
  while [ $# -gt 0 ]; do
    case "$1" in
      -h | --help) usage_from_header "$0"; exit 0 ;;
      --env-file) [ $# -ge 2 ] || die "--env-file needs a path"; ENV_FILE=$2; shift 2 ;;
      --dry-run) DRY_RUN=1; shift ;;
      --) shift; EXTRA=("$@"); break ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  if [ -n "${ENV_FILE:-}" ]; then load_env_file "$ENV_FILE"; fi
}

require_cmd() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH. $2"
}

# require_int NAME VALUE: fail unless VALUE is a non-negative integer.
require_int() {
  [[ "$2" =~ ^[0-9]+$ ]] || die "$1='$2' must be a non-negative integer"
}

# detect_gpus: number of NVIDIA GPUs visible here (0 when nvidia-smi is missing).
detect_gpus() {
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    local ids
    IFS=',' read -r -a ids <<<"$CUDA_VISIBLE_DEVICES"
    echo "${#ids[@]}"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU' || true
  else
    echo 0
  fi
}

# is_loopback IP: true for 127.0.0.0/8 (hostname --ip-address often answers 127.0.1.1 on Debian/Ubuntu).
is_loopback() {
  case "$1" in 127.* | ::1 | localhost) return 0 ;; *) return 1 ;; esac
}

# detect_ip: the IPv4 address other nodes reach this one at, found in this order: the interface
# named by NODE_IFNAME / GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME (the one NCCL and gloo use), the
# source address of the default route (`ip route get`, a routing-table lookup that sends nothing),
# then the first address of `hostname -I`. Loopback answers are skipped; if nothing else is found
# it fails naming NODE_IP (set it explicitly: 127.0.0.1 is fine only when every node is this machine).
detect_ip() {
  local ip="" candidate ifname=${NODE_IFNAME:-${GLOO_SOCKET_IFNAME:-${NCCL_SOCKET_IFNAME:-}}}
  local -a candidates=() more=()
  if command -v ip >/dev/null 2>&1; then
    if [ -n "$ifname" ]; then
      candidates+=("$(ip -4 -o addr show dev "${ifname%%,*}" 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -n 1)")
    fi
    candidates+=("$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n 1)")
  fi
  if command -v hostname >/dev/null 2>&1; then
    read -r -a more <<<"$(hostname -I 2>/dev/null || true)"
    candidates+=("${more[@]}")
  fi
  for candidate in "${candidates[@]}"; do
    if [ -n "$candidate" ] && ! is_loopback "$candidate"; then
      ip=$candidate
      break
    fi
  done
  [ -n "$ip" ] || die "could not detect a non-loopback IP for this node (found: ${candidates[*]:-none}); \
set NODE_IP to the address the other nodes reach it at (or NODE_IFNAME to its interface)"
  echo "$ip"
}

# url_host HOST: HOST as it goes in a URL that reaches it from this node (a wildcard address means
# NODE_IP; an IPv6 address gets brackets).
url_host() {
  case "$1" in
    0.0.0.0 | :: | "") echo "${NODE_IP:-127.0.0.1}" ;;
    *:*) echo "[$1]" ;;
    *) echo "$1" ;;
  esac
}

# print_cmd ARGS...: the command as one shell-quoted line (copy-pasteable).
print_cmd() {
  local out="" arg
  for arg in "$@"; do
    out+="$(printf '%q' "$arg") "
  done
  echo "${out% }"
}

# ray_start_cmd ROLE_ARGS...: sets CMD to `ray start ROLE_ARGS` plus the flags head and worker share
# (from GPUS_PER_NODE, DASHBOARD_AGENT_PORT, RAY_TEMP_DIR, NUM_CPUS, BLOCK and the EXTRA args); with
# DRY_RUN=1 it prints that command and exits.
ray_start_cmd() {
  CMD=("$RAY" start "$@"
    --num-gpus="$GPUS_PER_NODE"
    --dashboard-agent-listen-port="$DASHBOARD_AGENT_PORT"
    --temp-dir="$RAY_TEMP_DIR"
    --disable-usage-stats)
  [ -z "${NUM_CPUS:-}" ] || CMD+=(--num-cpus="$NUM_CPUS")
  if [ "$BLOCK" = "1" ]; then CMD+=(--block); fi
  CMD+=("${EXTRA[@]}")
  if [ "$DRY_RUN" = "1" ]; then
    print_cmd "${CMD[@]}"
    exit 0
  fi
  [ -x "$RAY" ] || require_cmd "$RAY" 'Install the project first: pip install -e ".[gpu]" (or use docker/Dockerfile).'
}

# python_bin: the interpreter the cluster scripts use (PYTHON, else the active venv's, else python3).
python_bin() {
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
  elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    echo "$VIRTUAL_ENV/bin/python"
  elif [ -x "$COPO_ROOT/.venv/bin/python" ]; then
    echo "$COPO_ROOT/.venv/bin/python"
  else
    echo python3
  fi
}

# ray_bin: the `ray` CLI next to python_bin, else the one on PATH.
ray_bin() {
  local py dir
  py="$(python_bin)"
  dir="$(dirname "$(command -v "$py" 2>/dev/null || echo "$py")")"
  if [ -x "$dir/ray" ]; then
    echo "$dir/ray"
  else
    echo ray
  fi
}

# check_node_env GPUS: verl on this node must match recipe/copo/REQUIRED_VERL.txt and, when GPUS > 0,
# CUDA must see a GPU (SKIP_ENV_CHECK=1 skips both; REQUIRE_CUDA=0 only the second, for logical GPUs
# on a CPU machine, as in the two-node dress rehearsal).
check_node_env() {
  local gpus=$1
  if [ "${SKIP_ENV_CHECK:-0}" = "1" ]; then
    log "SKIP_ENV_CHECK=1: not checking the verl version on this node"
    return 0
  fi
  local -a flags=()
  if [ "$gpus" -gt 0 ] && [ "${REQUIRE_CUDA:-1}" = "1" ]; then flags+=(--gpu); fi
  "$(python_bin)" "$COPO_ROOT/scripts/cluster/check_env.py" "${flags[@]}" \
    || die "this node's Python stack does not match the pin (see above); SKIP_ENV_CHECK=1 to bypass"
}

# wait_for_port HOST PORT TIMEOUT_S: true once a TCP connection to HOST:PORT succeeds.
wait_for_port() {
  local host=$1 port=$2 deadline=$((SECONDS + $3))
  while [ "$SECONDS" -le "$deadline" ]; do
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
    log "waiting for $host:$port ..."
    sleep 5
  done
  return 1
}

# wait_for_raylet TEMP_DIR RAY_PID: wait until the raylet of the session in TEMP_DIR runs (a blocking
# `ray start` never returns, so this is how BLOCK=1 knows Ray is up); return 1 if RAY_PID dies first.
wait_for_raylet() {
  local dir=$1 ray_pid=$2 deadline=$((SECONDS + ${RAY_START_TIMEOUT_S:-180})) pid
  while [ "$SECONDS" -le "$deadline" ]; do
    if [ ! -d "/proc/$ray_pid" ]; then
      log "ray start (pid $ray_pid) exited before its raylet came up; see above"
      return 1
    fi
    for pid in $(ray_pids_for_session "$dir"); do
      case "$(cmdline_of "$pid")" in *raylet/raylet*) return 0 ;; esac
    done
    sleep 2
  done
  die "no raylet for $dir after ${RAY_START_TIMEOUT_S:-180}s"
}

# process_alive PID: true while PID runs (a zombie waiting to be reaped counts as gone).
process_alive() {
  local stat rest
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  rest="${stat##*) }"
  [ "${rest:0:1}" != "Z" ]
}

# kill_session TEMP_DIR [CLIENT_PORT]: SIGTERM, then SIGKILL after 10 s, to every process of that
# Ray session (used to clear the leftovers of a failed `ray start` before retrying).
kill_session() {
  local -a pids
  local pid any deadline=$((SECONDS + 10))
  mapfile -t pids < <(ray_pids_for_session "$1" "${2:-}")
  [ "${#pids[@]}" -gt 0 ] || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  while [ "$SECONDS" -lt "$deadline" ]; do
    any=0
    for pid in "${pids[@]}"; do if process_alive "$pid"; then any=1; fi; done
    [ "$any" = 1 ] || return 0
    sleep 1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

# launch_ray ROLE TEMP_DIR CLIENT_PORT CMD...: run `ray start` CMD, retrying up to RAY_START_ATTEMPTS
# times (on a loaded node Ray's fixed 30 s wait for the raylet to register can expire), then record
# the session for stop.sh. With BLOCK=1 (CMD has --block) stay in the foreground until Ray exits,
# pass SIGTERM/SIGINT on to it, and drop the record at the end.
launch_ray() {
  local role=$1 dir=$2 client_port=$3 attempt=1 rc
  shift 3
  local attempts=${RAY_START_ATTEMPTS:-3} name
  require_int RAY_START_ATTEMPTS "$attempts"
  # Ray's daemons (and so every job's processes) never inherit a job variable from this shell: a job
  # gets those from its submission only (COPO_JOB_ENV_VARS above).
  local -a ray_cmd=(env)
  for name in $COPO_JOB_ENV_VARS; do ray_cmd+=(-u "$name"); done
  ray_cmd+=("$@")
  COPO_RAY_PID=""
  if [ "${BLOCK:-0}" = "1" ]; then
    # shellcheck disable=SC2064  # expand the state path now: it is fixed for this run
    trap "rm -f '$COPO_RAY_STATE_DIR/$(hostname).$role.state'" EXIT
    trap 'if [ -n "$COPO_RAY_PID" ]; then kill -TERM "$COPO_RAY_PID" 2>/dev/null || true; fi' TERM INT
  fi
  while :; do
    if [ "${BLOCK:-0}" = "1" ]; then
      "${ray_cmd[@]}" &
      COPO_RAY_PID=$!
      if wait_for_raylet "$dir" "$COPO_RAY_PID"; then break; fi
    elif "${ray_cmd[@]}"; then
      break
    fi
    kill_session "$dir" "$client_port"
    [ "$attempt" -lt "$attempts" ] || die "ray start failed $attempt time(s); see above"
    log "ray start failed (attempt $attempt of $attempts); cleared its processes, retrying in 5 s"
    attempt=$((attempt + 1))
    sleep 5
  done
  record_ray_state "$role" "$dir" "$client_port"
  [ "${BLOCK:-0}" = "1" ] || return 0
  log "Ray $role up; blocking until Ray exits (BLOCK=1)"
  rc=0
  wait "$COPO_RAY_PID" || rc=$?
  # a trapped signal interrupts `wait`: wait again for Ray's own shutdown
  if [ -d "/proc/$COPO_RAY_PID" ]; then wait "$COPO_RAY_PID" || rc=$?; fi
  exit "$rc"
}

# is_our_ray_cmd CMDLINE TEMP_DIR [CLIENT_PORT]: true when CMDLINE is a Ray daemon of the session in
# TEMP_DIR. Every Ray daemon is a program or module inside the ray package and names the temp dir in
# its arguments, except the head's Ray-client proxy, which is recognised by its port instead.
is_our_ray_cmd() {
  local cmd=$1 dir=$2 client_port=${3:-}
  case "$cmd" in */ray/* | *" -m ray."*) ;; *) return 1 ;; esac
  case "$cmd" in *"$dir"*) return 0 ;; esac
  if [ -n "$client_port" ]; then
    case "$cmd" in *ray.util.client.server*"--port=$client_port "*) return 0 ;; esac
  fi
  return 1
}

# ancestors: this shell and its ancestors, space separated (never candidates for stopping).
ancestors() {
  local pid=$$ out=" " rest _state ppid
  while [ -n "$pid" ] && [ "$pid" -gt 1 ] 2>/dev/null; do
    out+="$pid "
    read -r _ rest 2>/dev/null <"/proc/$pid/stat" || break
    rest="${rest##*) }"
    read -r _state ppid _ <<<"$rest"
    pid=$ppid
  done
  echo "$out"
}

# record_ray_state ROLE TEMP_DIR [CLIENT_PORT]: after `ray start`, write a state file naming the
# session this script started and the PIDs of its processes, so stop.sh can stop exactly those.
record_ray_state() {
  local role=$1 temp_dir=$2 client_port=${3:-} host state pids session
  host="$(hostname)"
  mkdir -p "$COPO_RAY_STATE_DIR"
  state="$COPO_RAY_STATE_DIR/${host}.${role}.state"
  session="$(readlink -f "$temp_dir/session_latest" 2>/dev/null || true)"
  pids="$(ray_pids_for_session "$temp_dir" "$client_port" | tr '\n' ' ')"
  local tmp="$state.tmp.$$"
  {
    echo "ROLE=$role"
    echo "HOST=$host"
    echo "RAY_TEMP_DIR=$temp_dir"
    echo "RAY_CLIENT_PORT=$client_port"
    echo "RAY_SESSION_DIR=$session"
    echo "PIDS=\"${pids% }\""
    if [ -n "${COPO_DASHBOARD_URL:-}" ]; then echo "DASHBOARD_URL=$COPO_DASHBOARD_URL"; fi
    echo "STARTED_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$tmp"
  mv -f "$tmp" "$state" # atomic: stop.sh never reads a half-written file
  log "recorded $role state in $state (pids: ${pids% })"
}

# recorded_dashboard_url: the dashboard URL of the head start_head.sh started on this node (empty if none).
recorded_dashboard_url() {
  local state
  state="$COPO_RAY_STATE_DIR/$(hostname).head.state"
  if [ -f "$state" ]; then sed -n 's/^DASHBOARD_URL=//p' "$state"; fi
}

# refuse_if_running ROLE: stop here if this script's ROLE (head/worker) is already running on this
# machine; a state file whose processes are all gone (node rebooted, Slurm ended the step) is stale
# and is removed.
refuse_if_running() {
  local role=$1 state dir client_port pids pid cmd
  state="$COPO_RAY_STATE_DIR/$(hostname).${role}.state"
  [ -f "$state" ] || return 0
  dir="$(sed -n 's/^RAY_TEMP_DIR=//p' "$state")"
  client_port="$(sed -n 's/^RAY_CLIENT_PORT=//p' "$state")"
  pids="$(sed -n 's/^PIDS="\(.*\)"$/\1/p' "$state")"
  for pid in $pids; do
    cmd="$(cmdline_of "$pid")"
    if [ -n "$cmd" ] && [ -n "$dir" ] && is_our_ray_cmd "$cmd" "$dir" "$client_port"; then
      die "a Ray $role started by this script is running (pid $pid, recorded in $state); run stop.sh first"
    fi
  done
  log "removing stale state file $state (none of its processes is alive)"
  rm -f "$state"
}

# cmdline_of PID: the process's command line with NULs as spaces (empty when it is gone).
cmdline_of() {
  tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" || true
}

# ray_pids_for_session TEMP_DIR [CLIENT_PORT]: PIDs of live processes of that Ray session (see
# is_our_ray_cmd) plus all their descendants (Ray workers rename themselves "ray::..." but stay
# children of the raylet).
ray_pids_for_session() {
  local dir=$1 client_port=${2:-} pid cmd skip
  local -a roots=()
  skip="$(ancestors)$BASHPID "
  for pid in /proc/[0-9]*; do
    pid="${pid#/proc/}"
    case "$skip" in *" $pid "*) continue ;; esac
    cmd="$(cmdline_of "$pid")"
    [ -n "$cmd" ] || continue
    if is_our_ray_cmd "$cmd" "$dir" "$client_port"; then roots+=("$pid"); fi
  done
  [ "${#roots[@]}" -gt 0 ] || return 0
  descendants "${roots[@]}" | sort -un
}

# descendants PID...: the given PIDs and every live descendant, one per line.
descendants() {
  local -A children=()
  local stat pid ppid rest _state
  for stat in /proc/[0-9]*/stat; do
    read -r pid rest 2>/dev/null <"$stat" || continue
    # field 4 (ppid) comes after the ")" that closes the command name, which may contain spaces
    rest="${rest##*) }"
    read -r _state ppid _ <<<"$rest"
    children[$ppid]+="$pid "
  done
  local -a queue=("$@")
  local seen=" "
  while [ "${#queue[@]}" -gt 0 ]; do
    pid="${queue[0]}"
    queue=("${queue[@]:1}")
    case "$seen" in *" $pid "*) continue ;; esac
    seen+="$pid "
    if [ -d "/proc/$pid" ]; then echo "$pid"; fi
    # shellcheck disable=SC2206  # word splitting of the space-separated child list is intended
    queue+=(${children[$pid]:-})
  done
}
