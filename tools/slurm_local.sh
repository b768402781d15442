#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the tests of profiles/slurm (as root):
#   tools/slurm_local.sh start     install (Debian packages, idempotent), write the config, start
#                                  munged, slurmctld and slurmd, wait until the node takes jobs
#   tools/slurm_local.sh stop      stop the three daemons this script started
#   tools/slurm_local.sh status    sinfo, or exit 1 when the cluster is not up
# The node declares one `gpu` GRES (gres.conf `File=/dev/null`) so that the rules asking for
# `gpu=1` schedule on a machine without a GPU; there is no accounting daemon (snakemake then needs
# `--slurm-status-command squeue`). The config must lie at /etc/slurm/slurm.conf: the job step does
# not pass SLURM_CONF on. The node reports the CPUs and memory written below, not the machine's
# (SlurmdParameters=config_overrides), so that the GPU rules' requests (8 cores, 32 GB) fit on a
# small machine: this cluster tests scheduling and records, not capacity.
set -euo pipefail

CONF_DIR=/etc/slurm
STATE=${REPRO_SLURM_STATE:-/var/lib/repro-slurm}
NODE_CPUS=${REPRO_SLURM_NODE_CPUS:-16}
NODE_MEM_MB=${REPRO_SLURM_NODE_MEM_MB:-65536}
PACKAGES=(munge slurmctld slurmd slurm-client)

die() { echo "slurm_local: $*" >&2; exit 1; }

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
    if ((${#missing[@]})); then
        echo "slurm_local: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

write_config() {
    local host; host=$(hostname -s)
    mkdir -p "$CONF_DIR" "$STATE"/{ctld,slurmd,log}
    cat > "$CONF_DIR/slurm.conf" <<EOF
# Written by tools/slurm_local.sh: one node, no accounting (repro's CI cluster).
ClusterName=repro
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# 2 s, not the default 10: Snakemake's SLURM plugin runs `scontrol show config` whenever Snakemake
# starts, which with the daemons stopped waits MessageTimeout - 1 s (9 s of every no-op rerun).
MessageTimeout=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
NodeName=$host CPUs=$NODE_CPUS RealMemory=$NODE_MEM_MB Gres=gpu:1 State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    echo "Name=gpu File=/dev/null" > "$CONF_DIR/gres.conf"
}

running() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    [[ $EUID -eq 0 ]] || die "run as root (it installs packages and starts daemons)"
    install_packages
    write_config
    [[ -s /etc/munge/munge.key ]] || { mungekey --create --force; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
    mkdir -p /run/munge && chown munge:munge /run/munge
    if ! running /run/munge/munged.pid; then
        runuser -u munge -- /usr/sbin/munged
    fi
    running "$STATE/slurmctld.pid" || /usr/sbin/slurmctld
    running "$STATE/slurmd.pid" || /usr/sbin/slurmd
    # The node is up once it is idle; srun blocks while the node is down, hence the timeouts.
    local host; host=$(hostname -s)
    for _ in $(seq 60); do
        state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
        [[ $state == idle* || $state == mix* || $state == alloc* ]] && break
        sleep 1
    done
    [[ $state == idle* || $state == mix* || $state == alloc* ]] || { tail -20 "$STATE"/log/*.log >&2; die "node $host is '${state:-unknown}', not idle"; }
    timeout 60 srun -N1 -n1 --gres=gpu:1 true || die "srun on the node failed or timed out"
    echo "slurm_local: up (node $host, partition main, config $CONF_DIR/slurm.conf)"
}

stop() {
    for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" /run/munge/munged.pid; do
        if running "$pidfile"; then
            pid=$(cat "$pidfile")
            kill "$pid"
            for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        fi
    done
    echo "slurm_local: stopped"
}

status() {
    running "$STATE/slurmctld.pid" && running "$STATE/slurmd.pid" || { echo "slurm_local: not running"; exit 1; }
    sinfo
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac
