#!/usr/bin/env bash
# A one-node Slurm on localhost for the `slurm` tests (tests/integration/test_slurm*.cpp) and for
# trying `wmbatch submit --slurm` by hand. Debian 12, as root, no systemd. Follows the recipe in
# ../shared/slurm/README.md: Debian's slurm-wlm (22.05) + munge, proctrack/linuxproc, task/none.
#
#   scripts/slurm-local.sh install   apt-get install slurm-wlm munge when missing (exit 3 if it can't)
#   scripts/slurm-local.sh start     write /etc/slurm/slurm.conf, start munged, slurmctld, slurmd;
#                                    wait until the node is idle (exit 4 if it never is)
#   scripts/slurm-local.sh stop      stop what `start` started, by PID; leaves no state that
#                                    breaks the next start (slurmctld runs with -i)
#   scripts/slurm-local.sh status    sinfo
#
# PIDs and logs are in $WM_SLURM_DIR (default /tmp/wmbatch-slurm). The daemons' output goes to log
# files, never to this script's stdout, so a caller reading our output until EOF does not hang.
# /etc/slurm/slurm.conf is written only when it is absent or was written by this script; a
# slurm.conf of someone else is left alone and `start` fails (exit 5).
set -uo pipefail

DIR=${WM_SLURM_DIR:-/tmp/wmbatch-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by wmbatch scripts/slurm-local.sh"

log() { echo "slurm-local: $*" >&2; }

installed() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
    command -v munged >/dev/null && [ -f /etc/munge/munge.key ]
}

cmd_install() {
  installed && return 0
  if [ "$(id -u)" -ne 0 ]; then
    log "not root: cannot install slurm-wlm and munge"
    return 3
  fi
  log "installing slurm-wlm munge"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq slurm-wlm munge >"$DIR/apt.log" 2>&1; then
    apt-get update -qq >>"$DIR/apt.log" 2>&1
    apt-get install -y -qq slurm-wlm munge >>"$DIR/apt.log" 2>&1
  fi
  installed || { log "apt-get could not install slurm-wlm/munge (see $DIR/apt.log)"; return 3; }
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pid() {  # stop_pid PIDFILE NAME
  local pidfile=$1 name=$2 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name ($pid) did not stop; killing it"
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$pidfile"
}

cmd_stop() {
  stop_pid "$DIR/slurmd.pid" slurmd
  stop_pid "$DIR/slurmctld.pid" slurmctld
  # munged only when we started it (its own pid file is in /run/munge).
  if [ -f "$DIR/munged.started" ]; then
    stop_pid /run/munge/munged.pid munged
    rm -f "$DIR/munged.started"
  fi
  return 0
}

cmd_start() {
  mkdir -p "$DIR"
  cmd_install || return $?
  if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid"; then
    log "already running"
    return 0
  fi
  cmd_stop
  if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    log "$CONF exists and was not written by this script; not touching it"
    return 5
  fi
  local host
  host=$(hostname)  # NodeName and SlurmctldHost must be this name
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /run/munge "$DIR/log"
  cat >"$CONF" <<EOC
$MARK
ClusterName=ci
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmUser=root
SlurmctldLogFile=$DIR/log/ctld.log
SlurmdLogFile=$DIR/log/d.log
# A requeued or cancelled task gets SIGTERM and stops at its next slice boundary; KillWait is
# only how long a busy machine may take for that before SIGKILL.
KillWait=60
# A requeued job is held back cred_expire + 1 seconds (BeginTime): the old run's credential,
# revoked with the requeue's time stamp, must be older than the new run's, or slurmd refuses the
# launch and slurmctld kills the job (it never runs again). 30 s instead of 120 keeps the requeue test short while
# leaving a launch, on a busy machine, its credential for 30 s.
AuthInfo=cred_expire=30
# A pending job whose BeginTime has passed starts on the next scheduling pass (default 60 s).
SchedulerParameters=sched_interval=10
MinJobAge=600
NodeName=$host CPUs=$(nproc) RealMemory=2000 State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOC
  chown munge:munge /run/munge
  if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- munged || { log "munged did not start"; return 4; }
    touch "$DIR/munged.started"
  fi
  # -i: start even when an earlier controller's state files are damaged (its finished jobs are
  # recovered and purged after MinJobAge; job ids go on, so slurmd's saved credentials never
  # meet a reused id).
  nohup slurmctld -D -i </dev/null >"$DIR/log/ctld.out" 2>&1 &
  echo $! >"$DIR/slurmctld.pid"
  nohup slurmd -D </dev/null >"$DIR/log/d.out" 2>&1 &
  echo $! >"$DIR/slurmd.pid"
  for _ in $(seq 60); do
    if sinfo -h -o '%t' 2>/dev/null | grep -qx 'idle'; then
      log "node $host idle"
      return 0
    fi
    sleep 0.5
  done
  log "the node never became idle:"
  sinfo >&2
  tail -n 20 "$DIR/log/ctld.log" "$DIR/log/d.log" >&2
  cmd_stop
  return 4
}

mkdir -p "$DIR"
case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) sinfo ;;
  *)
    echo "usage: $0 install|start|stop|status" >&2
    exit 64
    ;;
esac
