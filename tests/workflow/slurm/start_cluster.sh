#!/usr/bin/env bash
# A throwaway single-node SLURM cluster on localhost, for tests/workflow/test_slurm.py (root only).
#
#   tests/workflow/slurm/start_cluster.sh start DIR   install SLURM + MUNGE if missing (apt), write DIR/slurm.conf,
#                                            start munged, slurmctld, slurmd; wait for the node to be idle
#   tests/workflow/slurm/start_cluster.sh stop DIR    cancel its jobs, end the daemons by their recorded PIDs
#   . DIR/env.sh                             SLURM_CONF and PATH for sbatch/squeue/scontrol and Snakemake
#
# Everything lives in DIR (config, state, spool, logs, MUNGE key and socket, fake GPU devices): no system
# service, /etc or /run file is touched apart from the apt install. The node offers Gres=gpu:fake:2,
# backed by two character devices (copies of /dev/null), so `--gpus=1` jobs are scheduled and get
# CUDA_VISIBLE_DEVICES; there is no GPU behind it.
#
# Exit status of `start`: 0 ready; 2 SLURM/MUNGE cannot be installed; 3 not root; 1 anything else.
# Environment: SLURM_TEST_CTLD_PORT (16817), SLURM_TEST_SLURMD_PORT (16818), SLURM_TEST_WAIT (60 s),
# SLURM_TEST_MEMORY_MB (the node's RealMemory, if below 3/4 of the memory available).
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge)
CTLD_PORT=${SLURM_TEST_CTLD_PORT:-16817}
SLURMD_PORT=${SLURM_TEST_SLURMD_PORT:-16818}
WAIT=${SLURM_TEST_WAIT:-60}
PARTITION=localtest # profiles/slurm/config.yaml names it as default slurm_partition

die() {
    local code=$1
    shift
    echo "start_cluster.sh: $*" >&2
    exit "$code"
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
        command -v munged >/dev/null && command -v mungekey >/dev/null; then
        return 0
    fi
    command -v apt-get >/dev/null || die 2 "SLURM is not installed and there is no apt-get"
    export DEBIAN_FRONTEND=noninteractive
    local apt=(timeout -k 10 300 apt-get install -y -q --no-install-recommends "${PACKAGES[@]}")
    if ! "${apt[@]}" >"$DIR/log/apt.log" 2>&1; then
        # A fresh machine has no package lists yet.
        timeout -k 10 300 apt-get update -q >>"$DIR/log/apt.log" 2>&1 || true
        "${apt[@]}" >>"$DIR/log/apt.log" 2>&1 || {
            tail -n 20 "$DIR/log/apt.log" >&2
            die 2 "apt-get install ${PACKAGES[*]} failed"
        }
    fi
}

# Kill the daemons listed in DIR/pids: SIGTERM to all at once (each takes ~2 s to shut down),
# then SIGKILL to any left after 10 s.
kill_daemons() {
    [[ -f $DIR/pids ]] || return 0
    local name pid i left
    local -a pids=()
    while read -r name pid; do
        # Only if that PID is still our daemon: a daemon that died early may have left its PID to
        # another process (PIDs are reused quickly on a busy machine).
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name .*$DIR" || continue
        kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    done <"$DIR/pids"
    for ((i = 0; i < 100; i++)); do
        left=0
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && left=1
        done
        ((left)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            echo "start_cluster.sh: PID $pid ignored SIGTERM, sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    rm -f "$DIR/pids"
}

stop_cluster() {
    [[ -f $DIR/slurm.conf ]] || return 0
    export SLURM_CONF=$DIR/slurm.conf
    if [[ -f $DIR/pids ]] && grep -q '^slurmctld ' "$DIR/pids"; then
        # End running jobs first, so that no slurmstepd outlives slurmd.
        local jobs i
        jobs=$(timeout -k 2 10 squeue -h -o %i 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            # shellcheck disable=SC2086
            timeout -k 2 10 scancel $jobs 2>/dev/null || true
            for ((i = 0; i < 30; i++)); do
                [[ -z $(timeout -k 2 10 squeue -h -t running,completing -o %i 2>/dev/null) ]] && break
                sleep 0.5
            done
        fi
    fi
    kill_daemons
}

# Start "$@" in the background as a daemon in the foreground mode; record its PID.
spawn() {
    local name=$1
    shift
    "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
    echo "$name $!" >>"$DIR/pids"
}

alive() {
    local name=$1 pid
    pid=$(awk -v n="$name" '$1 == n {print $2}' "$DIR/pids")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

show_logs() {
    local f
    for f in "$DIR"/log/*.log "$DIR"/log/*.out; do
        [[ -s $f ]] || continue
        echo "---- $f" >&2
        tail -n 15 "$f" >&2
    done
}

start_cluster() {
    if [[ -f $DIR/pids ]]; then
        die 1 "$DIR/pids exists: a cluster is running there (stop it first)"
    fi
    mkdir -p "$DIR"/{log,state,spool,munge,dev,bin}
    # munged refuses a socket directory that others can write to (and warns if they cannot enter it).
    chmod 755 "$DIR" "$DIR/munge"
    install_packages

    # From here on, a failure stops whatever was started.
    trap 'rc=$?; if ((rc != 0)); then show_logs; stop_cluster; fi' EXIT

    local node cpus mem_kb mem_mb
    node=$(hostname -s)
    cpus=$(nproc)
    mem_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    # Below what is free now, so slurmd never reports less than the config claims.
    mem_mb=$((mem_kb * 3 / 4 / 1024))
    ((mem_mb >= 1000)) || die 1 "only $((mem_kb / 1024)) MB of memory available"
    # A smaller node than the machine, to check that jobs fit it (SLURM_TEST_MEMORY_MB=4000: a 4 GB node).
    if [[ -n ${SLURM_TEST_MEMORY_MB:-} ]] && ((SLURM_TEST_MEMORY_MB < mem_mb)); then
        mem_mb=$SLURM_TEST_MEMORY_MB
    fi

    # MUNGE with a private key and socket (no /etc/munge or /run/munge involved).
    rm -f "$DIR/munge/munge.key"
    mungekey --create --keyfile="$DIR/munge/munge.key" 2>/dev/null ||
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$DIR/munge/munge.key"
    local socket=$DIR/munge/munge.socket.2
    ((${#socket} < 100)) || die 1 "DIR is too long for a Unix socket path ($socket)"
    spawn munged munged --foreground --force --socket="$socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -S $socket ]] && break
        alive munged || die 1 "munged exited"
        sleep 0.1
    done
    munge -n -S "$socket" | unmunge -S "$socket" >/dev/null || die 1 "munge credential round trip failed"

    # Two fake GPUs: character devices 1:3 (what /dev/null is).
    for i in 0 1; do
        [[ -c $DIR/dev/gpu$i ]] || mknod "$DIR/dev/gpu$i" c 1 3
    done

    cat >"$DIR/slurm.conf" <<EOF
# Written by tests/workflow/slurm/start_cluster.sh: a single-node test cluster on localhost.
ClusterName=miracltest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# Finished jobs stay visible to squeue this long: the Snakemake plugin's status polling
# (slurm-status-command: squeue) must see COMPLETED before a job is purged.
MinJobAge=600
KillWait=5
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb Gres=gpu:fake:2 State=UNKNOWN
PartitionName=$PARTITION Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=$node Name=gpu Type=fake File=$DIR/dev/gpu[0-1]
EOF
    # The slurm jobstep plugin strips SLURM_* (SLURM_CONF too) from the environment of the srun it
    # runs inside each job; this srun restores it.
    cat >"$DIR/bin/srun" <<EOF
#!/bin/sh
SLURM_CONF=$DIR/slurm.conf exec $(command -v srun) "\$@"
EOF
    chmod 755 "$DIR/bin/srun"
    cat >"$DIR/env.sh" <<EOF
export SLURM_CONF=$DIR/slurm.conf
export PATH=$DIR/bin:\$PATH
EOF
    export SLURM_CONF=$DIR/slurm.conf

    spawn slurmctld slurmctld -D -i -f "$SLURM_CONF"
    spawn slurmd slurmd -D -N "$node" -f "$SLURM_CONF"

    local state=""
    for ((i = 0; i < WAIT * 2; i++)); do
        alive slurmctld || die 1 "slurmctld exited"
        alive slurmd || die 1 "slurmd exited"
        state=$(sinfo -h -N -n "$node" -o %T 2>/dev/null || true)
        [[ $state == idle ]] && break
        sleep 0.5
    done
    if [[ $state != idle ]]; then
        sinfo -R >&2 || true
        die 1 "node $node is '${state:-not reported}' after ${WAIT}s, not idle"
    fi
    trap - EXIT
    echo "SLURM_CONF=$SLURM_CONF"
    echo "node=$node cpus=$cpus real_memory_mb=$mem_mb partition=$PARTITION gres=gpu:fake:2"
}

case ${1:-} in
start | stop) ;;
*) die 1 "usage: $0 start|stop DIR" ;;
esac
[[ -n ${2:-} ]] || die 1 "usage: $0 $1 DIR"
[[ $EUID -eq 0 ]] || die 3 "needs root (the daemons run as SlurmUser=root)"
mkdir -p "$2"
DIR=$(cd "$2" && pwd)
"${1}_cluster"
