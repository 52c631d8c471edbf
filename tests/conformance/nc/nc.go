// nc: the part of netcat the e2e pod-networking specs use inside the agnhost image
// (`echo hostName | nc -w 1 -u IP PORT`): send stdin to IP:PORT over UDP or TCP and print
// what comes back until -w seconds pass without an answer. Built static by
// `deploy/build-kube.sh e2e`; Debian's busybox nc has no -u.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	udp := flag.Bool("u", false, "UDP instead of TCP")
	wait := flag.Int("w", 5, "seconds to wait for the connection and for an answer")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: nc [-u] [-w SEC] HOST PORT")
		os.Exit(2)
	}
	network := "tcp"
	if *udp {
		network = "udp"
	}
	timeout := time.Duration(*wait) * time.Second
	conn, err := net.DialTimeout(network, net.JoinHostPort(flag.Arg(0), flag.Arg(1)), timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nc:", err)
		os.Exit(1)
	}
	defer conn.Close()
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nc: reading stdin:", err)
		os.Exit(1)
	}
	if _, err := conn.Write(input); err != nil {
		fmt.Fprintln(os.Stderr, "nc:", err)
		os.Exit(1)
	}
	buf := make([]byte, 65536)
	for {
		conn.SetReadDeadline(time.Now().Add(timeout))
		n, err := conn.Read(buf)
		os.Stdout.Write(buf[:n])
		if err != nil {
			return
		}
	}
}
