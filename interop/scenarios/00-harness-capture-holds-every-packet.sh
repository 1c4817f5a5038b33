# The harness itself (issue 13 point 4): a capture is stopped only once it
# holds every packet its filter took. Five times: a new capture; A sends a
# burst of 100 UDP datagrams to B's port 4791 (RoCE's: tcpdump's filter takes
# them, B's rxe drops them as malformed RoCE) and ends the capture at once,
# as the shortest scenario does; the pcap must hold all of them. Before the fix
# the capture was stopped 0.3 s after the last packet, and libpcap hands
# packets to tcpdump in blocks that wait up to 1 s: "40 packets received by
# filter", "0 packets captured", in most rounds. And libpcap's default 2 MiB
# ring held only 32 packets of the VM's NIC (64 KiB frames, for GRO): "tcpdump
# wrote 32 of the 40 packets its filter took (8 dropped by the kernel)" in one
# fresh-clone run of four; lib.sh gives tcpdump 32 MiB (-B). 100 is three
# times what the old ring held.
. "$(dirname "$0")/../lib.sh" "$@"
N=100
for round in 1 2 3 4 5; do
  scenario_start
  # bash's /dev/udp: no process to start, the burst leaves at once.
  for ((i = 0; i < N; i++)); do echo "ibcm-interop capture check $i" > "/dev/udp/$SRT_PEER_IP/4791"; done
  check_capture
  got=$(tshark -r "$PCAP" -Y "udp.dstport == 4791 && ip.src == $SRT_SELF_IP" 2>/dev/null | wc -l)
  echo "$SCENARIO: round $round: $got of $N datagrams in the capture; tcpdump: $(grep -E 'captured|received|dropped' "$OUT/$SCENARIO.tcpdump.log" | paste -sd, -)"
  [ "$got" -eq $N ] || fail "round $round: the capture holds $got of the $N datagrams sent"
done
pass
