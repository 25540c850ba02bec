# Sourced by the GPU checks that watch a run that may hang (nccl.sh, stall.sh).
# dump_stacks PID LOG: every thread's stack of PID appended to LOG (gdb or cuda-gdb, else
# eu-stack, else each thread's name and wchan).
dump_stacks() {
  local pid=$1 log=$2 dbg task
  dbg=$(command -v gdb || command -v cuda-gdb)
  if [ -n "$dbg" ]; then
    timeout 90 "$dbg" -p "$pid" -batch -ex "thread apply all bt 20" 2>&1 |
      grep -E "^Thread|^#" >>"$log"
  elif command -v eu-stack >/dev/null; then
    timeout 60 eu-stack -p "$pid" >>"$log" 2>&1
  else
    for task in /proc/$pid/task/*; do
      echo "-- $task $(cat "$task/comm") $(cat "$task/wchan" 2>/dev/null)" >>"$log"
    done
  fi
}
