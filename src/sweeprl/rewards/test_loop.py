"""The part of a unit-test reward's sandbox script that runs the tests: each test in its own process under its own
timeout, so a failing, raising or looping test does not hide the others, and a test whose code started processes
fails. Shared by the OCaml and Python rewards; their scripts set ``ttimeout`` (seconds per test) and ``nonce``.

In our own PID namespace (bubblewrap) PIDs are allocated one after another, so the PIDs a test run used tell
whether the tested code started processes (``Sys.command``, ``subprocess``, fork): such a run fails and its
processes die. The PID is read with a shell builtin (no fork: a fork bomb may have used up the process limit), and
a failed read counts as "spawned" (fail closed).

``nonce`` (empty: off) is a secret the script read from a file and deleted before any model-written code ran; the
test command gets it on stdin and must print ``<nonce> <verdict>`` as its last line, so code that prints a verdict
itself and exits does not pass.
"""

TEST_LOOP = r"""
lastpid() { read -r LP < /proc/sys/kernel/ns_last_pid 2>/dev/null || LP=-1; }
clean=0
# the baseline has exactly the shape of a test run below (bash forks differently with a redirection)
if [ -n "$SANDBOX_PIDNS" ]; then
  lastpid; a=$LP; r=$(timeout -s KILL $ttimeout true 2>/dev/null <<<"$nonce") || true; lastpid; b=$LP; clean=$((b-a))
fi
run_tests() {  # $1 = first test index, $2 = count, then the command: test j runs as "<command> j"
  first=$1; count=$2; shift 2
  j=0
  while [ $j -lt $count ]; do
    lastpid; a=$LP
    r=$(timeout -s KILL $ttimeout "$@" $j 2>/dev/null <<<"$nonce") || true
    lastpid; b=$LP
    if [ -n "$nonce" ]; then
      r=${r##*$'\n'}
      case "$r" in "$nonce "*) r=${r#"$nonce "} ;; *) r="" ;; esac
    fi
    [ -z "$r" ] && r=TIMEOUT_OR_CRASH
    if [ -n "$SANDBOX_PIDNS" ] && { [ $a -lt 0 ] || [ $b -lt 0 ] || [ $((b-a)) -gt $clean ]; }; then
      r=SPAWNED_PROCESSES; kill -9 -1 2>/dev/null
    fi
    echo "TEST $((first+j)) $r"; j=$((j+1))
  done
}
"""
