# What a unit's launcher becomes once its service is forked (services/supervisor/fork_client.py):
# the unit's main process for as long as the service runs.
#
#   /bin/sh unit_waiter.sh PID STOP_ASKED     fd 3: the launcher's connection to the fork server
#
# systemd only follows the processes it started itself: a main process handed over with MAINPID=
# is one systemd 252 does not wait for on stop (it sends SIGKILL right after SIGTERM), and whose
# end it learns only when the unit's cgroup is empty. So the process systemd started stays, as
# this: it passes a SIGTERM or SIGINT on to the service and, when the service has ended, ends as
# it did. Every unit keeps one beside its service, which is why it is a shell script: a POSIX
# shell costs ~0.4 MiB where the smallest Python interpreter costs ~4.7 MiB (seven units: 30 MiB).
#
# How the service ended comes on fd 3 as one line, "exit CODE" (negative: killed by that signal),
# written by the fork server, which reaps it. The service holds its own copy of the server's end
# of the connection (close-on-exec) for as long as it runs, so the line or the end of the
# connection comes only once the service has ended, even if the server has stopped meanwhile
# (then there is no line and no word on how).
#
# The service is signalled by pid. The pid cannot name another process while the fork server has
# not reaped it, and once it has, the line that ends this script is already on its way: a stop
# would have to arrive within those microseconds and the kernel hand the pid out again within
# them. A stop from systemd reaches the service directly as well (KillMode=control-group signals
# every process of the unit).

pid=$1
stop_asked=$2
signals=0

pass_on() {
    stop_asked=1
    signals=$((signals + 1))
    kill -s "$1" "$pid" 2>/dev/null
}
trap 'pass_on TERM' TERM
trap 'pass_on INT' INT

# A signal interrupts `read` (dash) and what it had read of the line comes back with its failure:
# kept, and read on. A failure with no signal handled meanwhile is the end of the connection.
word=
while :; do
    seen=$signals
    if IFS= read -r line <&3; then
        word=$word$line
        break
    fi
    word=$word$line
    [ "$signals" != "$seen" ] || break
done

code=
case $word in
    "exit "*) code=${word#exit } ;;
esac
case ${code#-} in
    "" | *[!0-9]*) code= ;;
esac
if [ -z "$code" ]; then
    echo "pykubelet: pid $pid ended and the fork server, which reaps it, did not say how" >&2
    [ "$stop_asked" = 1 ] && exit 0
    exit 1
fi
if [ "$code" -ge 0 ]; then
    exit "$code"
fi
# Killed by a signal: end by the same one (its default action), as systemd would have seen the
# service end. A signal whose default does not end a process leaves the shell's convention.
trap - TERM INT
kill "-$((-code))" $$
exit $((128 - code))
