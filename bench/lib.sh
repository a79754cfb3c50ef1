# Shared by the bench scripts (sourced, from the repository root).

# A throwaway CA under $OUT/tls, two MariaDB servers with TLS and the canary schema on $DB_PORT
# (primary) and $DB_PORT + 1 (secondary), names mysql-<branch>.localhost in their certificates.
# Sets TLS and exports READYPROBE_MYSQL_PASSWORD; appends each data directory to the caller's
# `dbs` array (stop them with `infra/local/mariadb.sh stop DIR`).
start_mariadb_pair() {
  local b port
  infra/local/mariadb.sh install
  TLS=$OUT/tls
  mkdir -p "$TLS"
  ( cd "$TLS"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj "/CN=readyprobe bench CA" -keyout ca.key -out ca.pem 2>/dev/null
    for b in primary secondary; do
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=mysql-$b.localhost" -keyout "$b.key" -out "$b.csr" 2>/dev/null
      printf 'subjectAltName=DNS:mysql-%s.localhost\n' "$b" > "$b.ext"
      openssl x509 -req -in "$b.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile "$b.ext" -out "$b.pem" 2>/dev/null
    done )
  export READYPROBE_MYSQL_PASSWORD
  READYPROBE_MYSQL_PASSWORD=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
  for b in primary secondary; do
    port=$DB_PORT; [ "$b" = secondary ] && port=$((DB_PORT + 1))
    rm -rf "${OUT:?}/db-$b"
    dbs+=("$OUT/db-$b")
    infra/local/mariadb.sh start "$b" "$port" "$OUT/db-$b" "$TLS/$b.pem" "$TLS/$b.key" "$TLS/ca.pem" "$READYPROBE_MYSQL_PASSWORD"
  done
}
