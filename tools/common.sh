# Sourced by the tools' two-process scripts (client-server.sh, umad-floor.sh).

# wait_for_listening LOG PID: until the server PID has written "server:
# listening" to LOG, exited, or 60 s have passed.
wait_for_listening() {
  for _ in $(seq 1 600); do
    grep -q 'server: listening' "$1" && return
    kill -0 "$2" 2>/dev/null || return
    sleep 0.1
  done
}
