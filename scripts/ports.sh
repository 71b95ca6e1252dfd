# Loopback ports for the servers the scripts start (sourced, not run).
#
#   port_busy PORT     true when something accepts connections on 127.0.0.1:PORT
#   free_port          one port nothing listens on now
#   free_ports N       N distinct such ports
#
# Ports are picked below the kernel's ephemeral range: an outgoing connection (a test's
# client, a Galera member's client port) can hold any port in that range as its source
# port, which nothing detects by connecting to it, and the server's bind then fails with
# "Address already in use". The caller binds the port soon after and, where a race with
# another test is possible, retries on a bind failure.

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

ports_low_bound() {
  local low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((low > 21000)) || low=32768
  echo "$low"
}

free_ports() {
  local -A seen=()
  local n=0 p low
  low=$(ports_low_bound)
  while ((n < $1)); do
    p=$((20000 + RANDOM % (low - 20000)))
    [[ -n ${seen[$p]:-} ]] && continue
    port_busy "$p" && continue
    seen[$p]=1
    echo "$p"
    n=$((n + 1))
  done
}

free_port() { free_ports 1; }
